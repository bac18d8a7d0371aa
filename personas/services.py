"""Use cases that change guild configuration.

Two ways in, one set of rules and one write path:

- ``config_import`` takes a whole configuration document (``importconfig``, the dashboard's
  import page);
- the per-row services (``guild_save``, ``persona_save``, ``channel_save``, ``block_save``,
  ``user_privacy_save``) take one row already validated by the same pydantic specs (the
  dashboard's forms), and ``config_row_delete`` deletes one persona, channel, block or user
  row.

Every service writes in one transaction and, when an ``actor`` is given (a `ChangeAuthor`, or
a dashboard account), records in that same transaction who changed what: one row of the
guild's audit trail per row written (`ConfigChange`: the author, how, and every field's before
and after; `audit_record` records a greeting or a channel reset the same way), and Django's
``LogEntry`` for the admin's history when the author has an account. After the commit it tells
running bot workers ``config.changed`` (write, then notify). Nothing is written, recorded or
announced when nothing differs.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from django.conf import settings
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import DatabaseError, connection, models, transaction
from pydantic import BaseModel

from botproject.live_updates import CONTROL_GROUP, ConfigChanged, publish_live_update_on_commit
from personas.audit import ChangeAuthor, author_of, field_changes, row_values
from personas.case_schema import PersonaCaseSpec, case_json
from personas.config_fields import (
    BLOCK_SETTINGS,
    CHANNEL_SETTINGS,
    GUILD_SETTINGS,
    PERSONA_SETTINGS,
    USER_SETTINGS,
    Setting,
    columns_from_spec,
)
from personas.config_schema import (
    DOCUMENT,
    BlockSpec,
    ChannelSpec,
    ConfigDocument,
    ConfigError,
    GuildSpec,
    PersonaSpec,
    PriceSpec,
    UserSpec,
    parse_config_document,
)
from personas.models import (
    Block,
    ChannelConfig,
    ConfigChange,
    GuildConfig,
    ModelPrice,
    Persona,
    PrivacySource,
    UserPrivacy,
)
from personas.models_cases import PersonaTestCase
from personas.selectors import AUDITED_TYPES

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

M = TypeVar("M", bound=models.Model)
Actor: TypeAlias = "ChangeAuthor | AbstractBaseUser | None"
"""Who makes a change: a `ChangeAuthor`, or a dashboard account (a form's change)."""


class _Find:
    """Marker: ``_upsert`` should look the row up by its ``lookup``."""


@dataclass
class ImportReport:
    """What an import did, counted per model: ``{"Persona": {"created": 1, "updated": 0, …}}``.

    ``changes`` lists each row written: (instance, outcome, names of the fields that changed,
    and each field's ``{"field", "before", "after"}``); ``warnings`` are (JSON path, message)
    pairs about what was imported all the same (a price for a model nothing uses, a monthly
    budget that cannot count a model without a price).
    """

    counts: dict[str, Counter] = field(default_factory=dict)
    changes: list[tuple[models.Model, str, list[str], list[dict]]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)

    def record(
        self,
        model: type[models.Model],
        outcome: str,
        instance: models.Model | None = None,
        fields: list[str] | None = None,
        diff: list[dict] | None = None,
    ) -> None:
        self.counts.setdefault(model.__name__, Counter())[outcome] += 1
        if instance is not None and outcome in ("created", "updated", "deleted"):
            self.changes.append((instance, outcome, list(fields or []), list(diff or [])))

    @property
    def changed(self) -> bool:
        return any(c["created"] or c["updated"] or c["deleted"] for c in self.counts.values())

    def summary(self) -> str:
        """The counts of what changed, then one ``warning:`` line per warning."""
        warnings = [f"warning: {path}: {message}" for path, message in self.warnings]
        if not self.changed:
            return "\n".join(["No changes: the database already matches the file.", *warnings])
        lines = []
        for name, counter in sorted(self.counts.items()):
            parts = [f"{counter[k]} {k}" for k in ("created", "updated", "deleted") if counter[k]]
            if parts:
                lines.append(f"{name}: {', '.join(parts)}")
        return "\n".join([*lines, *warnings])


def config_import(*, data: object, prune: bool = False, actor: Actor = None) -> ImportReport:
    """Import a configuration document (format version 1) into the database.

    ``data`` is the decoded JSON. The whole document is validated first (ConfigError lists every
    problem with its JSON path) and then written in one transaction, so a failure leaves the
    database as it was. Rows are matched by natural key (guild id, persona name ignoring case,
    channel id, block persona+user+type, user id) and only saved when a value differs: importing
    the same file twice changes nothing (and notifies nobody); after a change is committed,
    running workers get ``config.changed``. Rows the file does not mention are kept, unless
    ``prune`` is set, which deletes the listed guilds' personas, channels, blocks and user rows
    that are not in the file. With an ``actor``, every written row is logged as that user's
    change.

    The file's ``prices`` (when given) replace the price table's rows of the models it names
    (with ``prune``, the rows of models it does not name go). A price for a model that no
    persona, planner or deployment setting uses, and a monthly budget over a model without a
    price, are warnings (``ImportReport.warnings``), not problems.

    ``data`` may also be a ``ConfigDocument`` already validated by ``parse_config_bytes``. A
    database error while writing (a value the database refuses, the database going away)
    becomes a ConfigError naming the guild being saved. Imports are serialised
    (`_serialise_imports`), so two at once never collide.
    """
    document = data if isinstance(data, ConfigDocument) else parse_config_document(data)
    report = ImportReport()
    with _saving(DOCUMENT), transaction.atomic():
        _serialise_imports()
        if document.prices is not None:
            with _saving("prices"):
                _import_prices(document.prices, report=report, prune=prune)
        for g, guild_spec in enumerate(document.guilds):
            with _saving(f"guilds[{g}]"):
                _import_guild(guild_spec, report=report, prune=prune)
        report.warnings = price_warnings(document=document)
        _finish(report, actor=actor, guild_ids=[spec.id for spec in document.guilds])
    return report


# The key of the PostgreSQL advisory lock every configuration import takes ("cfgi").
CONFIG_IMPORT_LOCK_KEY = 0x63666769


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


# --- One row at a time (the dashboard's forms) ---------------------------------------------------


def guild_save(*, spec: GuildSpec, actor: Actor = None) -> GuildConfig:
    """Create or update one guild's own settings (name, timezone, fetch limit, guild note).

    The spec's personas, channels, blocks and users are ignored: they have their own services.
    """
    report = ImportReport()
    with transaction.atomic():
        guild = _upsert(
            GuildConfig, report, lookup={"guild_id": int(spec.id)}, values=_guild_values(spec)
        )
        _finish(report, actor=actor, guild_ids=[spec.id])
    return guild


def persona_save(
    *,
    guild: GuildConfig,
    spec: PersonaSpec,
    persona: Persona | None = None,
    actor: Actor = None,
) -> Persona:
    """Create a persona (``persona`` is None) or update ``persona``, which may be renamed.

    Raises ConfigError (path ``name``) when another persona of the guild has that name, ignoring
    case. Making a persona main demotes the guild's other main persona first, in the same
    transaction, as ``config_import`` does; making it the DM persona takes that role from any
    other persona of the deployment the same way.
    """
    report = ImportReport()
    with transaction.atomic():
        others = Persona.objects.select_for_update().filter(guild=guild)
        if persona is not None:
            others = others.exclude(pk=persona.pk)
        if any(other.name.casefold() == spec.name.casefold() for other in others):
            raise ConfigError([("name", f"another persona of this guild is named {spec.name!r}")])
        if spec.main:
            for other in others:
                if other.is_main:
                    _write(other, report, {"is_main": False})
        if spec.answers_dms:
            _hand_over_dms(report, keep=persona)
        saved = _upsert(
            Persona,
            report,
            existing=persona,
            lookup={"guild": guild},
            values=_persona_values(spec),
        )
        _finish(report, actor=actor, guild_ids=[str(guild.guild_id)])
    return saved


def persona_draft(*, persona: Persona, spec: PersonaSpec) -> Persona:
    """``spec`` (the persona form's unsaved values, a draft file) as an unsaved persona
    standing in for ``persona``: its id and guild, the spec's every setting. Never saved;
    a persona test runs against it."""
    return Persona(pk=persona.pk, guild=persona.guild, **_persona_values(spec))


def channel_save(*, guild: GuildConfig, spec: ChannelSpec, actor: Actor = None) -> ChannelConfig:
    """Create or update a channel of ``guild`` by its id.

    Raises ConfigError (path ``id``) when that channel belongs to another guild.
    """
    report = ImportReport()
    with transaction.atomic():
        if ChannelConfig.objects.filter(channel_id=int(spec.id)).exclude(guild=guild).exists():
            raise ConfigError([("id", "this channel is configured in another guild")])
        channel = _upsert(
            ChannelConfig,
            report,
            lookup={"channel_id": int(spec.id)},
            values=_channel_values(guild, spec),
        )
        _finish(report, actor=actor, guild_ids=[str(guild.guild_id)])
    return channel


def block_save(
    *,
    guild: GuildConfig,
    spec: BlockSpec,
    block: Block | None = None,
    actor: Actor = None,
) -> Block:
    """Create a block, or update ``block`` (its persona, user and type may change too).

    Raises ConfigError when the spec names no persona of the guild (path ``persona``) or when
    another block has the same persona, user and type (path ``user_id``).
    """
    report = ImportReport()
    with transaction.atomic():
        persona = None
        if spec.persona is not None:
            persona = next(
                (
                    p
                    for p in Persona.objects.filter(guild=guild)
                    if p.name.casefold() == spec.persona.casefold()
                ),
                None,
            )
            if persona is None:
                raise ConfigError(
                    [("persona", f"names no persona of this guild: {spec.persona!r}")]
                )
        key = {"guild": guild, "persona": persona, "user_id": int(spec.user_id), "type": spec.type}
        clash = Block.objects.filter(**key)
        if block is not None:
            clash = clash.exclude(pk=block.pk)
        if clash.exists():
            raise ConfigError([("user_id", "this user already has that block for that persona")])
        values = {"persona": persona, **columns_from_spec(BLOCK_SETTINGS, spec)}
        saved = _upsert(Block, report, existing=block, lookup={"guild": guild}, values=values)
        _finish(report, actor=actor, guild_ids=[str(guild.guild_id)])
    return saved


def user_privacy_save(
    *,
    guild: GuildConfig,
    spec: UserSpec,
    actor: Actor = None,
    set_by: PrivacySource = PrivacySource.ADMIN,
) -> UserPrivacy:
    """Set a user's privacy level and blacklist flag in ``guild`` (one row per guild and user);
    ``set_by`` records who set it (an admin, or the user with ``/privacy``)."""
    report = ImportReport()
    with transaction.atomic():
        row = _upsert(
            UserPrivacy,
            report,
            lookup={"guild": guild, "user_id": int(spec.id)},
            values={**_user_values(spec), "set_by": set_by},
        )
        _finish(report, actor=actor, guild_ids=[str(guild.guild_id)])
    return row


def config_row_delete(
    *, instance: Persona | ChannelConfig | Block | UserPrivacy, actor: Actor
) -> None:
    """Delete one configured row (a persona's blocks go with it), log it and notify workers."""
    guild = instance.guild
    report = ImportReport()
    with transaction.atomic():
        _prune(type(instance).objects.filter(pk=instance.pk), report)
        _finish(report, actor=actor, guild_ids=[str(guild.guild_id)] if guild else [])


# --- Shared steps ---------------------------------------------------------------------------------


def _finish(report: ImportReport, *, actor: Actor, guild_ids: list[str]) -> None:
    """Inside the write's transaction: record the changes in the audit trail (and the admin's
    history), and notify workers after the commit."""
    if not report.changed:
        return
    report_audit(report=report, actor=actor)
    publish_live_update_on_commit(CONTROL_GROUP, ConfigChanged(guild_ids=guild_ids))


def report_audit(*, report: ImportReport, actor: Actor) -> None:
    """Inside the write's transaction: each row of a guild ``report`` wrote, in that guild's
    audit trail (and every row in the admin's history for a dashboard account); nothing when
    nobody is named."""
    author = author_of(actor)
    if author is None:
        return
    for instance, outcome, fields, diff in report.changes:
        if type(instance) in AUDITED_TYPES:  # a guild's rows; the price table is no guild's
            _audit_row(author, instance, outcome, diff)
        if author.user_id is not None:
            _log_change(author.user_id, instance, outcome, fields)


def audit_record(
    *,
    author: ChangeAuthor,
    guild_id: int,
    action: str,
    object_type: str,
    object_label: str,
    object_pk: str = "",
    changes: list[dict] | None = None,
) -> ConfigChange:
    """Record one change that is not a configured row's save in the guild's audit trail: a
    greeting posted, a channel reset (``changes`` as `field_changes` makes them)."""
    return ConfigChange.objects.create(
        guild_id=guild_id,
        kind=author.kind,
        action=action,
        object_type=object_type,
        object_pk=object_pk,
        object_label=object_label[:200],
        changes=changes or [],
        actor_id=author.user_id,
        actor_discord_id=author.discord_id,
        actor_name=author.name[:150],
        actor_key=author.key,
        via=author.via[:200],
    )


def _audit_row(author: ChangeAuthor, instance: models.Model, outcome: str, diff: list[dict]):
    """One audit row for one configured row written."""
    if isinstance(instance, GuildConfig):
        guild_id = instance.guild_id
    elif isinstance(instance, PersonaTestCase):
        guild_id = instance.persona.guild.guild_id
    else:
        guild_id = instance.guild.guild_id
    if isinstance(instance, GuildConfig | Persona):
        label = instance.name
    elif isinstance(instance, PersonaTestCase):
        label = f"{instance.persona.name}: {instance.name}"
    elif isinstance(instance, ChannelConfig):
        label = str(instance.channel_id)
    elif isinstance(instance, UserPrivacy):
        label = str(instance.user_id)
    else:
        label = str(instance)
    audit_record(
        author=author,
        guild_id=guild_id,
        action=outcome,
        object_type=AUDITED_TYPES[type(instance)],
        object_pk=str(instance.pk),
        object_label=label,
        changes=diff,
    )


def _log_change(user_id: int, instance: models.Model, outcome: str, fields: list[str]) -> None:
    """One ``LogEntry`` in the admin's own message format (so the admin's history reads it)."""
    flag, message = {
        "created": (ADDITION, [{"added": {}}]),
        "updated": (CHANGE, [{"changed": {"fields": fields}}]),
        "deleted": (DELETION, [{"deleted": {}}]),
    }[outcome]
    LogEntry.objects.create(
        user_id=user_id,
        content_type=ContentType.objects.get_for_model(type(instance)),
        object_id=str(instance.pk),
        object_repr=str(instance)[:200],
        action_flag=flag,
        change_message=json.dumps(message),
    )


def _columns(settings: tuple[Setting, ...], spec: BaseModel, *, key: str) -> dict:
    """The column values of ``spec`` by the row's declaration, less the ``key`` column the
    caller looks the row up by."""
    values = columns_from_spec(settings, spec)
    del values[key]
    return values


def _guild_values(spec: GuildSpec) -> dict:
    return _columns(GUILD_SETTINGS, spec, key="guild_id")


def _persona_values(spec: PersonaSpec) -> dict:
    return columns_from_spec(PERSONA_SETTINGS, spec)


def _channel_values(guild: GuildConfig, spec: ChannelSpec) -> dict:
    return {"guild": guild, **_columns(CHANNEL_SETTINGS, spec, key="channel_id")}


def _user_values(spec: UserSpec) -> dict:
    """A privacy row's columns, less the (guild, user) it is looked up by."""
    return {
        **_columns(USER_SETTINGS, spec, key="user_id"),
        "set_by": PrivacySource.ADMIN,
    }


def _import_prices(specs: list[PriceSpec], *, report: ImportReport, prune: bool) -> None:
    for spec in specs:
        prices = spec.usd_per_million
        _upsert(
            ModelPrice,
            report,
            lookup={"model": spec.model},
            values={
                "input": prices.input,
                "cached_input": prices.cached_input,
                "output": prices.output,
            },
        )
    if prune:
        _prune(ModelPrice.objects.exclude(model__in=[spec.model for spec in specs]), report)


def price_warnings(*, document: ConfigDocument) -> list[tuple[str, str]]:
    """What an imported document prices oddly (run after its rows are written, so the
    database holds every guild's models): a price for a model that no persona (its model or a
    fallback), planner or deployment setting (``LLM_MODEL``, ``LLM_PLANNER_MODEL``,
    ``LLM_VISION_MODEL``, ``LLM_EMBEDDING_MODEL``) uses; and a guild's ``usd_per_month`` over a
    model with no price (its calls cost what the provider reports, else an unknown amount,
    which the monthly budget cannot count)."""
    priced = set(ModelPrice.objects.values_list("model", flat=True))
    deployment = {
        settings.LLM_MODEL,
        settings.LLM_PLANNER_MODEL,
        settings.LLM_VISION_MODEL,
        settings.LLM_EMBEDDING_MODEL,
    }
    used_by: dict[int, set[str]] = {}
    for persona in Persona.objects.select_related("guild"):
        models_of = used_by.setdefault(persona.guild.guild_id, set())
        models_of.add(persona.llm_model or settings.LLM_MODEL)
        models_of.update(f if isinstance(f, str) else f["model"] for f in persona.fallback_models)
        if persona.guild.planner_model:
            models_of.add(persona.guild.planner_model)
    known = {name for names in used_by.values() for name in names} | deployment
    warnings = [
        (
            f"prices[{p}].model",
            f"no persona, planner or deployment setting uses {price.model!r} (a typo?); "
            "its price is kept",
        )
        for p, price in enumerate(document.prices or [])
        if price.model not in known
    ]
    for g, guild in enumerate(document.guilds):
        if guild.limits is None or guild.limits.usd_per_month is None:
            continue
        unpriced = sorted(m for m in used_by.get(int(guild.id), set()) if m and m not in priced)
        if unpriced:
            names = ", ".join(repr(m) for m in unpriced)
            warnings.append(
                (
                    f"guilds[{g}].limits.usd_per_month",
                    f"{names} {'has' if len(unpriced) == 1 else 'have'} no price: their calls "
                    "count against it only when the provider reports their cost",
                )
            )
    return warnings


def _import_guild(spec: GuildSpec, *, report: ImportReport, prune: bool) -> None:
    guild = _upsert(
        GuildConfig, report, lookup={"guild_id": int(spec.id)}, values=_guild_values(spec)
    )
    personas = _import_personas(guild, spec.personas, report=report, prune=prune)

    kept_channels = [
        _upsert(
            ChannelConfig,
            report,
            lookup={"channel_id": int(channel.id)},
            values=_channel_values(guild, channel),
        ).pk
        for channel in spec.channels
    ]
    kept_blocks = [_import_block(guild, personas, block, report=report).pk for block in spec.blocks]
    kept_users = [
        _upsert(
            UserPrivacy,
            report,
            lookup={"guild": guild, "user_id": int(user.id)},
            values=_user_values(user),
        ).pk
        for user in spec.users
    ]

    if prune:
        _prune(ChannelConfig.objects.filter(guild=guild).exclude(pk__in=kept_channels), report)
        _prune(Block.objects.filter(guild=guild).exclude(pk__in=kept_blocks), report)
        _prune(UserPrivacy.objects.filter(guild=guild).exclude(pk__in=kept_users), report)


def _import_personas(
    guild: GuildConfig, specs: list[PersonaSpec], *, report: ImportReport, prune: bool
) -> dict[str, Persona]:
    """Upsert the guild's personas; returns them by case-folded name.

    The main flag moves safely: when the file names a main persona, every other persona of the
    guild is demoted before any persona is promoted, so the one-main constraint holds at every
    statement.
    """
    existing = {p.name.casefold(): p for p in Persona.objects.filter(guild=guild)}
    dm_persona = next((spec.name.casefold() for spec in specs if spec.answers_dms), None)
    if dm_persona is not None:
        _hand_over_dms(report, keep=existing.get(dm_persona))
    if any(spec.main for spec in specs):
        file_main = next(spec.name.casefold() for spec in specs if spec.main)
        for key, persona in existing.items():
            if persona.is_main and key != file_main:
                _write(persona, report, {"is_main": False})

    by_name: dict[str, Persona] = {}
    for spec in sorted(specs, key=lambda s: s.main):  # non-main first, then the main one
        by_name[spec.name.casefold()] = _upsert(
            Persona,
            report,
            existing=existing.get(spec.name.casefold()),
            lookup={"guild": guild},
            values=_persona_values(spec),
        )
    if prune:
        stale = [p.pk for key, p in existing.items() if key not in by_name]
        _prune(Persona.objects.filter(pk__in=stale), report)
    for spec in specs:
        persona_cases_sync(
            persona=by_name[spec.name.casefold()], cases=spec.tests, report=report, prune=prune
        )
    return by_name


def case_upsert(
    *, persona: Persona, case: PersonaCaseSpec, report: ImportReport
) -> PersonaTestCase:
    """Create or update the persona's case of that name (ignoring case) from ``case``; records
    the outcome in ``report``. Call it in the caller's transaction."""
    spec = PersonaCaseSpec.model_validate(case_json(case))  # a file case less guild and persona
    existing = next(
        (c for c in persona.test_cases.all() if c.name.casefold() == spec.name.casefold()), None
    )
    values = {"name": spec.name, "spec": case_json(spec)}
    return _upsert(
        PersonaTestCase, report, existing=existing, lookup={"persona": persona}, values=values
    )


def persona_cases_sync(
    *,
    persona: Persona,
    cases: list[PersonaCaseSpec] | None,
    report: ImportReport,
    prune: bool,
) -> None:
    """The configuration file's ``tests`` of ``persona``: each case upserted; with ``prune``,
    the persona's cases the list does not name deleted (all of them when it has no list)."""
    kept = [case_upsert(persona=persona, case=case, report=report).pk for case in cases or []]
    if prune:
        _prune(PersonaTestCase.objects.filter(persona=persona).exclude(pk__in=kept), report)


def _hand_over_dms(report: ImportReport, *, keep: Persona | None) -> None:
    """Clear the DM role on every persona but ``keep`` (any guild), before a persona takes it,
    so the one-DM-persona constraint holds at every statement."""
    for other in Persona.objects.select_for_update().filter(answers_dms=True):
        if keep is None or other.pk != keep.pk:
            _write(other, report, {"answers_dms": False})


def _import_block(
    guild: GuildConfig, personas: dict[str, Persona], spec: BlockSpec, *, report: ImportReport
) -> Block:
    persona = personas[spec.persona.casefold()] if spec.persona is not None else None
    lookup = {"guild": guild, "persona": persona, "user_id": int(spec.user_id), "type": spec.type}
    values = columns_from_spec(BLOCK_SETTINGS, spec)
    for column in lookup:
        values.pop(column, None)
    return _upsert(Block, report, lookup=lookup, values=values)


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
        after = _recorded(instance)
        report.record(model, "created", instance, diff=field_changes(after, {}, after))
        return instance
    _write(instance, report, values)
    return instance


def _write(instance: M, report: ImportReport, values: dict) -> None:
    """Set ``values`` on ``instance`` and save it when any differs; records the outcome."""
    changed = [name for name, value in values.items() if getattr(instance, name) != value]
    if changed:
        before = {name: getattr(instance, name) for name in changed}
        for name in changed:
            setattr(instance, name, values[name])
        instance.save()
        diff = field_changes(changed, before, values)
        report.record(type(instance), "updated", instance, changed, diff)
    else:
        report.record(type(instance), "unchanged")


def _prune(queryset: models.QuerySet, report: ImportReport) -> None:
    for instance in queryset:
        pk = instance.pk
        before = _recorded(instance)
        instance.delete()
        instance.pk = pk  # kept for the change log
        report.record(type(instance), "deleted", instance, diff=field_changes(before, before, {}))


def _recorded(instance: models.Model) -> dict:
    """The row's fields that hold a value, as a creation or a deletion records them."""
    return {k: v for k, v in row_values(instance).items() if v not in (None, "", [], {})}


__all__ = [
    "ChangeAuthor",
    "ConfigDocument",
    "ImportReport",
    "audit_record",
    "block_save",
    "channel_save",
    "config_import",
    "config_row_delete",
    "guild_save",
    "persona_draft",
    "persona_save",
    "user_privacy_save",
]
