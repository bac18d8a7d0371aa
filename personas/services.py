"""Use cases that change guild configuration."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from asgiref.sync import async_to_sync
from django.db import DatabaseError, connection, models, transaction

from chat.events import CONTROL_GROUP, publish
from personas.config_schema import (
    DOCUMENT,
    BlockSpec,
    ConfigDocument,
    ConfigError,
    ContextNoteSpec,
    GuildSpec,
    PersonaSpec,
    parse_config_document,
)
from personas.models import Block, ChannelConfig, GuildConfig, Persona, UserPrivacy

_DEFAULT_NOTE = ContextNoteSpec()
M = TypeVar("M", bound=models.Model)
# The key of the PostgreSQL advisory lock every configuration import takes ("cfgi").
CONFIG_IMPORT_LOCK_KEY = 0x63666769


class _Find:
    """Marker: ``_upsert`` should look the row up by its ``lookup``."""


@dataclass
class ImportReport:
    """What an import did, counted per model: ``{"Persona": {"created": 1, "updated": 0, …}}``."""

    counts: dict[str, Counter] = field(default_factory=dict)

    def record(self, model: type[models.Model], outcome: str) -> None:
        self.counts.setdefault(model.__name__, Counter())[outcome] += 1

    @property
    def changed(self) -> bool:
        return any(c["created"] or c["updated"] or c["deleted"] for c in self.counts.values())

    def summary(self) -> str:
        if not self.changed:
            return "No changes: the database already matches the file."
        lines = []
        for name, counter in sorted(self.counts.items()):
            parts = [f"{counter[k]} {k}" for k in ("created", "updated", "deleted") if counter[k]]
            if parts:
                lines.append(f"{name}: {', '.join(parts)}")
        return "\n".join(lines)


def config_import(*, data: object, prune: bool = False) -> ImportReport:
    """Import a configuration document (format version 1) into the database.

    ``data`` is the decoded JSON, or a ``ConfigDocument`` already validated by
    ``parse_config_bytes``. The whole document is validated first (ConfigError lists every
    problem with its JSON path) and then written in one transaction, so a failure leaves the
    database as it was; a database error while writing (a value the database refuses, the
    database going away) also becomes a ConfigError naming the JSON path being saved. Imports
    are serialised (``_serialise_imports``), so two at once never collide. Rows are matched by
    natural key (guild id, persona name ignoring case, channel id, block persona+user+type, user
    id) and only saved when a value differs: importing the same file twice changes nothing (and
    notifies nobody); after a change is committed, running workers get ``config.changed``. Rows
    the file does not mention are kept, unless ``prune`` is set, which deletes the listed
    guilds' personas, channels, blocks and user rows that are not in the file.
    """
    document = data if isinstance(data, ConfigDocument) else parse_config_document(data)
    report = ImportReport()
    with _saving(DOCUMENT), transaction.atomic():
        _serialise_imports()
        for g, guild_spec in enumerate(document.guilds):
            _import_guild(guild_spec, where=f"guilds[{g}]", report=report, prune=prune)
        if report.changed:
            guild_ids = [spec.id for spec in document.guilds]
            transaction.on_commit(lambda: _notify_config_changed(guild_ids))
    return report


def _serialise_imports() -> None:
    """Make concurrent imports run one after the other; call it first in the import's
    transaction.

    PostgreSQL: a transaction-level advisory lock (released at commit or rollback), so a second
    import waits and then reads what the first wrote, instead of inserting the same guild again
    and failing with IntegrityError. SQLite allows one writer at a time anyway; a no-op UPDATE
    takes its write lock now rather than at the first write, so a second import waits for it
    (the busy timeout) instead of failing when its read lock cannot be upgraded.
    """
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CONFIG_IMPORT_LOCK_KEY])
        elif connection.vendor == "sqlite":
            cursor.execute(f"UPDATE {GuildConfig._meta.db_table} SET id = id WHERE 0 = 1")


@contextlib.contextmanager
def _saving(path: str) -> Iterator[None]:
    """Turn a database error raised while saving the rows of ``path`` into a ConfigError."""
    try:
        yield
    except DatabaseError as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ConfigError([(path, f"could not be saved: {reason}")]) from None


def _notify_config_changed(guild_ids: list[str]) -> None:
    """Tell running bot workers to reload what they cache (write, then notify)."""
    async_to_sync(publish)(CONTROL_GROUP, "config.changed", guild_ids=guild_ids)


def _import_guild(spec: GuildSpec, *, where: str, report: ImportReport, prune: bool) -> None:
    note = spec.context_note or _DEFAULT_NOTE
    with _saving(where):
        guild = _upsert(
            GuildConfig,
            report,
            lookup={"guild_id": int(spec.id)},
            values={
                "name": spec.name,
                "timezone": spec.timezone,
                "message_fetch_limit": spec.message_fetch_limit,
                "context_note": note.text,
                "context_note_depth": note.depth,
            },
        )
    personas = _import_personas(guild, spec.personas, where=where, report=report, prune=prune)

    kept_channels = []
    for c, channel in enumerate(spec.channels):
        channel_note = channel.context_note or _DEFAULT_NOTE
        with _saving(f"{where}.channels[{c}]"):
            kept_channels.append(
                _upsert(
                    ChannelConfig,
                    report,
                    lookup={"channel_id": int(channel.id)},
                    values={
                        "guild": guild,
                        "mode": channel.mode,
                        "enabled": channel.enabled,
                        "message_fetch_limit": channel.message_fetch_limit,
                        "context_note": channel_note.text,
                        "context_note_depth": channel_note.depth,
                    },
                ).pk
            )

    kept_blocks = []
    for b, block in enumerate(spec.blocks):
        with _saving(f"{where}.blocks[{b}]"):
            kept_blocks.append(_import_block(guild, personas, block, report=report).pk)

    kept_users = []
    for u, user in enumerate(spec.users):
        with _saving(f"{where}.users[{u}]"):
            kept_users.append(
                _upsert(
                    UserPrivacy,
                    report,
                    lookup={"user_id": int(user.id)},
                    values={
                        "level": user.privacy,
                        "blacklisted": user.blacklisted,
                        "guild": guild,
                    },
                ).pk
            )

    if prune:
        with _saving(where):
            _prune(ChannelConfig.objects.filter(guild=guild).exclude(pk__in=kept_channels), report)
            _prune(Block.objects.filter(guild=guild).exclude(pk__in=kept_blocks), report)
            _prune(UserPrivacy.objects.filter(guild=guild).exclude(pk__in=kept_users), report)


def _import_personas(
    guild: GuildConfig,
    specs: list[PersonaSpec],
    *,
    where: str,
    report: ImportReport,
    prune: bool,
) -> dict[str, Persona]:
    """Upsert the guild's personas; returns them by case-folded name.

    The main flag moves safely: when the file names a main persona, every other persona of the
    guild is demoted before any persona is promoted, so the one-main constraint holds at every
    statement.
    """
    existing = {p.name.casefold(): p for p in Persona.objects.filter(guild=guild)}
    if any(spec.main for spec in specs):
        file_main = next(spec.name.casefold() for spec in specs if spec.main)
        for key, persona in existing.items():
            if persona.is_main and key != file_main:
                persona.is_main = False
                with _saving(f"{where}.personas"):
                    persona.save(update_fields=["is_main", "updated_at"])
                report.record(Persona, "updated")

    by_name: dict[str, Persona] = {}
    # Non-main personas first, then the main one; each keeps its index for error paths.
    for p, spec in sorted(enumerate(specs), key=lambda item: item[1].main):
        note = spec.context_note or _DEFAULT_NOTE
        with _saving(f"{where}.personas[{p}]"):
            by_name[spec.name.casefold()] = _upsert(
                Persona,
                report,
                existing=existing.get(spec.name.casefold()),
                lookup={"guild": guild},
                values={
                    "name": spec.name,
                    "is_main": spec.main,
                    "enabled": spec.enabled,
                    "avatar_url": spec.avatar_url or "",
                    "system_prompt": spec.system_prompt,
                    "triggers": list(spec.triggers),
                    "sample_dialogue": [s.model_dump() for s in spec.sample_dialogue],
                    "prefill": spec.prefill,
                    "context_note": note.text,
                    "context_note_depth": note.depth,
                    "deliberate_tool_mode": spec.deliberate_tool_mode,
                    "force_lowercase": spec.force_lowercase,
                    "punctuation_splits": spec.punctuation_splits,
                    "llm_model": spec.llm.model or "",
                    "fallback_models": list(spec.llm.fallback_models),
                    "temperature": spec.llm.temperature,
                    "max_output_tokens": spec.llm.max_output_tokens,
                    "context_window": spec.llm.context_window,
                },
            )
    if prune:
        stale = [persona.pk for key, persona in existing.items() if key not in by_name]
        with _saving(f"{where}.personas"):
            _prune(Persona.objects.filter(pk__in=stale), report)
    return by_name


def _import_block(
    guild: GuildConfig, personas: dict[str, Persona], spec: BlockSpec, *, report: ImportReport
) -> Block:
    persona = personas[spec.persona.casefold()] if spec.persona is not None else None
    lookup = {"guild": guild, "persona": persona, "user_id": int(spec.user_id), "type": spec.type}
    return _upsert(
        Block, report, lookup=lookup, values={"reason": spec.reason, "expires_at": spec.expires_at}
    )


def _upsert(
    model: type[M],
    report: ImportReport,
    *,
    lookup: dict,
    values: dict,
    existing: M | type[_Find] | None = _Find,
) -> M:
    """Create or update one row, saving only when a value differs; records the outcome.

    The row is ``existing`` when the caller already looked it up (``None``: there is none),
    otherwise the one matching ``lookup``. A new row is created from ``lookup`` and ``values``.
    """
    instance = model.objects.filter(**lookup).first() if existing is _Find else existing
    if instance is None:
        instance = model.objects.create(**lookup, **values)
        report.record(model, "created")
        return instance
    changed = [name for name, value in values.items() if getattr(instance, name) != value]
    if changed:
        for name in changed:
            setattr(instance, name, values[name])
        instance.save()
        report.record(model, "updated")
    else:
        report.record(model, "unchanged")
    return instance


def _prune(queryset: models.QuerySet, report: ImportReport) -> None:
    for instance in queryset:
        instance.delete()
        report.record(type(instance), "deleted")


__all__ = ["ConfigDocument", "ImportReport", "config_import"]
