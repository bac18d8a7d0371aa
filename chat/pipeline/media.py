"""Which images a turn shows (seed 002, "Media descriptor emission").

Images cost the most of anything in a prompt, so a turn shows only some of them:

- only entries inside the media window (the newest ``media_window`` Discord messages) show any;
- of those, only the newest ``MEDIA_IMAGE_MESSAGE_LIMIT`` entries with images show them; older
  ones get a ``[System: N image(s) omitted due to rendered-image limit]`` notice instead;
- an image that appears again later (same content hash, else same URL) shows only at its latest
  occurrence, so the model sees each picture once, where it was last discussed.

Stickers and custom emoji are never media here (they render as text), so they never count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chat.pipeline.items import MediaDescriptor
from chat.pipeline.simplify import SimplifiedEntry

MEDIA_IMAGE_MESSAGE_LIMIT = 3


@dataclass(frozen=True, slots=True)
class EntryMedia:
    """What one entry shows: ``shown`` images, plus counts of images left out because of the
    limits (``over_limit``) or because they appear again later (``repeated``)."""

    shown: tuple[MediaDescriptor, ...] = ()
    over_limit: int = 0
    repeated: int = 0


NO_MEDIA = EntryMedia()


def plan_media(
    history: Sequence[SimplifiedEntry],
    *,
    media_window: int,
    image_message_limit: int = MEDIA_IMAGE_MESSAGE_LIMIT,
) -> tuple[EntryMedia, ...]:
    """Decide, for each entry, which of its images the turn shows.

    Steps, walking from the newest entry to the oldest:
        1. Drop images whose identity was already seen in a newer entry (or later in the same
           entry): they are ``repeated``.
        2. An entry whose newest message lies outside the newest ``media_window`` messages
           shows none of the rest (``over_limit``).
        3. The first ``image_message_limit`` entries that still have images show them; every
           older entry's images are ``over_limit``.

    Args:
        history: Simplified history, oldest first.
        media_window: How many of the newest Discord messages may show media (the caller
            passes ``min(media window, fetch limit)``).
        image_message_limit: How many entries may show images.

    Returns:
        One `EntryMedia` per entry, aligned with ``history``.
    """
    plans = [NO_MEDIA] * len(history)
    with_images = [n for n, entry in enumerate(history) if entry.images]
    if not with_images:
        return tuple(plans)
    seen: set[str] = set()
    showing_entries = 0
    # Messages newer than each entry with images, counted only when the history could hold
    # more than the media window (a window of the fetch limit seldom does).
    counting = sum(len(entry.parts) for entry in history) > media_window
    newer_messages, counted_from = 0, len(history)
    for position in reversed(with_images):
        entry = history[position]
        if counting:
            newer_messages += sum(len(e.parts) for e in history[position + 1 : counted_from])
            counted_from = position + 1
        fresh: list[MediaDescriptor] = []
        for image in reversed(entry.images):
            identity = image.image_identity or image.key
            if identity not in seen:
                seen.add(identity)
                fresh.insert(0, image)
        repeated = len(entry.images) - len(fresh)
        if fresh and newer_messages < media_window and showing_entries < image_message_limit:
            showing_entries += 1
            plans[position] = EntryMedia(shown=tuple(fresh), repeated=repeated)
        else:
            plans[position] = EntryMedia(over_limit=len(fresh), repeated=repeated)
    return tuple(plans)
