"""SillyTavern Chat Completion presets: the prompt reassembled in the preset's order, macros
resolved as SillyTavern does (`chat.pipeline.presets`)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from chat.pipeline.context import build_turn_context
from chat.pipeline.items import ItemTag
from chat.pipeline.lorebook import Lorebook, LoreEntry, LorePosition, compile_lorebook
from chat.pipeline.macros import MacroContext
from chat.pipeline.presets import chat_preset_from_sillytavern, expand_preset_macros
from chat.pipeline.projections import AttemptProfile, to_openai_messages
from chat.pipeline.types import Role, SampleMessage
from chat.tests.factories import BOB, TOMORI_PERSONA, message, turn_input

PRESET = chat_preset_from_sillytavern(
    json.loads((Path(__file__).parents[1] / "fixtures" / "st_chat_preset.json").read_text())
)
HISTORY = [message(1, "morning all", author=BOB), message(2, "Tomori, hi", minutes=1)]
PERSONA = replace(
    TOMORI_PERSONA,
    system_prompt="You are {char}.",
    sample_dialogue=(
        SampleMessage(Role.USER, "{user}: hi"),
        SampleMessage(Role.ASSISTANT, "{char}: hey"),
    ),
)
BOOKS = (
    compile_lorebook(
        Lorebook(
            "w",
            (
                LoreEntry("b", (), "Lore before.", constant=True),
                LoreEntry("a", (), "Lore after.", constant=True, position=LorePosition.AFTER_CHAR),
            ),
        )
    ),
)


def test_the_preset_order_and_its_enabled_prompts_are_read():
    assert [p.identifier for p in PRESET.prompts] == [
        "worldInfoBefore", "main", "charDescription", "charPersonality", "scenario",
        "enhanceDefinitions", "nsfw", "worldInfoAfter", "personaDescription",
        "dialogueExamples", "chatHistory", "jailbreak", "a1b2",
    ]  # fmt: skip
    reminder = PRESET.prompts[-1]
    assert (reminder.role, reminder.depth) == (Role.USER, 1)


def test_a_preset_reorders_the_prompt_as_sillytavern_would():
    context = build_turn_context(
        turn_input(HISTORY, persona=PERSONA, lorebooks=BOOKS, preset=PRESET)
    )
    tags = [item.tag for item in context.items]
    texts = [item.text for item in context.items]
    assert tags[:5] == [
        ItemTag.LOREBOOK,
        ItemTag.PRESET_PROMPT,
        ItemTag.SYSTEM_PROMPT,
        ItemTag.PRESET_PROMPT,
        ItemTag.LOREBOOK,
    ]
    assert texts[0] == "Lore before." and texts[4] == "Lore after."
    assert texts[3] == "Use what you know about Tomori."
    assert tags[5:7] == [ItemTag.SAMPLE_DIALOGUE, ItemTag.SAMPLE_DIALOGUE]
    jailbreak = next(i for i, t in enumerate(texts) if t.startswith("Stay in character"))
    last_entry = max(i for i, t in enumerate(tags) if t is ItemTag.DIALOGUE_HISTORY)
    assert jailbreak > last_entry and context.items[jailbreak].role is Role.SYSTEM
    reminder = texts.index("(Keep replies under three sentences.)")
    assert tags[reminder + 1] is ItemTag.DIALOGUE_HISTORY  # depth 1: before the newest entry
    assert all(i > jailbreak for i, t in enumerate(tags) if t is ItemTag.TAIL_DIRECTIVE)

    messages = to_openai_messages(context, AttemptProfile(model="m"))
    assert messages[0]["role"] == "system"
    assert messages[0]["content"].startswith("Lore before.\n\nWrite Tomori's next reply to ")
    post_history = [m for m in messages[1:] if m["role"] == "system"]
    assert [m["content"] for m in post_history] == [texts[jailbreak]]


def test_time_date_and_random_resolve_from_the_turn_and_repeat_for_its_preview():
    macros = MacroContext(bot="Tomori", char="Tomori", user="Bob")
    now = datetime(2026, 12, 1, 15, 5, tzinfo=UTC)
    text = "{{user}} at {{time}} on {{date}}: {{random::a::b::c::d}} {{random:x,y,z}}"
    first = expand_preset_macros(text, macros, now=now, seed="42")
    assert first.startswith("Bob at 3:05 PM on December 1, 2026: ")
    assert first == expand_preset_macros(text, macros, now=now, seed="42")
    picks = {expand_preset_macros(text, macros, now=now, seed=str(n)) for n in range(30)}
    assert len(picks) > 3


def test_prompts_that_vary_per_turn_end_the_cacheable_prefix_there():
    context = build_turn_context(turn_input(HISTORY, persona=PERSONA, preset=PRESET))
    main = next(i for i, item in enumerate(context.items) if item.text.startswith("Write "))
    assert context.cacheable_prefix_end == main  # names {{user}} and {{time}}


def test_a_preset_without_chat_history_still_sends_the_dialogue_last():
    preset = replace(
        PRESET, prompts=tuple(p for p in PRESET.prompts if p.identifier != "chatHistory")
    )
    context = build_turn_context(turn_input(HISTORY, persona=PERSONA, preset=preset))
    assert any(item.tag is ItemTag.DIALOGUE_HISTORY for item in context.items)
