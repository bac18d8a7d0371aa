"""The pipeline's output vocabulary: tagged context items and capability-neutral media.

A turn's prompt is a sequence of `ContextItem`s. Each keeps its tag (what produced it), role,
text, the Discord messages it came from and its token count, so the dashboard can show exactly
what the model saw and why, and each model attempt can project the same items its own way
(`projections.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from chat.pipeline.types import Role


class ItemTag(StrEnum):
    """What produced an item. The values are stable codes stored in turn records."""

    SYSTEM_PROMPT = "system_prompt"
    MEMORY = "memory"
    MEMORY_SHOWN = "memory_shown"
    """Memories an earlier turn of the persona recalled, kept where that turn showed them."""
    SHORT_TERM_MEMORY = "short_term_memory"
    SAMPLE_DIALOGUE = "sample_dialogue"
    DIALOGUE_HISTORY = "dialogue_history"
    CONTEXT_NOTE_INJECTION = "context_note_injection"
    DATE_SPACER = "date_spacer"
    TAIL_DIRECTIVE = "tail_directive"
    PARTICIPANTS = "participants"
    LOREBOOK = "lorebook"
    PRESET_PROMPT = "preset_prompt"


@dataclass(frozen=True, slots=True)
class MediaDescriptor:
    """An image or a file, described without deciding how a model will receive it.

    ``key`` is the ``media_N`` the prompt names it by. ``message_id`` is the message a tool
    fetches it from: the entry's own, or the reply target or thread starter the entry carries
    it for. ``image_identity`` tells repeated images apart (None for non-images).
    """

    key: str
    filename: str
    url: str
    content_type: str | None
    message_id: int
    is_gif: bool = False
    image_identity: str | None = None


@dataclass(frozen=True, slots=True)
class ContextItem:
    """One item of a turn's prompt.

    Attributes:
        tag: What produced it.
        role: Its Chat Completions role.
        text: What chat models read: ``Name: content`` for dialogue, ``[System: …]`` for notes,
            notices and spacers (`system_note`). What completion models read is projected from
            it and the rendered dialogue (`projections.completion_lines`).
        source_ids: The Discord messages it renders, oldest first (empty for configuration).
        media: Images this item shows; each model attempt decides how (`projections.py`).
        depth: For a context note, its saved depth from the end of the dialogue; None otherwise.
        tokens: Its token count, 0 until counted (`tokens.count_item_tokens`).
    """

    tag: ItemTag
    role: Role
    text: str
    source_ids: tuple[int, ...] = ()
    media: tuple[MediaDescriptor, ...] = ()
    depth: int | None = None
    tokens: int = 0

    def with_tokens(self, tokens: int) -> ContextItem:
        """This item with ``tokens`` set. (A direct copy: counting runs on every item of every
        turn, and `dataclasses.replace` is three times slower.)"""
        return ContextItem(
            tag=self.tag,
            role=self.role,
            text=self.text,
            source_ids=self.source_ids,
            media=self.media,
            depth=self.depth,
            tokens=tokens,
        )


SYSTEM_NOTE_START = "[System: "


def system_note(text: str) -> str:
    """``[System: text]``: how a prompt marks words that are nobody's message."""
    return f"{SYSTEM_NOTE_START}{text}]"


def system_note_content(text: str) -> str:
    """The words inside a `system_note`; ``text`` itself when it is not one."""
    if text.startswith(SYSTEM_NOTE_START) and text.endswith("]"):
        return text[len(SYSTEM_NOTE_START) : -1]
    return text
