"""Names for the ids the dashboard shows: guilds, channels (``#general``), threads and users, as
the worker last heard them from the gateway (`chat.models.DiscordName`). Nothing here asks
Discord. A user with full privacy is shown as such, never by a name; an id nobody has named yet
is shown as the id. Every shown name keeps its raw id (templates put it in a tooltip).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from chat.models import DiscordName
from chat.pipeline.types import PrivacyLevel
from personas.models import GuildConfig, UserPrivacy

FULL_PRIVACY_LABEL = "a user with full privacy"


@dataclass(frozen=True)
class Shown:
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
        self._users: dict[int, Shown] = {}

    def guild(self, guild_id: int | None) -> Shown:
        """The guild's Discord name, else the name its configuration gives it."""
        if guild_id is None:
            return Shown(0, "direct messages")
        row = self._place(DiscordName.Kind.GUILD, guild_id)
        if row is not None:
            return Shown(guild_id, row.name)
        configured = GuildConfig.objects.filter(guild_id=guild_id).values_list("name", flat=True)
        name = next(iter(configured), "")
        return Shown(guild_id, name) if name else Shown(guild_id, str(guild_id), known=False)

    def channel(self, channel_id: int | None) -> Shown:
        """``#name`` for a channel, ``#parent › name`` for a thread."""
        if channel_id is None:
            return Shown(0, "—", known=False)
        row = self._place(DiscordName.Kind.CHANNEL, channel_id)
        if row is not None:
            return Shown(channel_id, f"#{row.name}")
        thread = self._place(DiscordName.Kind.THREAD, channel_id)
        if thread is not None:
            parent = self._place(DiscordName.Kind.CHANNEL, thread.parent_id or 0)
            prefix = f"#{parent.name} › " if parent is not None else ""
            return Shown(channel_id, f"{prefix}{thread.name}")
        return Shown(channel_id, str(channel_id), known=False)

    def user(self, user_id: int | None) -> Shown:
        """The user's name as their guild shows it; a user with full privacy as such."""
        if user_id is None:
            return Shown(0, "—", known=False)
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
                self._users[user_id] = Shown(user_id, FULL_PRIVACY_LABEL, hidden=True)
            elif row is not None:
                self._users[user_id] = Shown(user_id, row.name, avatar_url=row.avatar_url)
            else:
                self._users[user_id] = Shown(user_id, str(user_id), known=False)

    def _place(self, kind: str, discord_id: int) -> DiscordName | None:
        if self._places is None:
            rows = DiscordName.objects.exclude(kind=DiscordName.Kind.USER)
            self._places = {(r.kind, r.discord_id): r for r in rows}
        return self._places.get((kind, discord_id))


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
