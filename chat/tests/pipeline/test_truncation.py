"""Budget truncation: whole stride batches of the oldest entries, protected items kept."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chat.pipeline.items import ContextItem, ItemTag, MediaDescriptor
from chat.pipeline.truncation import (
    IMAGE_PART_TOKENS,
    context_budget,
    truncate_dialogue_history,
)
from chat.pipeline.types import Role
from chat.tests.factories import sf

SYSTEM = ContextItem(ItemTag.SYSTEM_PROMPT, Role.SYSTEM, "system", tokens=10)
SAMPLE = ContextItem(ItemTag.SAMPLE_DIALOGUE, Role.USER, "sample", tokens=3)
STOP = ContextItem(ItemTag.TAIL_DIRECTIVE, Role.USER, "stop", tokens=5)


def entry(n: int, tokens: int = 10, role: Role = Role.USER) -> ContextItem:
    return ContextItem(ItemTag.DIALOGUE_HISTORY, role, f"e{n}", source_ids=(sf(n),), tokens=tokens)


def spacer(n: int) -> ContextItem:
    return ContextItem(ItemTag.DATE_SPACER, Role.USER, f"day{n}", tokens=4)


def note(depth: int) -> ContextItem:
    return ContextItem(
        ItemTag.CONTEXT_NOTE_INJECTION, Role.USER, f"note@{depth}", depth=depth, tokens=2
    )


def texts(items) -> list[str]:
    return [item.text for item in items]


@pytest.mark.parametrize(
    ("context_window", "max_output_tokens", "budget"),
    [(16000, 512, 13939), (8192, 1024, 6451), (128000, 4096, 111513), (1000, 2000, 0)],
)
def test_context_budget(context_window, max_output_tokens, budget):
    assert context_budget(context_window, max_output_tokens) == budget


def test_items_that_fit_are_returned_unchanged():
    items = (SYSTEM, entry(1), entry(2), STOP)

    kept, report = truncate_dialogue_history(items, budget=35, stride=6)

    assert kept == items
    assert (report.tokens_before, report.tokens_after, report.removed_entries) == (35, 35, 0)
    assert report.warning is None


@pytest.mark.parametrize(
    ("budget", "stride", "expected_first", "removed", "batches"),
    [
        (90, 4, "e5", 4, 1),
        (90, 6, "e7", 6, 1),
        (60, 4, "e9", 8, 2),
        (84, 2, "e5", 4, 2),
    ],
)
def test_whole_stride_batches_of_the_oldest_entries_go(
    budget, stride, expected_first, removed, batches
):
    items = (SYSTEM, *(entry(n) for n in range(1, 11)), STOP)  # 10 + 100 + 5 = 115 tokens

    kept, report = truncate_dialogue_history(items, budget=budget, stride=stride)

    dialogue = [item.text for item in kept if item.tag is ItemTag.DIALOGUE_HISTORY]
    assert dialogue[0] == expected_first
    assert report.removed_entries == min(batches * stride, removed)
    assert report.batches == batches
    assert report.removed_message_ids == tuple(sf(n) for n in range(1, report.removed_entries + 1))
    assert report.tokens_after == sum(item.tokens for item in kept) <= budget


def test_the_newest_user_request_and_protected_items_survive_with_a_warning():
    items = (
        SYSTEM,
        SAMPLE,
        entry(1),
        entry(2, role=Role.USER, tokens=40),
        entry(3, role=Role.ASSISTANT),
        STOP,
    )

    kept, report = truncate_dialogue_history(items, budget=30, stride=6)

    assert texts(kept) == ["system", "sample", "e2", "stop"]
    assert report.tokens_after == 58
    assert report.warning == (
        "prompt needs 58 tokens after removing all removable history; the budget is 30"
    )


def test_notes_are_re_placed_at_their_depth_on_the_surviving_history():
    items = (
        SYSTEM,
        *(entry(n) for n in range(1, 5)),
        note(2),
        *(entry(n) for n in range(5, 7)),
        note(0),
        STOP,
    )

    kept, _ = truncate_dialogue_history(items, budget=60, stride=2)

    assert texts(kept) == ["system", "e3", "e4", "note@2", "e5", "e6", "note@0", "stop"]


def test_removed_entries_take_their_spacers_and_no_spacer_leads_the_dialogue():
    items = (
        SYSTEM,
        entry(1),
        spacer(2),
        entry(2),
        spacer(3),
        entry(3),
        entry(4),
        spacer(5),
        entry(5),
        STOP,
    )  # 10 + 50 + 3 × 4 + 5 = 77 tokens

    kept, report = truncate_dialogue_history(items, budget=50, stride=2)

    assert texts(kept) == ["system", "e3", "e4", "day5", "e5", "stop"]
    assert (report.removed_entries, report.removed_spacers) == (2, 2)
    assert report.tokens_after == 49


def test_stride_must_be_positive():
    with pytest.raises(ValueError, match="stride must be positive"):
        truncate_dialogue_history((entry(1),), budget=0, stride=0)


PROTECTED_TAGS = {ItemTag.SYSTEM_PROMPT, ItemTag.SAMPLE_DIALOGUE, ItemTag.TAIL_DIRECTIVE}


@st.composite
def prompts(draw: st.DrawFn) -> tuple[ContextItem, ...]:
    """System, samples, a dialogue of entries with spacers and notes, tail directives."""
    dialogue: list[ContextItem] = []
    for n in range(1, draw(st.integers(min_value=0, max_value=30)) + 1):
        if n > 1 and draw(st.booleans()):
            dialogue.append(spacer(n))
        role = draw(st.sampled_from([Role.USER, Role.ASSISTANT]))
        dialogue.append(entry(n, draw(st.integers(min_value=0, max_value=60)), role))
    notes = [
        note(draw(st.integers(min_value=0, max_value=8))) for _ in range(draw(st.integers(0, 2)))
    ]
    return (SYSTEM, SAMPLE, *dialogue, *notes, STOP)


@given(prompts(), st.integers(min_value=0, max_value=800), st.sampled_from([2, 6, 24]))
def test_truncation_keeps_protected_items_and_fits_whenever_it_can(items, budget, stride):
    kept, report = truncate_dialogue_history(items, budget=budget, stride=stride)

    entries = [item for item in items if item.tag is ItemTag.DIALOGUE_HISTORY]
    users = [item for item in entries if item.role is Role.USER]
    protected = [item for item in items if item.tag in PROTECTED_TAGS] + users[-1:]
    notes = [item for item in items if item.tag is ItemTag.CONTEXT_NOTE_INJECTION]
    for item in protected + notes:
        assert item in kept
    protected_tokens = sum(item.tokens for item in protected + notes)
    if protected_tokens <= budget:
        assert report.tokens_after <= budget
        assert report.warning is None
    kept_entries = [item for item in kept if item.tag is ItemTag.DIALOGUE_HISTORY]
    removable = [item for item in entries if item not in users[-1:]]
    gone = [item for item in removable if item not in kept_entries]
    assert gone == removable[: len(gone)]
    assert len(gone) % stride == 0 or len(gone) == len(removable)
    assert report.removed_entries == len(gone)
    assert report.tokens_after == sum(item.tokens for item in kept)


def test_images_count_against_the_budget():
    picture = MediaDescriptor("media_1", "cat.png", "u", "image/png", sf(1), image_identity="i")
    with_image = replace(entry(1), media=(picture,))
    items = (SYSTEM, with_image, entry(2), entry(3), STOP)
    text_only = sum(item.tokens for item in items)

    kept, report = truncate_dialogue_history(items, budget=text_only + 100, stride=2)

    assert report.tokens_before == text_only + IMAGE_PART_TOKENS
    assert texts(kept) == ["system", "e3", "stop"]  # a whole stride batch went, the image too
