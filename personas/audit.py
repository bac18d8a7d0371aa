"""Who changes a guild's configuration, and how a change is written into the audit trail
(`personas.models.ConfigChange`).

`ChangeAuthor` is what every configuration service takes as ``actor``: the person (a dashboard
account, a Discord user running a slash command, the shell running ``importconfig``) and the
way (`ChangeKind`). `field_changes` and `row_values` turn a row's values into the trail's
``[{"field", "before", "after"}]``.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import models

from personas.models import AUDIT_VALUE_MAX, ChangeKind

if TYPE_CHECKING:
    from django.contrib.auth.base_user import AbstractBaseUser

UNRECORDED = ("id", "created_at", "updated_at")


@dataclass(frozen=True)
class ChangeAuthor:
    """Who made a change (``user_id``: a dashboard account; ``discord_id``: their Discord id,
    or a command's caller; ``name``: how the trail names them when nothing else does) and how
    (``kind``, ``via``)."""

    kind: ChangeKind
    name: str
    user_id: int | None = None
    discord_id: int | None = None
    via: str = ""

    @property
    def key(self) -> str:
        """One person's changes together: their account, else their Discord id, else name."""
        if self.user_id is not None:
            return f"user:{self.user_id}"
        if self.discord_id is not None:
            return f"discord:{self.discord_id}"
        return f"name:{self.name}"[:64]

    @classmethod
    def of_user(
        cls,
        user: AbstractBaseUser,
        *,
        kind: ChangeKind = ChangeKind.DASHBOARD,
        discord_id: int | None = None,
        via: str = "",
    ) -> ChangeAuthor:
        """A dashboard account's change (a staff user, or a person logged in with Discord)."""
        name = getattr(user, "first_name", "") or user.get_username()
        return cls(kind=kind, name=name, user_id=user.pk, discord_id=discord_id, via=via)

    @classmethod
    def command(cls, *, discord_id: int, command: str) -> ChangeAuthor:
        """A slash command's caller."""
        return cls(
            kind=ChangeKind.COMMAND, name=f"user {discord_id}", discord_id=discord_id, via=command
        )


def author_of(actor: ChangeAuthor | AbstractBaseUser | None) -> ChangeAuthor | None:
    """``actor`` as a `ChangeAuthor` (a bare account: a dashboard form's change)."""
    if actor is None or isinstance(actor, ChangeAuthor):
        return actor
    return ChangeAuthor.of_user(actor)


def audit_value(value: Any) -> Any:
    """``value`` as the trail stores it: JSON, a row as its name, a long value cut."""
    if isinstance(value, models.Model):
        value = str(value)
    elif isinstance(value, dt.datetime | dt.date):
        value = value.isoformat()
    elif isinstance(value, decimal.Decimal | uuid.UUID):
        value = str(value)
    text = json.dumps(value, ensure_ascii=False, default=str)
    if len(text) <= AUDIT_VALUE_MAX:
        return json.loads(text)
    kept = text[:AUDIT_VALUE_MAX]
    return f"{kept}… ({len(text) - AUDIT_VALUE_MAX:,} more characters)"


def field_changes(
    names: Iterable[str], before: Mapping[str, Any], after: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """``[{"field", "before", "after"}]`` for each of ``names`` (a missing side is None)."""
    return [
        {
            "field": name,
            "before": audit_value(before.get(name)),
            "after": audit_value(after.get(name)),
        }
        for name in names
    ]


def row_values(instance: models.Model) -> dict[str, Any]:
    """A row's recorded fields (its own columns, relations by name), for a creation's "after"
    or a deletion's "before"."""
    values = {}
    for field in instance._meta.concrete_fields:
        if field.name in UNRECORDED:
            continue
        if isinstance(field, models.ForeignKey):
            values[field.name] = getattr(instance, field.name)
        else:
            values[field.name] = getattr(instance, field.attname)
    return values
