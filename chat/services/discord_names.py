"""The names Discord shows for guilds, channels, threads and users, kept from the gateway.

The worker's gateway client converts guild and channel create/update and member events into
`NameRecord`s and calls `names_record`; the dashboard reads them (`dashboard.names`)
and never asks Discord. A user with full privacy is never stored: their name is left out and
any name kept from before their choice is forgotten with the next names the gateway gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction

from chat.models import DiscordName
from chat.pipeline.types import PrivacyLevel
from personas.models import UserPrivacy

BATCH = 500
NAME_LENGTH = 100  # Discord's longest guild, channel and nick names


@dataclass(frozen=True)
class NameRecord:
    """One object's current name (``kind``: a `DiscordName.Kind` value)."""

    kind: str
    discord_id: int
    name: str
    guild_id: int | None = None
    parent_id: int | None = None
    avatar_url: str = ""


def names_record(*, names: Sequence[NameRecord]) -> int:
    """Store ``names`` (insert or replace, the last of repeated objects wins), in batches of
    `BATCH`, each in one transaction. Users with full privacy are left out, and every name kept
    for a user who has chosen full privacy since is deleted. Returns how many names were
    stored."""
    latest = {(n.kind, n.discord_id): n for n in names}
    ordered = [latest[key] for key in sorted(latest)]
    full_privacy = UserPrivacy.objects.filter(level=PrivacyLevel.FULL).values("user_id")
    DiscordName.objects.filter(kind=DiscordName.Kind.USER, discord_id__in=full_privacy).delete()
    stored = 0
    for start in range(0, len(ordered), BATCH):
        batch = ordered[start : start + BATCH]
        user_ids = [n.discord_id for n in batch if n.kind == DiscordName.Kind.USER]
        hidden = set(
            UserPrivacy.objects.filter(user_id__in=user_ids, level=PrivacyLevel.FULL).values_list(
                "user_id", flat=True
            )
        )
        rows = [
            DiscordName(
                kind=n.kind,
                discord_id=n.discord_id,
                name=n.name[:NAME_LENGTH],
                guild_id=n.guild_id,
                parent_id=n.parent_id,
                avatar_url=n.avatar_url,
            )
            for n in batch
            if not (n.kind == DiscordName.Kind.USER and n.discord_id in hidden)
        ]
        with transaction.atomic():
            DiscordName.objects.bulk_create(
                rows,
                update_conflicts=True,
                unique_fields=["kind", "discord_id"],
                update_fields=["name", "guild_id", "parent_id", "avatar_url", "updated_at"],
            )
        stored += len(rows)
    return stored
