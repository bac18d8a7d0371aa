"""What part of a prompt the provider's prompt cache can keep: the items expected to repeat
unchanged, in order, at the start of the channel's next prompt."""

from __future__ import annotations

from collections.abc import Sequence

from chat.pipeline.items import ContextItem, ItemTag
from chat.pipeline.truncation import PLACED_WHEN_DEPTH_SET

TURN_VARYING_TAGS = frozenset(
    {ItemTag.CONTEXT_NOTE_INJECTION, ItemTag.TAIL_DIRECTIVE, ItemTag.PARTICIPANTS, ItemTag.MEMORY}
)
"""Items made anew for every turn."""


def cacheable_prefix_end(items: Sequence[ContextItem], *, varying_from: int | None = None) -> int:
    """Where the stable prefix ends: the index of the first item expected to change next turn.

    The prefix holds the configuration (system prompt, short-term memory: it changes only when
    the memory is maintained; constant lorebook entries), the samples, and the dialogue up to
    the first context note, short-term memory or lorebook entry placed at depth (it moves with
    every new message) or the newest entry (the next message may merge into it), whichever comes
    first, and never a tail directive or recalled memories (they follow the dialogue and change with
    every turn). ``varying_from`` ends it earlier: configuration that names the turn's user
    (``{user}``) changes whenever someone else speaks next. Media limits can still change an
    older entry (an image leaving the rendered-image limit); that is not predictable from one
    turn, so the boundary does not try.
    """
    first_varying = len(items)
    for index, item in enumerate(items):
        varies = _VARIES.get(item.tag)
        if varies is not None and (varies or item.depth is not None):
            first_varying = index
            break
    newest_entry = first_varying
    for index in range(len(items) - 1, -1, -1):
        if items[index].tag is ItemTag.DIALOGUE_HISTORY:
            newest_entry = index
            break
    end = min(first_varying, newest_entry)
    return end if varying_from is None else min(end, varying_from)


_VARIES = {
    **dict.fromkeys(PLACED_WHEN_DEPTH_SET, False),
    **dict.fromkeys(TURN_VARYING_TAGS, True),
}
"""Tag → True: the item changes every turn (`TURN_VARYING_TAGS`; a note); False: it does
when placed at a depth (`truncation.is_placed_at_depth`, inline); absent: it does not."""
