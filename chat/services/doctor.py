"""The deployment check behind ``manage.py doctor``, Celery's periodic run and the dashboard's
"Check now" (DESIGN §3b, "Going live").

`deployment_examine` reads what the configuration asks for, what Discord says of the bot, what
the model endpoints list and whether the database and Redis answer, and has
`chat.pipeline.going_live` judge each part: one `Check` per line, ``ok`` or ``FAIL`` with the
fix. `doctor_run` examines and saves the report (`DoctorReport`), which the dashboard shows.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field

import httpx
import redis.asyncio as redis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor

from chat.llm.base import LLMError
from chat.llm.openai_compat import OpenAICompatibleClient, Timeouts
from chat.llm.tls import tls_context
from chat.models import DoctorReport
from chat.pipeline.going_live import (
    BotStanding,
    ChannelAccess,
    Check,
    ModelEndpoint,
    ModelUse,
    RefusalSeen,
    channel_check,
    channel_lacks,
    commands_check,
    guild_checks,
    intent_checks,
    invite_permissions,
    invite_url,
    model_checks,
    refusals_check,
    token_check,
    webhook_check,
)
from chat.pipeline.permissions import Member, Permission
from chat.ports import (
    BotApplication,
    DiscordDeployment,
    DiscordReadRefused,
    DiscordUnavailable,
    TokenRefused,
)
from chat.selectors.going_live import GuildPlan, guild_plans, models_in_use, turn_refusals

logger = logging.getLogger(__name__)

DeploymentOpener = Callable[[], AbstractAsyncContextManager[DiscordDeployment]]
"""Opens a logged-in `DiscordDeployment` (raises `TokenRefused` or `DiscordUnavailable`)."""

REFUSAL_WINDOW = dt.timedelta(hours=24)
"""How far back refused turns are counted."""
DISCORD_SECONDS = 60.0
"""The longest the Discord reads of one check may take, together."""
ENDPOINT_SECONDS = 10.0
"""The longest one model endpoint, or Redis, may take to answer."""
REPORTS_KEPT = dt.timedelta(days=7)


@dataclass(frozen=True)
class Examination:
    """One check of the deployment: its lines in report order, and what Discord said of the
    application (``application_id`` None when it could not be read)."""

    checks: tuple[Check, ...]
    application_id: int | None = None
    invite_url: str | None = None
    bot_guilds: dict[int, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)


@dataclass
class _DiscordFindings:
    checks: list[Check] = field(default_factory=list)
    application: BotApplication | None = None
    invite_url: str | None = None
    bot_guilds: dict[int, str] = field(default_factory=dict)
    lacking: dict[int, set[str]] = field(default_factory=dict)
    """Per checked channel, the names of the permissions the bot lacks there."""


async def deployment_examine(*, discord: DeploymentOpener, now: dt.datetime) -> Examination:
    """Check the deployment and return the lines, in this order:

    1. Discord (`_discord_checks`): the token; the privileged intents; every configured guild
       joined and every joined guild configured; the slash commands registered; each
       configured channel's permissions against what its personas do there, and its webhooks
       where other personas speak;
    2. the model endpoints (``GET /models``) and each model the configuration uses; the
       moderation endpoint (``POST /moderations``) when one is set;
    3. the database (reachable, every migration applied) and Redis (``PING``);
    4. the turns Discord refused for want of a permission in the last day.

    Without a working database the configuration cannot be read: only the database, Redis and
    the token are judged then."""
    database = await sync_to_async(_database_check)()
    plans = await sync_to_async(guild_plans)() if database.ok else None
    found = await _discord_checks(discord, plans or [], now=now, configured=plans is not None)
    checks = list(found.checks)
    if plans is not None:
        checks += await _model_checks()
    checks += await _moderation_checks()
    checks += [database, await _redis_check()]
    if plans is not None:
        refusals = await sync_to_async(turn_refusals)(since=now - REFUSAL_WINDOW)
        seen = [
            RefusalSeen(
                channel_id=r.channel_id,
                channel_name=r.channel_name,
                permission=r.permission,
                turns=r.turns,
                still_missing=r.permission in found.lacking.get(r.channel_id, {r.permission}),
            )
            for r in refusals
        ]
        checks.append(refusals_check(refusals=seen, window="last 24 hours"))
    return Examination(
        checks=tuple(checks),
        application_id=found.application.id if found.application else None,
        invite_url=found.invite_url,
        bot_guilds=found.bot_guilds,
    )


async def _discord_checks(
    discord: DeploymentOpener, plans: Sequence[GuildPlan], *, now: dt.datetime, configured: bool
) -> _DiscordFindings:
    found = _DiscordFindings()
    async with contextlib.AsyncExitStack() as stack:
        try:
            async with asyncio.timeout(DISCORD_SECONDS):
                reader = await stack.enter_async_context(discord())
                application = await reader.application()
        except TokenRefused as error:
            found.checks.append(token_check(bot_name=None, refused=str(error)))
            return found
        except (DiscordUnavailable, DiscordReadRefused, TimeoutError) as error:
            detail = str(error) or "no answer in time"
            found.checks.append(
                Check(
                    "token",
                    False,
                    f"Discord could not be asked ({detail}): set DISCORD_TOKEN, and "
                    "DISCORD_API_BASE if the bot talks to a proxy or the sandbox",
                )
            )
            return found
        found.application = application
        found.checks.append(token_check(bot_name=application.bot_name, refused=None))
        found.checks += intent_checks(application_flags=application.flags, intents=reader.intents)
        if not configured:
            return found
        try:
            async with asyncio.timeout(DISCORD_SECONDS):
                await _guild_checks(reader, application, plans, found, now=now)
        except (DiscordReadRefused, TimeoutError) as error:
            found.checks.append(
                Check("discord", False, f"Discord stopped answering ({error or 'timeout'})")
            )
    return found


async def _guild_checks(
    reader: DiscordDeployment,
    application: BotApplication,
    plans: Sequence[GuildPlan],
    found: _DiscordFindings,
    *,
    now: dt.datetime,
) -> None:
    found.bot_guilds = joined = await reader.bot_guilds()
    found.invite_url = invite_url(
        application_id=application.id,
        permissions=invite_permissions([plan.duties for plan in plans]),
    )
    app_id = application.id
    invites = {
        plan.guild_id: invite_url(application_id=app_id, permissions=plan.invite_permissions)
        for plan in plans
    }
    found.checks += guild_checks(
        configured={plan.guild_id: plan.name for plan in plans}, joined=joined, invites=invites
    )
    served = [plan for plan in plans if plan.guild_id in joined]
    found.checks += await _command_checks(reader, served)
    for plan in served:
        found.checks += await _channel_checks(reader, plan, found, now=now)


async def _command_checks(reader: DiscordDeployment, served: Sequence[GuildPlan]) -> list[Check]:
    scopes: list[tuple[str, int | None]]
    if settings.DISCORD_GLOBAL_COMMANDS:
        scopes = [("global", None)]
    else:
        scopes = [(plan.name, plan.guild_id) for plan in served]
    checks = []
    for scope, guild_id in scopes:
        try:
            registered: frozenset[str] | None = await reader.registered_commands(guild_id)
        except DiscordReadRefused:
            registered = None
        checks.append(
            commands_check(
                scope=scope,
                registered=registered,
                expected=reader.command_names,
                global_scope=settings.DISCORD_GLOBAL_COMMANDS,
                guild_id=guild_id,
            )
        )
    return checks


async def _channel_checks(
    reader: DiscordDeployment, plan: GuildPlan, found: _DiscordFindings, *, now: dt.datetime
) -> list[Check]:
    try:
        layout = await reader.guild_layout(plan.guild_id)
    except DiscordReadRefused as error:
        return [
            Check(
                f"guild {plan.name}",
                False,
                f"Discord would not describe its roles and channels ({error}): invite the bot "
                "again with the invite link",
                guild_id=plan.guild_id,
            )
        ]
    until = layout.bot_timed_out_until
    bot = BotStanding(
        guild=layout.roles,
        member=Member(
            reader.bot_user_id, layout.bot_role_ids, timed_out=until is not None and until > now
        ),
        role_name=layout.bot_role_name,
        guild_name=layout.name,
    )
    by_id = {channel.id: channel for channel in layout.channels}
    checks = []
    for channel_id in plan.channel_ids:
        channel = by_id.get(channel_id)
        if channel is None:
            checks.append(
                Check(
                    f"channel {channel_id} ({layout.name})",
                    False,
                    f"configured, but {layout.name} has no such channel: remove it on the "
                    "dashboard (Channels), or correct its id",
                    guild_id=plan.guild_id,
                    channel_id=channel_id,
                )
            )
            continue
        category = by_id.get(channel.parent_id) if channel.parent_id else None
        access = ChannelAccess(
            channel_id=channel.id,
            name=channel.name,
            overwrites=channel.overwrites,
            synced_category=category.name if channel.synced and category else None,
        )
        lacks = channel_lacks(channel=access, bot=bot, duties=plan.duties)
        found.lacking[channel.id] = {lack.name for lack in lacks}
        checks.append(
            channel_check(
                channel=access, bot=bot, duties=plan.duties, lacks=lacks, guild_id=plan.guild_id
            )
        )
        hooks_readable = not {Permission.VIEW_CHANNEL, Permission.MANAGE_WEBHOOKS} & {
            lack.permission for lack in lacks
        }
        if plan.alter_personas and hooks_readable:
            try:
                count = await reader.webhook_count(channel.id)
            except DiscordReadRefused:
                continue
            checks.append(
                webhook_check(
                    channel=access,
                    guild_name=layout.name,
                    count=count.total,
                    own=count.own,
                    guild_id=plan.guild_id,
                )
            )
    return checks


async def _model_checks() -> list[Check]:
    """``LLM_BASE_URL`` (and the vision and embedding endpoints when set apart) answer
    ``GET /models`` and list the models the configuration and the settings name."""
    if not settings.LLM_BASE_URL:
        return [
            Check(
                "model endpoint",
                False,
                "LLM_BASE_URL is not set: set it to an OpenAI-compatible endpoint, e.g. "
                "http://127.0.0.1:11434/v1 (Ollama) or https://api.openai.com/v1",
            )
        ]
    endpoints = {settings.LLM_BASE_URL: "LLM_BASE_URL"}
    uses = [
        ModelUse(name, settings.LLM_BASE_URL, tuple(users))
        for name, users in (await sync_to_async(models_in_use)()).items()
    ]
    for model, base_url, setting in (
        (settings.LLM_VISION_MODEL, settings.LLM_VISION_BASE_URL, "LLM_VISION_BASE_URL"),
        (settings.LLM_EMBEDDING_MODEL, settings.LLM_EMBEDDING_BASE_URL, "LLM_EMBEDDING_BASE_URL"),
    ):
        if not model:
            continue
        endpoint = base_url or settings.LLM_BASE_URL
        endpoints.setdefault(endpoint, setting)
        variable = setting.replace("_BASE_URL", "_MODEL")
        uses.append(ModelUse(model, endpoint, (variable,)))
    answers = await asyncio.gather(*(_list_models(url, name) for url, name in endpoints.items()))
    return model_checks(endpoints=answers, uses=uses)


async def _list_models(base_url: str, setting: str) -> ModelEndpoint:
    timeouts = Timeouts(connect=ENDPOINT_SECONDS, read=ENDPOINT_SECONDS, total=ENDPOINT_SECONDS)
    async with OpenAICompatibleClient(
        base_url=base_url, api_key=settings.LLM_API_KEY, timeouts=timeouts
    ) as client:
        try:
            listed = await client.list_models()
        except LLMError as error:
            return ModelEndpoint(base_url, setting, error=str(error))
    return ModelEndpoint(base_url, setting, listed=listed)


async def _moderation_checks() -> list[Check]:
    """When ``MODERATION_BASE_URL`` is set: one ``POST {base}/moderations`` of a harmless word
    with ``MODERATION_MODEL`` (default ``omni-moderation-latest``) answers OpenAI's shape."""
    base_url = getattr(settings, "MODERATION_BASE_URL", "")
    if not base_url:
        return []
    key = getattr(settings, "MODERATION_API_KEY", "")
    model = getattr(settings, "MODERATION_MODEL", "") or "omni-moderation-latest"
    name = f"moderation endpoint {base_url}"
    fix = "check MODERATION_BASE_URL, MODERATION_API_KEY and MODERATION_MODEL"
    try:
        async with httpx.AsyncClient(timeout=ENDPOINT_SECONDS, verify=tls_context()) as http:
            answer = await http.post(
                base_url.rstrip("/") + "/moderations",
                json={"model": model, "input": "hello"},
                headers={"Authorization": f"Bearer {key}"} if key else {},
            )
        results = answer.json().get("results") if answer.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError) as error:
        return [Check(name, False, f"POST /moderations failed ({type(error).__name__}): {fix}")]
    if answer.status_code != 200:
        return [Check(name, False, f"POST /moderations answered {answer.status_code}: {fix}")]
    if not isinstance(results, list) or not results:
        return [Check(name, False, f"POST /moderations answered no results: {fix}")]
    return [Check(name, True, f"answers with {model}")]


def _database_check() -> Check:
    """The database answers and every migration is applied."""
    try:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as error:
        return Check(
            "database",
            False,
            f"could not be reached ({error}): check DATABASE_URL and that the server is up",
        )
    if pending:
        first = pending[0][0]
        return Check(
            "database",
            False,
            f"{len(pending)} migration{'s' * (len(pending) != 1)} not applied (the first: "
            f"{first.app_label}.{first.name}): run python manage.py migrate",
        )
    return Check("database", True, f"{connection.vendor}, every migration applied")


async def _redis_check() -> Check:
    client = redis.Redis.from_url(
        settings.REDIS_URL,
        socket_connect_timeout=ENDPOINT_SECONDS,
        socket_timeout=ENDPOINT_SECONDS,
    )
    try:
        await client.ping()
    except (redis.RedisError, OSError) as error:
        return Check(
            "redis",
            False,
            f"no answer to PING ({error}): check REDIS_URL and that Redis is running",
        )
    finally:
        await client.aclose()
    return Check("redis", True, "answers PING")


# --- reports ---------------------------------------------------------------------------------


def doctor_report_begin(*, origin: DoctorReport.Origin, requested_by: str = "") -> DoctorReport:
    """A report row for a check about to run (``ok`` None until `doctor_report_finish`)."""
    return DoctorReport.objects.create(origin=origin, requested_by=requested_by)


def doctor_report_finish(
    *, report: DoctorReport, examination: Examination, now: dt.datetime
) -> DoctorReport:
    """Save ``examination`` on ``report``, and delete reports older than a week."""
    report.ok = examination.ok
    report.checks = [check.as_json() for check in examination.checks]
    report.application_id = examination.application_id
    report.invite_url = examination.invite_url or ""
    report.bot_guilds = {str(k): v for k, v in examination.bot_guilds.items()}
    report.finished_at = now
    report.save()
    DoctorReport.objects.filter(created_at__lt=now - REPORTS_KEPT).delete()
    return report


async def doctor_run(
    *,
    discord: DeploymentOpener,
    origin: DoctorReport.Origin,
    now: Callable[[], dt.datetime],
    report_id: int | None = None,
    requested_by: str = "",
) -> tuple[DoctorReport | None, Examination]:
    """Examine the deployment and save the report: on the row ``report_id`` (one a person asked
    for; a new row when None or gone). Returns the saved report (None when the database could
    not take it: the examination says why) and the examination."""
    examination = await deployment_examine(discord=discord, now=now())
    try:
        saved = await sync_to_async(_report_save)(
            report_id=report_id,
            origin=origin,
            requested_by=requested_by,
            examination=examination,
            now=now(),
        )
    except DatabaseError:
        logger.warning("could not save the deployment check's report", exc_info=True)
        saved = None
    logger.info("deployment check: %s", "ok" if examination.ok else "FAIL")
    return saved, examination


def _report_save(
    *,
    report_id: int | None,
    origin: DoctorReport.Origin,
    requested_by: str,
    examination: Examination,
    now: dt.datetime,
) -> DoctorReport:
    report = DoctorReport.objects.filter(pk=report_id).first() if report_id else None
    if report is None:
        report = doctor_report_begin(origin=origin, requested_by=requested_by)
    return doctor_report_finish(report=report, examination=examination, now=now)
