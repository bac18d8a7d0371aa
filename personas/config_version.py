"""The configuration's version stamps: one `ConfigVersion` row per guild, drawn anew in the
transaction of every change of what a channel's configuration carries, so that a worker may
keep channel configurations and trust them while the stamps they were read at are current.

`CONFIGURATION_MODELS` are the models a channel configuration reads
(`chat.selectors.configured_channel`); every save and delete of one of their rows moves its
guild's stamp here, by signals (cascades and the admin's bulk deletes included: Django sends
the signals per row when a model has receivers), and every persona change moves
`DM_VERSION_KEY` too. A queryset ``update``, a ``bulk_*`` write or raw SQL sends no signal:
such a write must call `config_version_bump` itself, in its transaction; a data migration
need not, since every stamp moves after ``migrate`` (`config_versions_bump_all`).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from django.db import connection, models
from django.db.models.signals import post_delete, post_save, pre_save

from personas.models import Block, ChannelConfig, ConfigVersion, GuildConfig, ModelPrice, Persona

DM_VERSION_KEY = 0
"""The stamp DM configurations are also read at: it moves with every persona of any guild."""
PRICES_VERSION_KEY = 1
"""The stamp of the operator's price table (`ModelPrice`; no guild has id 1): it moves with
every change of a price, so a process keeps the table while it stands."""

CONFIGURATION_MODELS: tuple[type[models.Model], ...] = (GuildConfig, ChannelConfig, Persona, Block)


def config_version_bump(guild_id: int) -> None:
    """Count one change of the configuration of the guild ``guild_id`` (Discord's id, or
    `DM_VERSION_KEY`). Call it in the change's transaction: readers that saw the old stamp
    read the configuration anew once the change commits."""
    if ConfigVersion.objects.filter(guild_id=guild_id).update(stamp=uuid.uuid4()):
        return
    _, created = ConfigVersion.objects.get_or_create(guild_id=guild_id)
    if not created:
        ConfigVersion.objects.filter(guild_id=guild_id).update(stamp=uuid.uuid4())


def config_versions_bump_all(**_: object) -> None:
    """Move every guild's stamp (and `DM_VERSION_KEY`): a running worker reads every
    configuration anew. Connected to ``post_migrate``, so a data migration that writes
    configuration with ``update``, ``bulk_*`` or SQL (no signals) is read all the same."""
    keys = {
        *GuildConfig.objects.values_list("guild_id", flat=True),
        DM_VERSION_KEY,
        PRICES_VERSION_KEY,
    }
    ConfigVersion.objects.bulk_create(
        [ConfigVersion(guild_id=key) for key in keys], ignore_conflicts=True
    )
    ConfigVersion.objects.update(stamp=uuid.uuid4())


def config_versions(keys: Iterable[int]) -> dict[int, str]:
    """The current stamp of each of ``keys`` ('' before its first change), in one statement
    on the connection's cursor (the ORM's query building would cost several times the read)."""
    wanted = sorted(set(keys))
    found = dict.fromkeys(wanted, "")
    if not wanted:
        return found
    marks = ", ".join(["%s"] * len(wanted))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT guild_id, stamp FROM {ConfigVersion._meta.db_table} "
            f"WHERE guild_id IN ({marks})",
            wanted,
        )
        for guild_id, stamp in cursor.fetchall():
            found[guild_id] = str(stamp)
    return found


def _discord_guild_id(instance: models.Model) -> int | None:
    """The Discord id of the guild ``instance`` belongs to; None when that guild is gone
    (a cascade: the guild's own delete moves its stamp)."""
    if isinstance(instance, GuildConfig):
        return instance.guild_id
    guild_pk = instance.guild_id  # type: ignore[attr-defined]
    cached = instance._state.fields_cache.get("guild")
    if cached is not None and cached.pk == guild_pk:
        return cached.guild_id
    return GuildConfig.objects.filter(pk=guild_pk).values_list("guild_id", flat=True).first()


def _stored_guild_id(instance: models.Model) -> int | None:
    """The Discord guild id the stored row of ``instance`` belongs to (before this save)."""
    model = type(instance)
    field = "guild_id" if model is GuildConfig else "guild__guild_id"
    rows = model._default_manager.filter(pk=instance.pk).values_list(field, flat=True)
    return rows.first()


def _on_pre_save(sender: type[models.Model], instance: models.Model, **kwargs: object) -> None:
    """Remember which guild the row belonged to: a row moved to another guild (or a guild
    given another Discord id) changes the configuration of both."""
    if instance.pk is not None and not kwargs.get("raw"):
        instance._config_version_was = _stored_guild_id(instance)  # type: ignore[attr-defined]


def _on_change(sender: type[models.Model], instance: models.Model, **kwargs: object) -> None:
    keys = {_discord_guild_id(instance), getattr(instance, "_config_version_was", None)}
    if isinstance(instance, Persona):
        keys.add(DM_VERSION_KEY)
    for key in sorted(k for k in keys if k is not None):
        config_version_bump(key)


def _on_price_change(**_: object) -> None:
    config_version_bump(PRICES_VERSION_KEY)


def connect_signals() -> None:
    """Connect the receivers (`personas.apps.PersonasConfig.ready`)."""
    post_save.connect(_on_price_change, sender=ModelPrice, dispatch_uid="config_version_price")
    post_delete.connect(
        _on_price_change, sender=ModelPrice, dispatch_uid="config_version_price_del"
    )
    for model in CONFIGURATION_MODELS:
        name = model._meta.model_name
        pre_save.connect(_on_pre_save, sender=model, dispatch_uid=f"config_version_was_{name}")
        post_save.connect(_on_change, sender=model, dispatch_uid=f"config_version_save_{name}")
        post_delete.connect(_on_change, sender=model, dispatch_uid=f"config_version_del_{name}")
