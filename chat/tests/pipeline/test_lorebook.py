"""Lorebook activation: keys, logic, recursion, chance and budget (`chat.pipeline.lorebook`)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.pipeline.lorebook import (
    Lorebook,
    LoreEntry,
    LoreOutcome,
    SelectiveLogic,
    activate_lorebooks,
    compile_lorebook,
    lore_budget,
    parse_regex_key,
)


class WordCounter:
    """Counts words: easy budgets to reason about."""

    name = "words"

    def count(self, text: str) -> int:
        return len(text.split())


WORDS = WordCounter()


def _entry(uid: str = "1", keys: tuple[str, ...] = ("dragon",), **fields) -> LoreEntry:
    return LoreEntry(uid=uid, keys=keys, content=fields.pop("content", f"lore {uid}"), **fields)


def _activate(*entries: LoreEntry, messages=("hello",), budget=10_000, seed="42", **book):
    compiled = compile_lorebook(Lorebook(name="book", entries=tuple(entries), **book))
    return activate_lorebooks(
        [compiled],
        messages=list(messages),
        seed=seed,
        budget=budget,
        token_counter=WORDS,
    )


def _inserted(activation) -> list[str]:
    return [hit.entry.uid for hit in activation.inserted]


@pytest.mark.parametrize(
    ("key", "text", "fields", "fires"),
    [
        ("dragon", "A DRAGON appears", {}, True),
        ("dragon", "A DRAGON appears", {"case_sensitive": True}, False),
        ("Dragon", "the Dragon wakes", {"case_sensitive": True}, True),
        ("cat", "concatenate", {}, True),
        ("cat", "concatenate", {"match_whole_words": True}, False),
        ("cat", "the cat, sleeping", {"match_whole_words": True}, True),
        ("old tower", "by the old tower.", {"match_whole_words": True}, True),
        ("old tower", "by the old towers", {"match_whole_words": True}, False),
        ("/drag(on|oon)s?/i", "DRAGOONS march", {}, True),
        ("/^dragon$/", "a dragon", {}, False),
        ("drag(on|oon)", "dragoon", {"use_regex": True}, True),
        ("  ", "anything", {}, False),
    ],
)
def test_key_matching(key, text, fields, fires):
    activation = _activate(_entry(keys=(key,), **fields), messages=[text])
    assert _inserted(activation) == (["1"] if fires else [])


def test_the_reported_key_is_the_first_in_the_entrys_order():
    activation = _activate(_entry(keys=("wyrm", "dragon")), messages=["a dragon and a wyrm"])
    assert activation.inserted[0].key == "wyrm"


def test_only_the_newest_scan_depth_messages_are_scanned():
    messages = ["the dragon", "hello", "there"]
    assert _inserted(_activate(_entry(), messages=messages)) == []
    assert _inserted(_activate(_entry(), messages=messages, scan_depth=3)) == ["1"]


def test_scan_depth_zero_still_scans_the_trigger():
    assert _inserted(_activate(_entry(), messages=["x", "dragon"], scan_depth=0)) == ["1"]


def test_a_phrase_never_matches_across_two_messages():
    assert _inserted(_activate(_entry(keys=("old tower",)), messages=["the old", "tower"])) == []


@pytest.mark.parametrize(
    ("logic", "text", "fires"),
    [
        (SelectiveLogic.AND_ANY, "dragon fire", True),
        (SelectiveLogic.AND_ANY, "dragon", False),
        (SelectiveLogic.AND_ALL, "dragon fire", False),
        (SelectiveLogic.AND_ALL, "dragon fire ice", True),
        (SelectiveLogic.NOT_ANY, "dragon", True),
        (SelectiveLogic.NOT_ANY, "dragon ice", False),
        (SelectiveLogic.NOT_ALL, "dragon ice", True),
        (SelectiveLogic.NOT_ALL, "dragon fire ice", False),
    ],
)
def test_selective_logic_over_secondary_keys(logic, text, fires):
    entry = _entry(selective=True, secondary_keys=("fire", "ice"), selective_logic=logic)
    assert _inserted(_activate(entry, messages=[text])) == (["1"] if fires else [])


def test_secondary_keys_are_ignored_unless_selective():
    entry = _entry(selective=False, secondary_keys=("fire",))
    assert _inserted(_activate(entry, messages=["dragon"])) == ["1"]


def test_constants_need_no_key_and_disabled_entries_never_fire():
    activation = _activate(
        _entry("c", keys=(), constant=True),
        _entry("d", enabled=False),
        messages=["dragon"],
    )
    assert _inserted(activation) == ["c"]
    assert activation.inserted[0].key is None


def test_recursion_follows_fired_content_up_to_the_step_limit():
    chain = (
        _entry("a", keys=("dragon",), content="dragons guard the vault"),
        _entry("b", keys=("vault",), content="the vault holds the crown"),
        _entry("c", keys=("crown",), content="the crown is cursed"),
        _entry("d", keys=("cursed",), content="end"),
    )
    assert _inserted(_activate(*chain, messages=["dragon"])) == ["a"]
    activation = _activate(*chain, messages=["dragon"], recursive_scanning=True)
    assert _inserted(activation) == ["a", "b", "c", "d"]
    assert [hit.recursion_step for hit in activation.inserted] == [0, 1, 2, 3]
    compiled = compile_lorebook(Lorebook("book", chain, recursive_scanning=True))
    limited = activate_lorebooks(
        [compiled],
        messages=["dragon"],
        seed="1",
        budget=100,
        token_counter=WORDS,
        recursion_steps=1,
    )
    assert _inserted(limited) == ["a", "b"]


def test_recursion_respects_exclude_and_prevent():
    entries = (
        _entry("a", keys=("dragon",), content="vault", prevent_recursion=True),
        _entry("b", keys=("vault",), content="x"),
        _entry("c", keys=("dragon",), content="crown"),
        _entry("d", keys=("crown",), content="y", exclude_recursion=True),
    )
    assert _inserted(_activate(*entries, messages=["dragon"], recursive_scanning=True)) == [
        "a",
        "c",
    ]


def test_probability_is_repeatable_per_seed_and_varies_across_seeds():
    entries = [_entry(str(n), probability=50) for n in range(40)]
    first = _inserted(_activate(*entries, messages=["dragon"], seed="1001"))
    assert first == _inserted(_activate(*entries, messages=["dragon"], seed="1001"))
    assert 5 < len(first) < 35
    assert first != _inserted(_activate(*entries, messages=["dragon"], seed="1002"))
    unlucky = _activate(*entries, messages=["dragon"], seed="1001").left_out
    assert {hit.outcome for hit in unlucky} == {LoreOutcome.UNLUCKY}


def test_probability_zero_never_fires_and_hundred_always_does():
    activation = _activate(_entry("never", probability=0), _entry("always"), messages=["dragon"])
    assert _inserted(activation) == ["always"]


def test_budget_drops_the_lowest_priority_first_then_everything_below():
    activation = _activate(
        _entry("low", priority=1, content="one two three"),
        _entry("high", priority=9, content="one two three"),
        _entry("mid", priority=5, content="one two three four"),
        _entry("tiny", priority=0, content="one"),
        _entry("const", keys=(), constant=True, priority=0, content="one two"),
        messages=["dragon"],
        budget=8,
    )
    assert sorted(_inserted(activation)) == ["const", "high"]
    assert [(hit.entry.uid, hit.outcome) for hit in activation.left_out] == [
        ("mid", LoreOutcome.OVER_BUDGET),
        ("low", LoreOutcome.OVER_BUDGET),
        ("tiny", LoreOutcome.OVER_BUDGET),
    ]
    assert activation.tokens == 5


def test_prompt_order_is_constants_first_then_insertion_order():
    activation = _activate(
        _entry("late", insertion_order=300),
        _entry("early", insertion_order=10),
        _entry("const", keys=(), constant=True, insertion_order=999),
        messages=["dragon"],
    )
    assert _inserted(activation) == ["const", "early", "late"]


def test_budget_defaults_to_a_quarter_of_the_context_window():
    plain = compile_lorebook(Lorebook("a", ()))
    capped = compile_lorebook(Lorebook("b", (), token_budget=300))
    assert lore_budget(16000, [plain]) == 4000
    assert lore_budget(16000, [plain, capped]) == 300


def test_two_books_scan_with_their_own_depths():
    persona_book = compile_lorebook(Lorebook("persona", (_entry("p"),), scan_depth=1))
    guild_book = compile_lorebook(Lorebook("guild", (_entry("g"),), scan_depth=3))
    activation = activate_lorebooks(
        [persona_book, guild_book],
        messages=["dragon", "a", "b"],
        seed="1",
        budget=100,
        token_counter=WORDS,
    )
    assert [(hit.book, hit.entry.uid) for hit in activation.inserted] == [("guild", "g")]


def test_regex_keys_parse_like_sillytavern():
    assert parse_regex_key("dragon") is None
    assert parse_regex_key("/a+b/gi").flags & re.IGNORECASE
    with pytest.raises(re.error):
        parse_regex_key("/(unclosed/")
    with pytest.raises(re.error):
        parse_regex_key("/a/q")


@given(
    words=st.lists(st.sampled_from(["dragon", "vault", "crown", "cat", "sky"]), max_size=8),
    keys=st.lists(st.sampled_from(["dragon", "vault", "crown", "cat", "sky"]), max_size=5),
)
def test_an_entry_fires_exactly_when_one_of_its_keys_is_in_the_scanned_text(words, keys):
    text = " ".join(words)
    activation = _activate(_entry(keys=tuple(keys)), messages=[text])
    assert bool(activation.inserted) == any(key in words for key in keys)
