"""Builders and hypothesis strategies for tests: real frozen pipeline inputs, short to write."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from itertools import count
from typing import Any

from hypothesis import strategies as st

from chat.pipeline.context import TurnInput
from chat.pipeline.simplify import SimplifiedHistory, build_simplified_history
from chat.pipeline.tokens import O200kTokenCounter
from chat.pipeline.types import (
    Attachment,
    Author,
    CardKind,
    Embed,
    HistoryMessage,
    MessageReference,
    NameDirectory,
    PersonaProfile,
    Reaction,
    Sticker,
)

SNOWFLAKE_BASE = 1_300_000_000_000_000_000
CHANNEL_ID = SNOWFLAKE_BASE + 7
T0 = datetime(2026, 7, 11, 3, 0, tzinfo=UTC)
"""Saturday, July 11, 2026, 03:00 UTC (12:00 in Asia/Tokyo)."""


def sf(n: int) -> int:
    """A realistic 19-digit snowflake; ``n`` orders them."""
    return SNOWFLAKE_BASE + n


ALICE = Author(id=sf(9001), display_name="Alice")
BOB = Author(id=sf(9002), display_name="Bob")
CAROL = Author(id=sf(9003), display_name="Carol")
TOMORI = Author(id=sf(9100), display_name="Tomori", is_bot=True, persona_name="Tomori")
KAITO = Author(
    id=sf(9101), display_name="Kaito", is_bot=True, webhook_id=sf(9201), persona_name="Kaito"
)
TOMORI_PERSONA = PersonaProfile(name="Tomori", is_main=True)
KAITO_PERSONA = PersonaProfile(name="Kaito", aliases=("Kai",))
NAMES = NameDirectory(
    users={ALICE.id: "Alice", BOB.id: "Bob", CAROL.id: "Carol", TOMORI.id: "Tomori"},
    channels={sf(8001): "general"},
    roles={sf(8101): "Mods"},
)


_unnumbered = count(1_000_000)


def message(
    n: int | None = None,
    content: str = "hello",
    *,
    author: Author = ALICE,
    minutes: float = 0,
    at: datetime | None = None,
    channel_id: int = CHANNEL_ID,
    **fields: Any,
) -> HistoryMessage:
    """Message ``sf(n)`` from ``author``, ``minutes`` after `T0` (or at ``at``).

    Without ``n`` the message gets the next id of its own series, newer than every numbered one
    a test is likely to use (so unnumbered messages keep their creation order).
    """
    return HistoryMessage(
        id=sf(next(_unnumbered) if n is None else n),
        channel_id=channel_id,
        author=author,
        content=content,
        created_at=at or T0 + timedelta(minutes=minutes),
        **fields,
    )


def image(n: int, filename: str = "cat.png", **fields: Any) -> Attachment:
    fields.setdefault("url", f"https://cdn.example/attachments/{n}/{filename}")
    return Attachment(id=sf(n), filename=filename, content_type="image/png", **fields)


def gif(n: int, filename: str = "dance.gif") -> Attachment:
    return Attachment(
        id=sf(n), filename=filename, url=f"https://cdn.example/{n}.gif", content_type="image/gif"
    )


def document(n: int, filename: str = "notes.txt") -> Attachment:
    return Attachment(
        id=sf(n), filename=filename, url=f"https://cdn.example/{n}", content_type="text/plain"
    )


def reply_to(n: int) -> MessageReference:
    return MessageReference(message_id=sf(n), channel_id=CHANNEL_ID)


def simplify(messages: list[HistoryMessage], **overrides: Any) -> SimplifiedHistory:
    """`build_simplified_history` with everyone visible, in UTC, unless overridden."""
    arguments: dict[str, Any] = {
        "reply_targets": {},
        "names": NAMES,
        "hidden_user_ids": frozenset(),
        "blocked_user_ids": frozenset(),
        "timezone": UTC,
    }
    arguments.update(overrides)
    return build_simplified_history(messages, **arguments)


def turn_input(history: list[HistoryMessage], **overrides: Any) -> TurnInput:
    """A turn for `TOMORI_PERSONA` answering the newest message, a day after `T0`, in UTC."""
    arguments: dict[str, Any] = {
        "persona": TOMORI_PERSONA,
        "history": tuple(history),
        "trigger_id": history[-1].id,
        "now": T0 + timedelta(days=1),
        "timezone": "UTC",
        "token_counter": O200kTokenCounter(),
        "personas": (TOMORI_PERSONA, KAITO_PERSONA),
        "names": NAMES,
    }
    arguments.update(overrides)
    return TurnInput(**arguments)


# Hypothesis: channels full of snowflakes in every shape Discord puts them.

AUTHORS = (ALICE, BOB, CAROL, TOMORI, KAITO)
_raw_ids = st.integers(min_value=10**16, max_value=2**64 - 1)
_markup = st.one_of(
    _raw_ids.map(str),
    _raw_ids.map(lambda i: f"<@{i}>"),
    _raw_ids.map(lambda i: f"<#{i}>"),
    _raw_ids.map(lambda i: f"<@&{i}>"),
    _raw_ids.map(lambda i: f"<:blob:{i}>"),
    _raw_ids.map(lambda i: f"https://discord.com/channels/{i}/{i}/{i}"),
    st.sampled_from([f"<@{ALICE.id}>", "{user}", "{bot}", "{{if tool:read_file}}x{{/if}}"]),
    st.text(alphabet="ab c;\n:<>@#!0123456789", max_size=12),
)
contents = st.lists(_markup, max_size=5).map(" ".join)
_attachments = st.lists(
    st.builds(
        Attachment,
        id=_raw_ids,
        filename=st.sampled_from(["a.png", "b.gif", "c.txt", "d.zip", f"{sf(1)}.png"]),
        url=st.sampled_from(["https://cdn.example/1.png", "https://cdn.example/2.png"]),
    ),
    max_size=2,
)
_cards = st.lists(
    st.builds(Embed, title=contents, description=contents, kind=st.sampled_from(CardKind)),
    max_size=1,
)


@st.composite
def histories(draw: st.DrawFn, max_size: int = 12) -> list[HistoryMessage]:
    """Oldest-first windows with merges, media, replies, cards, stickers and reactions."""
    size = draw(st.integers(min_value=1, max_value=max_size))
    minutes = 0.0
    messages: list[HistoryMessage] = []
    for n in range(1, size + 1):
        minutes += draw(st.sampled_from([0.5, 30, 600]))
        earlier = draw(st.integers(min_value=1, max_value=n + 3))
        messages.append(
            message(
                n,
                draw(contents),
                author=draw(st.sampled_from(AUTHORS)),
                minutes=minutes,
                attachments=tuple(draw(_attachments)),
                embeds=tuple(draw(_cards)),
                stickers=tuple(draw(st.lists(st.just(Sticker(sf(1), "wave")), max_size=1))),
                reference=reply_to(earlier) if draw(st.booleans()) else None,
                mention_ids=tuple(draw(st.lists(st.sampled_from([a.id for a in AUTHORS])))),
                reactions=tuple(draw(st.lists(st.just(Reaction(f"<:up:{sf(2)}>", 2)), max_size=1))),
            )
        )
    return messages
