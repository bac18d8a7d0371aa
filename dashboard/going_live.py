"""What the dashboard shows of going live: the latest deployment check (`chat.services.doctor`)
with its failing lines, the turns Discord refused, whether the bot is in a guild (with the
invite link when it is not) and the guilds it is in that are not configured yet."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from accounts.selectors import GuildRights
from chat.models import DoctorReport
from chat.pipeline.going_live import Check, invite_url
from chat.selectors.going_live import (
    RefusalTally,
    doctor_run_pending,
    guild_plans,
    guilds_the_bot_is_in,
    latest_doctor_report,
    turn_refusals,
)
from dashboard.selectors import visible_turns
from personas.models import GuildConfig

PENDING_FOR = dt.timedelta(minutes=5)
"""How long a check asked for on the dashboard counts as running (after that, Celery is
probably not running: the card says so)."""
REFUSALS_FOR = dt.timedelta(hours=24)


@dataclass(frozen=True)
class DeploymentStatus:
    """The overview's going-live card."""

    report: DoctorReport | None
    failing: list[Check]
    passing: list[Check]
    pending: DoctorReport | None
    stalled: DoctorReport | None
    """A check asked for more than `PENDING_FOR` ago that never finished."""
    refusals: list[RefusalTally]


def deployment_status(*, now: dt.datetime, rights: GuildRights) -> DeploymentStatus:
    """The card as ``rights`` may see it: an operator every line; anyone else only the lines
    and refused turns of the guilds they have a right in (the deployment's own lines, the
    token and the intents, the model, the database, are the operator's)."""
    report = latest_doctor_report()
    checks = [Check.from_json(c) for c in report.checks] if report else []
    if not rights.unrestricted:
        checks = [c for c in checks if c.guild_id is not None and rights.may_view(c.guild_id)]
    pending = doctor_run_pending(since=now - PENDING_FOR)
    waiting = DoctorReport.objects.filter(ok=None, created_at__lt=now - PENDING_FOR)
    if report is not None:
        waiting = waiting.filter(created_at__gt=report.created_at)
    return DeploymentStatus(
        report=report,
        failing=[c for c in checks if not c.ok],
        passing=[c for c in checks if c.ok],
        pending=pending,
        stalled=None if pending else waiting.order_by("-created_at").first(),
        refusals=turn_refusals(since=now - REFUSALS_FOR, turns=visible_turns(rights=rights)),
    )


@dataclass(frozen=True)
class GuildPresence:
    """Whether the bot is in a configured guild: ``joined`` None when nothing tells (no
    worker running, no check yet); the invite link when it is not (empty when the application
    id is not known yet: no check has run)."""

    joined: bool | None
    invite_url: str


def guild_presence(*, guild: GuildConfig, now: dt.datetime) -> GuildPresence:
    known = guilds_the_bot_is_in(now=now)
    if known is None:
        return GuildPresence(joined=None, invite_url="")
    if guild.guild_id in known:
        return GuildPresence(joined=True, invite_url="")
    report = latest_doctor_report()
    plan = next((p for p in guild_plans() if p.guild_id == guild.guild_id), None)
    if report is None or report.application_id is None or plan is None:
        return GuildPresence(joined=False, invite_url="")
    link = invite_url(application_id=report.application_id, permissions=plan.invite_permissions)
    return GuildPresence(joined=False, invite_url=link)


def unconfigured_bot_guilds(*, now: dt.datetime) -> list[tuple[int, str]]:
    """The guilds the bot is in that no configuration names yet, by name (empty when
    nothing tells which guilds the bot is in). Adding a guild is the operators': they alone
    are shown this."""
    known = guilds_the_bot_is_in(now=now) or {}
    configured = set(GuildConfig.objects.values_list("guild_id", flat=True))
    return sorted(
        ((gid, name) for gid, name in known.items() if gid not in configured),
        key=lambda item: item[1].casefold(),
    )
