"""The moderation policy: which flagged categories pass, by channel kind and guild setting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.pipeline.moderation import (
    ALWAYS_WITHHELD,
    CATEGORIES,
    NSFW_ALLOWED,
    NSFW_NEVER_ALLOWED,
    UNNAMED_CATEGORY,
    GuildModeration,
    Verdict,
    guild_allowed_problem,
    moderation_decision,
)

DEFAULT = GuildModeration()
ALLOWS_VIOLENCE = GuildModeration(allowed=frozenset({"violence"}))
ALLOWS_HARASSMENT_AND_HATE = GuildModeration(allowed=frozenset({"harassment", "hate"}))
SMUGGLED = GuildModeration(allowed=frozenset({"sexual/minors", "sexual"}))
"""A list holding sexual/minors (the configuration refuses one; the policy holds anyway)."""

P, W = Verdict.PASS, Verdict.WITHHOLD

# flagged categories, NSFW channel?, guild setting → verdict, blocking categories
TABLE = [
    # Nothing flagged passes everywhere.
    ((), False, DEFAULT, P, ()),
    ((), True, DEFAULT, P, ()),
    # An ordinary channel: every flagged category withholds.
    (("sexual",), False, DEFAULT, W, ("sexual",)),
    (("violence",), False, DEFAULT, W, ("violence",)),
    (("violence/graphic",), False, DEFAULT, W, ("violence/graphic",)),
    (("harassment",), False, DEFAULT, W, ("harassment",)),
    (("sexual/minors",), False, DEFAULT, W, ("sexual/minors",)),
    # An NSFW channel (or a thread in one): sexual, violence, violence/graphic pass.
    (("sexual",), True, DEFAULT, P, ()),
    (("violence",), True, DEFAULT, P, ()),
    (("violence/graphic",), True, DEFAULT, P, ()),
    (("sexual", "violence", "violence/graphic"), True, DEFAULT, P, ()),
    # … and nothing else.
    (("sexual/minors",), True, DEFAULT, W, ("sexual/minors",)),
    (("self-harm/instructions",), True, DEFAULT, W, ("self-harm/instructions",)),
    (("hate/threatening",), True, DEFAULT, W, ("hate/threatening",)),
    (("illicit/violent",), True, DEFAULT, W, ("illicit/violent",)),
    (("harassment",), True, DEFAULT, W, ("harassment",)),
    (("sexual", "sexual/minors"), True, DEFAULT, W, ("sexual/minors",)),
    (("violence", "hate/threatening"), True, DEFAULT, W, ("hate/threatening",)),
    # A guild's list passes in every channel.
    (("violence",), False, ALLOWS_VIOLENCE, P, ()),
    (("violence",), True, ALLOWS_VIOLENCE, P, ()),
    (("violence/graphic",), False, ALLOWS_VIOLENCE, W, ("violence/graphic",)),
    (("sexual",), False, ALLOWS_VIOLENCE, W, ("sexual",)),
    (("sexual",), True, ALLOWS_VIOLENCE, P, ()),
    (("harassment", "hate"), False, ALLOWS_HARASSMENT_AND_HATE, P, ()),
    (("hate", "hate/threatening"), False, ALLOWS_HARASSMENT_AND_HATE, W, ("hate/threatening",)),
    # sexual/minors never passes, even from a list that holds it.
    (("sexual/minors",), False, SMUGGLED, W, ("sexual/minors",)),
    (("sexual/minors",), True, SMUGGLED, W, ("sexual/minors",)),
    (("sexual",), False, SMUGGLED, P, ()),
]


@pytest.mark.parametrize(("flagged", "nsfw", "guild", "verdict", "blocking"), TABLE)
def test_the_policy_table(flagged, nsfw, guild, verdict, blocking):
    decision = moderation_decision(
        flagged=flagged, service_flagged=bool(flagged), nsfw_channel=nsfw, guild=guild
    )
    assert decision.verdict is verdict
    assert decision.blocking == blocking
    assert set(decision.let_through) == set(flagged) - set(blocking)


@pytest.mark.parametrize("nsfw", [False, True])
def test_a_flagged_answer_that_names_no_category_is_withheld(nsfw):
    decision = moderation_decision(
        flagged=(), service_flagged=True, nsfw_channel=nsfw, guild=ALLOWS_VIOLENCE
    )
    assert decision.verdict is W and decision.blocking == (UNNAMED_CATEGORY,)


@given(
    flagged=st.sets(st.sampled_from(CATEGORIES)),
    nsfw=st.booleans(),
    allowed=st.sets(st.sampled_from(CATEGORIES)),
)
def test_sexual_minors_never_passes_and_the_nsfw_mark_relaxes_only_its_three(
    flagged, nsfw, allowed
):
    guild = GuildModeration(allowed=frozenset(allowed))
    decision = moderation_decision(
        flagged=flagged, service_flagged=bool(flagged), nsfw_channel=nsfw, guild=guild
    )
    if flagged & ALWAYS_WITHHELD:
        assert decision.verdict is W
    relaxed = NSFW_ALLOWED if nsfw else frozenset()
    expected_blocking = flagged - (relaxed | allowed) | (flagged & ALWAYS_WITHHELD)
    assert set(decision.blocking) == expected_blocking
    assert decision.passes is (not expected_blocking)


def test_the_nsfw_relaxation_and_its_exceptions_do_not_overlap():
    assert not NSFW_ALLOWED & NSFW_NEVER_ALLOWED
    assert ALWAYS_WITHHELD <= NSFW_NEVER_ALLOWED
    assert set(CATEGORIES) >= NSFW_ALLOWED | NSFW_NEVER_ALLOWED


@pytest.mark.parametrize(
    ("category", "problem"),
    [
        ("violence", None),
        ("hate/threatening", None),
        ("sexual/minors", "sexual/minors can never be allowed"),
        ("sexual/minor", "is not a moderation category"),
        ("Violence", "is not a moderation category"),
    ],
)
def test_what_a_guild_may_allow_everywhere(category, problem):
    found = guild_allowed_problem(category)
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)
