"""Discord markup becomes names; no raw snowflake survives."""

from __future__ import annotations

import re

import pytest
from hypothesis import given

from chat.pipeline.markup import render_markup, scrub_snowflakes
from chat.pipeline.types import NameDirectory
from chat.tests.factories import ALICE, BOB, NAMES, contents, sf

RAW_SNOWFLAKE = re.compile(r"\b\d{17,20}\b")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"hi <@{ALICE.id}>", "hi @Alice"),
        (f"hi <@!{ALICE.id}>", "hi @Alice"),
        (f"hi <@{sf(5555)}>", "hi @unknown-user"),
        (f"ask <@{BOB.id}>", "ask @someone"),
        (f"see <#{sf(8001)}>", "see #general"),
        (f"see <#{sf(8002)}>", "see #unknown-channel"),
        (f"ping <@&{sf(8101)}>", "ping @Mods"),
        (f"ping <@&{sf(8102)}>", "ping @unknown-role"),
        (f"nice <:wave:{sf(1)}> <a:dance:{sf(2)}>", "nice :wave: :dance:"),
        (f"use </roll:{sf(3)}>", "use /roll"),
        (f"look https://discord.com/channels/{sf(1)}/{sf(2)}/{sf(3)} ok", "look [Discord link] ok"),
        (f"https://ptb.discordapp.com/channels/@me/{sf(2)}", "[Discord link]"),
        (f"my id is {sf(4)}!", "my id is [id]!"),
        ("call 12345678901234567", "call [id]"),
        ("a 16-digit 1234567890123456 stays", "a 16-digit 1234567890123456 stays"),
        ("<t:1783742400:R> stays", "<t:1783742400:R> stays"),
        ("{user} and {{if tool:x}} stay", "{user} and {{if tool:x}} stay"),
    ],
)
def test_markup_renders_as_names(text, expected):
    assert render_markup(text, NAMES, hidden_user_ids=frozenset({BOB.id})) == expected


def test_inserted_names_are_scrubbed_too():
    names = NameDirectory(users={ALICE.id: f"user{sf(1)}"}, channels={sf(8001): str(sf(2))})

    rendered = render_markup(f"<@{ALICE.id}> in <#{sf(8001)}>", names, frozenset())

    assert rendered == "@user[id] in #[id]"


def test_scrub_snowflakes_leaves_short_numbers():
    assert scrub_snowflakes(f"{sf(1)}.png and 2026") == "[id].png and 2026"
    assert scrub_snowflakes(f"v{sf(1)}x and 1{sf(1)}") == "v[id]x and [id]"


@given(contents)
def test_no_raw_snowflake_survives_rendering(text):
    assert RAW_SNOWFLAKE.search(render_markup(text, NAMES, frozenset())) is None
