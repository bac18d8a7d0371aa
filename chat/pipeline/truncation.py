"""Budget truncation (seed 000, "Budget truncation"; DESIGN §5, "Budget").

When a prompt exceeds its budget, whole stride batches of the oldest dialogue entries go, so the
prompt's start moves in the same coarse steps as the history window and the provider's prompt
cache survives between those steps. What is never removed: system items (persona prompt,
memories, short-term memory, constant lorebook entries), sample dialogue, context notes, a
short-term memory and lorebook entries at a depth (they are re-placed at their depths on what
survives), the newest user request, and tail directives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chat.pipeline.items import ContextItem, ItemTag
from chat.pipeline.notes import place_notes
from chat.pipeline.types import Role

BUDGET_SHARE_PERCENT = 90
IMAGE_PART_TOKENS = 765
"""What one image part costs in the budget: a 1024×1024 image at high detail as OpenAI bills
it (85 + 4 × 170). History is built before the attempt's model is known, so every image an
item shows is counted, whether it will go as a part or as a notice to a blind model."""
DIALOGUE_TAGS = frozenset(
    {ItemTag.DIALOGUE_HISTORY, ItemTag.DATE_SPACER, ItemTag.CONTEXT_NOTE_INJECTION}
)

PLACED_WHEN_DEPTH_SET = frozenset(
    {ItemTag.SHORT_TERM_MEMORY, ItemTag.LOREBOOK, ItemTag.PRESET_PROMPT}
)
"""Tags of items placed at a depth when their ``depth`` is set (`is_placed_at_depth`)."""


@dataclass(frozen=True, slots=True)
class TruncationReport:
    """What truncation did, for the turn record.

    ``removed_entries`` counts dialogue entries (one entry may hold several merged messages,
    all listed in ``removed_message_ids``); ``removed_spacers`` counts date spacers that went
    with them. ``warning`` is set when even the protected items exceed the budget.
    """

    budget: int
    tokens_before: int
    tokens_after: int
    batches: int = 0
    removed_entries: int = 0
    removed_spacers: int = 0
    removed_message_ids: tuple[int, ...] = ()
    warning: str | None = None


def item_tokens(items: Sequence[ContextItem]) -> int:
    """What ``items`` cost against a budget (text and images; see `IMAGE_PART_TOKENS`)."""
    return _total(items)


def context_budget(context_window: int, max_output_tokens: int) -> int:
    """``floor((context_window − max_output_tokens) × 0.9)``, in integers; never negative."""
    return max(0, (context_window - max_output_tokens) * BUDGET_SHARE_PERCENT // 100)


def truncate_dialogue_history(
    items: Sequence[ContextItem], *, budget: int, stride: int
) -> tuple[tuple[ContextItem, ...], TruncationReport]:
    """Fit counted items into ``budget`` tokens by removing the oldest dialogue entries.

    Steps:
        1. If the items fit, return them unchanged.
        2. Split the dialogue (one contiguous run of entries, spacers and notes) into entries
           with their spacers, and notes. The newest user-role entry is the request being
           answered; every other entry may go, oldest first.
        3. Remove one more batch of ``stride`` removable entries at a time until the prompt
           fits or none are left. Each rebuild drops removed entries with their spacers, drops
           a spacer left at the very start (the first entry never has one), and re-places the
           notes at their depths.
        4. Report; warn when the prompt still exceeds the budget.

    Args:
        items: The turn's items with ``tokens`` counted.
        budget: See `context_budget`.
        stride: The history window stride for the turn's fetch limit (batch size).

    Returns:
        The surviving items and a `TruncationReport`.

    Raises:
        ValueError: when ``stride`` is not positive.
    """
    if stride < 1:
        raise ValueError(f"stride must be positive; got {stride}")
    tokens_before = _total(items)
    if tokens_before <= budget:
        return tuple(items), TruncationReport(budget, tokens_before, tokens_before)

    start, end = _dialogue_bounds(items)
    before, after = tuple(items[:start]), tuple(items[end:])
    groups, notes = _entry_groups(items[start:end])
    removable = _removable_groups(groups)
    kept = tuple(items)
    batches = removed = 0
    while removed < len(removable) and _total(kept) > budget:
        batches += 1
        removed = min(len(removable), batches * stride)
        gone = set(removable[:removed])
        dialogue = _rebuild([g for i, g in enumerate(groups) if i not in gone], notes)
        kept = (*before, *dialogue, *after)

    gone_groups = [groups[i] for i in removable[:removed]]
    tokens_after = _total(kept)
    warning = None
    if tokens_after > budget:
        warning = (
            f"prompt needs {tokens_after} tokens after removing all removable history; "
            f"the budget is {budget}"
        )
    return kept, TruncationReport(
        budget=budget,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        batches=batches,
        removed_entries=len(gone_groups),
        removed_spacers=_count_dropped_spacers(groups, kept),
        removed_message_ids=tuple(i for group in gone_groups for i in group[-1].source_ids),
        warning=warning,
    )


def _total(items: Sequence[ContextItem]) -> int:
    """The items' tokens: their text, and `IMAGE_PART_TOKENS` for each image they show."""
    total = 0
    for item in items:
        total += item.tokens
        if item.media:
            total += IMAGE_PART_TOKENS * sum(m.image_identity is not None for m in item.media)
    return total


def is_placed_at_depth(item: ContextItem) -> bool:
    """A note, or the short-term memory or a lorebook entry at a depth: re-placed on
    surviving history."""
    return item.tag is ItemTag.CONTEXT_NOTE_INJECTION or (
        item.tag in PLACED_WHEN_DEPTH_SET and item.depth is not None
    )


def _dialogue_bounds(items: Sequence[ContextItem]) -> tuple[int, int]:
    positions = [
        i for i, item in enumerate(items) if item.tag in DIALOGUE_TAGS or is_placed_at_depth(item)
    ]
    if not positions:
        return len(items), len(items)
    return positions[0], positions[-1] + 1


def _entry_groups(
    dialogue: Sequence[ContextItem],
) -> tuple[list[tuple[ContextItem, ...]], list[ContextItem]]:
    """Split the dialogue into (spacer?, entry) groups and the notes."""
    groups: list[tuple[ContextItem, ...]] = []
    notes: list[ContextItem] = []
    pending: list[ContextItem] = []
    for item in dialogue:
        if is_placed_at_depth(item):
            notes.append(item)
        elif item.tag is ItemTag.DATE_SPACER:
            pending.append(item)
        else:
            groups.append((*pending, item))
            pending = []
    return groups, notes


def _removable_groups(groups: Sequence[tuple[ContextItem, ...]]) -> list[int]:
    """Indexes of groups that may go, oldest first: all but the newest user-role entry."""
    request = next(
        (
            i
            for i in reversed(range(len(groups)))
            if groups[i][-1].role is Role.USER and groups[i][-1].tag is ItemTag.DIALOGUE_HISTORY
        ),
        None,
    )
    return [i for i in range(len(groups)) if i != request]


def _rebuild(
    groups: Sequence[tuple[ContextItem, ...]], notes: Sequence[ContextItem]
) -> tuple[ContextItem, ...]:
    flat = [item for group in groups for item in group]
    if flat and flat[0].tag is ItemTag.DATE_SPACER:
        flat = flat[1:]
    return place_notes(flat, notes)


def _count_dropped_spacers(
    groups: Sequence[tuple[ContextItem, ...]], kept: Sequence[ContextItem]
) -> int:
    spacers_before = sum(len(group) - 1 for group in groups)
    return spacers_before - sum(1 for item in kept if item.tag is ItemTag.DATE_SPACER)
