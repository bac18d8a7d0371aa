"""Lorebook entries in a built prompt: where each lands, the cacheable prefix, truncation."""

from __future__ import annotations

from dataclasses import replace

from chat.pipeline.context import build_turn_context
from chat.pipeline.items import ItemTag
from chat.pipeline.lorebook import Lorebook, LoreEntry, LorePosition, compile_lorebook
from chat.pipeline.projections import AttemptProfile, completion_lines, to_openai_messages
from chat.pipeline.types import ContextNote, Role
from chat.tests.factories import BOB, TOMORI, TOMORI_PERSONA, message, turn_input

HISTORY = [
    message(1, "morning all", author=BOB),
    message(2, "morning!", author=TOMORI, minutes=1),
    message(3, "Tomori, tell me about the dragon", minutes=2),
]


def _book(*entries: LoreEntry, **fields) -> tuple:
    return (compile_lorebook(Lorebook(name="world", entries=entries, **fields)),)


def _lore(uid: str, content: str, **fields) -> LoreEntry:
    return LoreEntry(uid=uid, keys=fields.pop("keys", ("dragon",)), content=content, **fields)


def _texts(context, tag=ItemTag.LOREBOOK) -> list[tuple[str, str]]:
    return [(str(item.role), item.text) for item in context.items if item.tag is tag]


def test_constant_entries_sit_around_the_system_prompt_inside_the_cacheable_prefix():
    books = _book(
        _lore("b", "Before {char}.", keys=(), constant=True),
        _lore("a", "After.", keys=(), constant=True, position=LorePosition.AFTER_CHAR),
    )
    persona = replace(TOMORI_PERSONA, system_prompt="You are {char}.")
    context = build_turn_context(turn_input(HISTORY, persona=persona, lorebooks=books))
    tags = [item.tag for item in context.items[:3]]
    assert tags == [ItemTag.LOREBOOK, ItemTag.SYSTEM_PROMPT, ItemTag.LOREBOOK]
    assert context.items[0].text == "Before Tomori."
    assert context.cacheable_prefix_end > 2
    system = to_openai_messages(context, AttemptProfile(model="m"))[0]
    assert system["content"].startswith("Before Tomori.\n\n")


def test_an_activated_entry_goes_right_after_the_cacheable_prefix_as_a_note():
    books = _book(_lore("d", "Dragons sleep under the old tower."))
    without = build_turn_context(turn_input(HISTORY))
    context = build_turn_context(turn_input(HISTORY, lorebooks=books))
    index = next(i for i, item in enumerate(context.items) if item.tag is ItemTag.LOREBOOK)
    assert context.items[index].text == "[System: Dragons sleep under the old tower.]"
    assert context.items[index].role is Role.USER
    assert context.cacheable_prefix_end == without.cacheable_prefix_end == index
    assert context.items[index + 1].source_ids == (HISTORY[-1].id,)
    assert [hit.key for hit in context.lore.inserted] == ["dragon"]


def test_an_activated_entry_follows_a_note_that_already_ends_the_prefix():
    persona = replace(TOMORI_PERSONA, context_note=ContextNote("Stay in character.", 2))
    context = build_turn_context(
        turn_input(HISTORY, persona=persona, lorebooks=_book(_lore("d", "Dragon lore.")))
    )
    tags = [item.tag for item in context.items[context.cacheable_prefix_end :]][:2]
    assert tags == [ItemTag.CONTEXT_NOTE_INJECTION, ItemTag.LOREBOOK]


def test_depth_entries_keep_their_depth_and_role():
    books = _book(
        _lore("u", "A user aside.", position=LorePosition.AT_DEPTH, depth=0, role=Role.USER),
        _lore("s", "Sys.", position=LorePosition.AT_DEPTH, depth=2, role=Role.SYSTEM),
    )
    context = build_turn_context(turn_input(HISTORY, lorebooks=books))
    placed = [
        (item.tag, item.role, item.text)
        for item in context.items
        if item.tag in (ItemTag.DIALOGUE_HISTORY, ItemTag.LOREBOOK)
    ]
    assert [(tag, role) for tag, role, _text in placed] == [
        (ItemTag.DIALOGUE_HISTORY, Role.USER),
        (ItemTag.LOREBOOK, Role.USER),
        (ItemTag.DIALOGUE_HISTORY, Role.ASSISTANT),
        (ItemTag.DIALOGUE_HISTORY, Role.USER),
        (ItemTag.LOREBOOK, Role.USER),
    ]
    assert [text for tag, _role, text in placed if tag is ItemTag.LOREBOOK] == [
        "[System: Sys.]",
        "A user aside.",
    ]


def test_hidden_and_blocked_messages_activate_nothing():
    from chat.pipeline.types import PrivacyLevel

    history = [*HISTORY[:2], message(3, "dragon", author=BOB, minutes=2)]
    context = build_turn_context(
        turn_input(
            history,
            privacy={BOB.id: PrivacyLevel.FULL},
            trigger_id=HISTORY[1].id,
            lorebooks=_book(_lore("d", "lore")),
        )
    )
    assert context.lore.inserted == ()


def test_the_same_turn_rolls_the_same_and_another_trigger_may_not():
    entries = tuple(_lore(str(n), f"fact {n}", probability=50) for n in range(30))
    first = build_turn_context(turn_input(HISTORY, lorebooks=_book(*entries)))
    again = build_turn_context(turn_input(HISTORY, lorebooks=_book(*entries)))
    assert first.items == again.items
    assert 0 < len(first.lore.inserted) < 30


def test_the_budget_leaves_entries_out_and_says_so():
    books = _book(
        _lore("big", "word " * 400, priority=1),
        _lore("small", "a small fact", priority=5),
        token_budget=50,
    )
    context = build_turn_context(turn_input(HISTORY, lorebooks=books))
    assert [hit.entry.uid for hit in context.lore.inserted] == ["small"]
    assert [hit.entry.uid for hit in context.lore.left_out] == ["big"]


def test_completion_text_reads_lore_without_marks():
    context = build_turn_context(turn_input(HISTORY, lorebooks=_book(_lore("d", "Dragon lore."))))
    assert "Dragon lore." in [line for _item, line in completion_lines(context)]


def test_truncation_keeps_entries_at_their_depth():
    from chat.pipeline.truncation import truncate_dialogue_history

    books = _book(_lore("s", "Sys.", position=LorePosition.AT_DEPTH, depth=1))
    context = build_turn_context(turn_input(HISTORY, lorebooks=books))
    kept, report = truncate_dialogue_history(
        context.items, budget=context.total_tokens - 1, stride=2
    )
    assert report.removed_entries == 2
    placed = (ItemTag.LOREBOOK, ItemTag.DIALOGUE_HISTORY)
    assert [item.tag for item in kept if item.tag in placed] == list(placed)
