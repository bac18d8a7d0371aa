"""Where a reply is cut into Discord messages: whole, or as the model writes it.

Discord takes at most 2,000 characters a message, and a reply never takes more than
`MAX_REPLY_PIECES` messages (the reply cap). `split_reply` cuts a whole reply; `paragraph_pieces`
and `edit_pieces` cut a reply that is still being written, and only ever return pieces that
more text cannot change, so a delivery loop can send each one the moment it appears and never
take it back. All three are pure functions of the text: the delivery loop keeps no buffer of its
own beyond the reply text so far and how many pieces it has sent.

Cut rules (the same everywhere): at the last line break that fits, else the last sentence end,
else the last space, else hard at the limit; whitespace at a cut is dropped; an open Markdown
code fence is closed at a cut and reopened in the next piece; a reply cut at the cap ends with
`CUT_MARKER` ("[…]").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MESSAGE_LIMIT = 2000
MAX_REPLY_PIECES = 4
CUT_MARKER = "[…]"
_FENCE = "```"
_FENCE_ROOM = len("\n```")
_SENTENCE_END = re.compile(r"[.!?…。！？](?=\s)")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
_UNCAPPED = 10**9


@dataclass(frozen=True)
class ReplyPieces:
    """What may be sent of a reply so far: ``pieces`` in order (every one final), and whether
    the reply reached the cap (``capped``: the last piece ends with "[…]", nothing more will be
    sent, and the model may stop writing)."""

    pieces: tuple[str, ...]
    capped: bool = False


def split_reply(
    text: str, *, limit: int = MESSAGE_LIMIT, max_pieces: int = MAX_REPLY_PIECES
) -> list[str]:
    """``text`` cut into at most ``max_pieces`` messages of at most ``limit`` characters.

    Cuts follow the module's rules; empty pieces are never sent. When the text needs more than
    ``max_pieces`` messages, the last one is cut short and ends with ``CUT_MARKER`` ("[…]",
    after a space, or on its own line after a closed code fence), so readers see that the
    reply goes on; the rest is not sent. Raises ValueError when ``max_pieces`` < 1 or ``limit``
    leaves no room for text beside a fence and the marker.
    """
    return list(_split(text, limit=limit, max_pieces=max_pieces).pieces)


def paragraph_pieces(
    text: str, *, final: bool, limit: int = MESSAGE_LIMIT, max_pieces: int = MAX_REPLY_PIECES
) -> ReplyPieces:
    """The messages of a reply delivered paragraph by paragraph, as far as ``text`` (the reply
    so far; the whole reply when ``final``) decides them.

    A paragraph is the text up to a blank line outside a code fence (or, when ``final``, up to
    the end); each complete paragraph is one message, split by `split_reply`'s rules when it is
    longer than ``limit``. Only the first ``max_pieces − 1`` messages are paragraphs: the last
    allowed message gathers the rest of the reply (paragraphs kept apart by their blank lines),
    and is sent when the reply ends, or cut with "[…]" (``capped``) as soon as the rest
    outgrows it. A paragraph still being written is sent early only in the parts a longer text
    cannot change (its first 2,000-character pieces).

    Every call recomputes from the start, so the same ``text`` always gives the same pieces,
    and a longer ``text`` gives the same pieces followed by more.
    """
    pieces: list[str] = []
    start = 0
    for body, end in _complete_paragraphs(text):
        parts = _split(body, limit=limit, max_pieces=_UNCAPPED).pieces
        if len(pieces) + len(parts) > max_pieces - 1:
            break
        pieces += parts
        start = end
    rest = _split(text[start:], limit=limit, max_pieces=max_pieces - len(pieces))
    if final or rest.capped:
        return ReplyPieces((*pieces, *rest.pieces), capped=rest.capped)
    return ReplyPieces((*pieces, *rest.pieces[:-1]))


def edit_pieces(
    text: str, *, final: bool, limit: int = MESSAGE_LIMIT, max_pieces: int = MAX_REPLY_PIECES
) -> tuple[ReplyPieces, str]:
    """The messages of a reply written into one message that is edited as text arrives and
    continued in a new message when it is full.

    Returns the finished messages (``pieces``: final, each ``limit`` characters at most, cut
    by `split_reply`'s rules) and the text of the message still being written (``""`` when
    there is none: ``final``, capped, or nothing written yet). The reply cap is
    `MAX_REPLY_PIECES` messages, as for a whole reply.
    """
    split = _split(text, limit=limit, max_pieces=max_pieces)
    if final or split.capped:
        return ReplyPieces(split.pieces, capped=split.capped), ""
    if not split.pieces:
        return ReplyPieces(()), ""
    return ReplyPieces(split.pieces[:-1]), split.pieces[-1]


def _complete_paragraphs(text: str) -> list[tuple[str, int]]:
    """Each paragraph of ``text`` ended by a blank line outside a code fence: its text
    (stripped; empty ones skipped) and where the text after its blank line starts."""
    paragraphs = []
    start = 0
    for blank in _BLANK_LINE.finditer(text):
        if text.count(_FENCE, 0, blank.start()) % 2:
            continue  # inside a code block: a blank line there is part of the code
        body = text[start : blank.start()].strip()
        if body:
            paragraphs.append((body, blank.end()))
        start = blank.end()
    return paragraphs


def _split(text: str, *, limit: int, max_pieces: int) -> ReplyPieces:
    if max_pieces < 1:
        raise ValueError(f"max_pieces must be at least 1, got {max_pieces}")
    if limit < 2 * (_FENCE_ROOM + len(CUT_MARKER) + 1):
        raise ValueError(f"limit {limit} is too small to split a reply")
    pieces: list[str] = []
    rest = text.strip()
    while rest:
        if len(rest) <= limit:
            pieces.append(rest)
            break
        last = len(pieces) == max_pieces - 1
        room = limit - _FENCE_ROOM - (len(CUT_MARKER) + 1 if last else 0)
        cut = _cut_position(rest, room)
        piece, rest = rest[:cut].rstrip(), rest[cut:].strip()
        if piece.count(_FENCE) % 2:
            piece += "\n" + _FENCE
            rest = _FENCE + "\n" + rest
        if last:
            separator = "\n" if piece.endswith(_FENCE) else " "
            pieces.append(f"{piece}{separator}{CUT_MARKER}")
            return ReplyPieces(tuple(pieces), capped=True)
        if piece:
            pieces.append(piece)
    return ReplyPieces(tuple(pieces))


def _cut_position(text: str, limit: int) -> int:
    window = text[:limit]
    newline = window.rfind("\n")
    if newline > limit // 2:
        return newline + 1
    sentence_ends = [m.end() for m in _SENTENCE_END.finditer(window)]
    if sentence_ends and sentence_ends[-1] > limit // 2:
        return sentence_ends[-1]
    space = window.rfind(" ")
    if space > limit // 2:
        return space + 1
    return limit
