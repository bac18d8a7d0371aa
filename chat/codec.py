"""Persisting pipeline messages as JSON (the event queue and the unread pool store them).

pydantic validates the stored JSON back into the frozen `HistoryMessage`, so a row written by an
older worker with a missing optional field still loads, and a corrupt row fails loudly with the
field that is wrong instead of producing a half-built message.
"""

from __future__ import annotations

from functools import cache

from pydantic import TypeAdapter

from chat.pipeline.types import HistoryMessage


@cache
def _adapter() -> TypeAdapter[HistoryMessage]:
    return TypeAdapter(HistoryMessage)


def message_to_json(message: HistoryMessage) -> dict:
    """A JSON-compatible dict (snowflakes stay ints: JSON numbers hold them exactly in Python
    and PostgreSQL's jsonb)."""
    return _adapter().dump_python(message, mode="json")


def message_to_json_text(message: HistoryMessage) -> str:
    """`message_to_json` already encoded as JSON text (one pass, no intermediate dict)."""
    return _adapter().dump_json(message).decode()


def message_from_json_text(text: str | bytes) -> HistoryMessage:
    """`message_from_json` from the JSON text itself (one pass, no intermediate dict)."""
    return _adapter().validate_json(text)


def message_from_json(data: dict) -> HistoryMessage:
    """The message stored by `message_to_json`; raises pydantic.ValidationError when corrupt."""
    return _adapter().validate_python(data)
