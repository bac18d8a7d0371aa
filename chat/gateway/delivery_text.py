"""Text rules Discord imposes on delivery: message length and webhook names.

Pure functions, so they are tested without a gateway.
"""

from __future__ import annotations

import re

MESSAGE_LIMIT = 2000
MAX_REPLY_PIECES = 4
CUT_MARKER = "[…]"
WEBHOOK_NAME_LIMIT = 80
_FENCE_ROOM = len("\n```")
_FORBIDDEN_IN_WEBHOOK_NAMES = re.compile(r"(clyde|discord)", re.IGNORECASE)
_SENTENCE_END = re.compile(r"[.!?…。！？](?=\s)")


def split_reply(
    text: str, *, limit: int = MESSAGE_LIMIT, max_pieces: int = MAX_REPLY_PIECES
) -> list[str]:
    """``text`` cut into at most ``max_pieces`` messages of at most ``limit`` characters.

    Cuts at the last line break that fits, else the last sentence end, else the last space,
    else hard at ``limit``; whitespace at the cuts is dropped and empty pieces are never sent.
    An open Markdown code fence is closed at a cut and reopened in the next piece.

    When the text needs more than ``max_pieces`` messages, the last one is cut short and ends
    with ``CUT_MARKER`` ("[…]", after a space, or on its own line after a closed code fence),
    so readers see that the reply goes on; the rest is not sent. Raises ValueError when
    ``max_pieces`` < 1 or ``limit`` leaves no room for text beside a fence and the marker.
    """
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
        if piece.count("```") % 2:
            piece += "\n```"
            rest = "```\n" + rest
        if last:
            separator = "\n" if piece.endswith("```") else " "
            pieces.append(f"{piece}{separator}{CUT_MARKER}")
            break
        if piece:
            pieces.append(piece)
    return pieces


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


def sanitize_webhook_name(name: str) -> str:
    """A webhook username Discord accepts: 1–80 characters, without "clyde" or "discord"
    (a zero-width space is inserted into those words, so the name still reads the same)."""
    cleaned = _FORBIDDEN_IN_WEBHOOK_NAMES.sub(
        lambda m: m.group(0)[:2] + "\u200b" + m.group(0)[2:], name
    )
    cleaned = " ".join(cleaned.split())[:WEBHOOK_NAME_LIMIT]
    return cleaned or "Persona"
