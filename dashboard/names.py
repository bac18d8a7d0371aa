"""Names for the ids the dashboard shows: guilds, channels (``#general``), threads and users, as
the worker last heard them from the gateway (`chat.models.DiscordName`). Nothing here asks
Discord. A user with full privacy is shown as such, never by a name; an id nobody has named yet
is shown as the id. Every shown name keeps its raw id (templates put it in a tooltip).

The other way round, a user field lets an admin pick a member by name (`guild_members`, shown
as ``name (id)``) or type an id (`picked_user_id` reads either).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models.functions import Lower

from chat.models import DiscordName
from chat.pipeline.types import PrivacyLevel
from dashboard.ids import parse_id
from personas.models import GuildConfig, UserPrivacy

FULL_PRIVACY_LABEL = "a user with full privacy"


@dataclass(frozen=True)
class ShownName:
    """How the dashboard shows one id: ``text`` (a name, or the id when none is known),
    ``known`` whether a name was found, ``hidden`` a user with full privacy, ``avatar_url`` a
    user's own avatar (empty: none)."""

    discord_id: int
    text: str
    known: bool = True
    hidden: bool = False
    avatar_url: str = ""


class NameBook:
    """Names for one page. Guild, channel and thread names are read together on first use;
    users one query per batch (`prefetch_users`) or per unknown id."""

    def __init__(self) -> None:
        self._places: dict[tuple[str, int], DiscordName] | None = None
        self._users: dict[int, ShownName] = {}

    def guild(self, guild_id: int | None) -> ShownName:
        """The guild's Discord name, else the name its configuration gives it."""
        if guild_id is None:
            return ShownName(0, "direct messages")
        row = self._place(DiscordName.Kind.GUILD, guild_id)
        if row is not None:
            return ShownName(guild_id, row.name)
        configured = GuildConfig.objects.filter(guild_id=guild_id).values_list("name", flat=True)
        name = next(iter(configured), "")
        return (
            ShownName(guild_id, name) if name else ShownName(guild_id, str(guild_id), known=False)
        )

    def channel(self, channel_id: int | None) -> ShownName:
        """``#name`` for a channel, ``#parent › name`` for a thread."""
        if channel_id is None:
            return ShownName(0, "—", known=False)
        row = self._place(DiscordName.Kind.CHANNEL, channel_id)
        if row is not None:
            return ShownName(channel_id, f"#{row.name}")
        thread = self._place(DiscordName.Kind.THREAD, channel_id)
        if thread is not None:
            parent = self._place(DiscordName.Kind.CHANNEL, thread.parent_id or 0)
            prefix = f"#{parent.name} › " if parent is not None else ""
            return ShownName(channel_id, f"{prefix}{thread.name}")
        return ShownName(channel_id, str(channel_id), known=False)

    def user(self, user_id: int | None) -> ShownName:
        """The user's name as their guild shows it; a user with full privacy as such."""
        if user_id is None:
            return ShownName(0, "—", known=False)
        if user_id not in self._users:
            self.prefetch_users([user_id])
        return self._users[user_id]

    def prefetch_users(self, user_ids: Iterable[int]) -> None:
        """Read the names (and privacy) of ``user_ids`` not read yet, in one query each."""
        wanted = {int(u) for u in user_ids} - self._users.keys()
        if not wanted:
            return
        hidden = set(
            UserPrivacy.objects.filter(user_id__in=wanted, level=PrivacyLevel.FULL).values_list(
                "user_id", flat=True
            )
        )
        rows = DiscordName.objects.filter(kind=DiscordName.Kind.USER, discord_id__in=wanted)
        named = {r.discord_id: r for r in rows}
        for user_id in wanted:
            row = named.get(user_id)
            if user_id in hidden:
                self._users[user_id] = ShownName(user_id, FULL_PRIVACY_LABEL, hidden=True)
            elif row is not None:
                self._users[user_id] = ShownName(user_id, row.name, avatar_url=row.avatar_url)
            else:
                self._users[user_id] = ShownName(user_id, str(user_id), known=False)

    def _place(self, kind: str, discord_id: int) -> DiscordName | None:
        if self._places is None:
            rows = DiscordName.objects.exclude(kind=DiscordName.Kind.USER)
            self._places = {(r.kind, r.discord_id): r for r in rows}
        return self._places.get((kind, discord_id))


@dataclass(frozen=True)
class Member:
    """A user a user field offers by name; ``label`` is how the field shows (and sends) them."""

    user_id: int
    name: str

    @property
    def label(self) -> str:
        return f"{self.name} ({self.user_id})"


MEMBERS_OFFERED = 2_000
"""At most this many members in one user field's list (a page stays light in a big guild)."""


def guild_members(*, guild_id: int | None, limit: int = MEMBERS_OFFERED) -> list[Member]:
    """The users the gateway last saw in the guild under a name, by name (the first ``limit``):
    what a user field offers. Users with full privacy (in any guild, as everywhere the
    dashboard names users) are left out."""
    if guild_id is None:
        return []
    hidden = UserPrivacy.objects.filter(level=PrivacyLevel.FULL).values("user_id")
    rows = (
        DiscordName.objects.filter(kind=DiscordName.Kind.USER, guild_id=guild_id)
        .exclude(discord_id__in=hidden)
        .order_by(Lower("name"), "discord_id")[:limit]
    )
    return [Member(row.discord_id, row.name) for row in rows]


_LABELLED_ID = re.compile(r".*\(\s*([0-9]+)\s*\)")


def picked_user_id(text: str, members: Iterable[Member]) -> int | None:
    """The user id in what an admin typed or picked in a user field: an id (ASCII digits), a
    picked ``name (id)`` (the id counts), or the name of exactly one of ``members`` (any case).
    None when ``text`` is empty. Raises ValueError, with a sentence for the admin, otherwise."""
    text = text.strip()
    if not text:
        return None
    labelled = _LABELLED_ID.fullmatch(text)
    digits = labelled.group(1) if labelled else text
    if digits.isascii() and digits.isdigit():
        user_id = parse_id(digits)
        if user_id is None:
            raise ValueError(f"{digits} is too large to be a Discord user id.")
        return user_id
    named = {m.user_id for m in members if m.name.casefold() == text.casefold()}
    if len(named) == 1:
        return named.pop()
    if named:
        raise ValueError(f"Several members are named “{text}”: pick one from the list.")
    raise ValueError(f"No member named “{text}” is known here: pick one, or give a user id.")


def name_book(request: object | None) -> NameBook:
    """The page's `NameBook`, kept on ``request`` so every template of one response shares it
    (a fresh one without a request, e.g. for a websocket fragment)."""
    if request is None:
        return NameBook()
    book = getattr(request, "discord_names", None)
    if book is None:
        book = NameBook()
        request.discord_names = book  # type: ignore[attr-defined]
    return book
