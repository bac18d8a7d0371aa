"""Text rules Discord imposes on delivery: message length and webhook names.

Pure functions, so they are tested without a gateway. Where a reply is cut into messages is
decided by `chat.pipeline.reply_pieces` (a whole reply and a streamed one are cut alike).
"""

from __future__ import annotations

import re

from chat.pipeline.reply_pieces import CUT_MARKER, MAX_REPLY_PIECES, MESSAGE_LIMIT, split_reply

__all__ = [
    "CUT_MARKER",
    "MAX_REPLY_PIECES",
    "MESSAGE_LIMIT",
    "WEBHOOK_NAME_LIMIT",
    "sanitize_webhook_name",
    "split_reply",
]

WEBHOOK_NAME_LIMIT = 80
_FORBIDDEN_IN_WEBHOOK_NAMES = re.compile(r"(clyde|discord)", re.IGNORECASE)


def sanitize_webhook_name(name: str) -> str:
    """A webhook username Discord accepts: 1–80 characters, without "clyde" or "discord"
    (a zero-width space is inserted into those words, so the name still reads the same)."""
    cleaned = _FORBIDDEN_IN_WEBHOOK_NAMES.sub(
        lambda m: m.group(0)[:2] + "\u200b" + m.group(0)[2:], name
    )
    cleaned = " ".join(cleaned.split())[:WEBHOOK_NAME_LIMIT]
    return cleaned or "Persona"
