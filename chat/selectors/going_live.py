"""Reads for the deployment check (`chat.services.doctor`) and the dashboard's going-live
parts: what the configuration asks of Discord and of the model endpoint, the turns Discord
refused, and the latest check's report."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass

from django.conf import settings
from django.db.models import QuerySet

from chat.models import DiscordName, DoctorReport, Turn, WorkerHeartbeat
from chat.pipeline.going_live import ChannelDuties, invite_permissions
from chat.selectors.model_specs import persona_model_specs
from personas.models import ChannelConfig, ChannelMode, GuildConfig


@dataclass(frozen=True)
class GuildPlan:
    """A configured guild as the deployment check sees it: the non-main personas that may
    speak in its channels, and its enabled configured channels (``autonomous``: those the
    planner runs)."""

    guild_id: int
    name: str
    alter_personas: tuple[str, ...]
    channel_ids: tuple[int, ...]
    autonomous_channel_ids: tuple[int, ...]
    planner_model: str

    @property
    def duties(self) -> ChannelDuties:
        return ChannelDuties(alter_personas=self.alter_personas)

    @property
    def invite_permissions(self) -> int:
        return invite_permissions([self.duties])


def guild_plans() -> list[GuildPlan]:
    """Every configured guild, by name."""
    plans = []
    for guild in GuildConfig.objects.order_by("name", "guild_id").prefetch_related("personas"):
        personas = [p for p in guild.personas.all() if p.enabled]
        channels = ChannelConfig.objects.filter(guild=guild, enabled=True).order_by("channel_id")
        plans.append(
            GuildPlan(
                guild_id=guild.guild_id,
                name=guild.name,
                alter_personas=tuple(sorted(p.name for p in personas if not p.is_main)),
                channel_ids=tuple(c.channel_id for c in channels),
                autonomous_channel_ids=tuple(
                    c.channel_id for c in channels if c.mode == ChannelMode.AUTONOMOUS
                ),
                planner_model=guild.planner_model or settings.LLM_PLANNER_MODEL,
            )
        )
    return plans


def models_in_use() -> dict[str, list[str]]:
    """Each model the configuration asks ``LLM_BASE_URL`` for, and who asks it (persona names
    with their guild, a guild's planner), in first-use order."""
    users: dict[str, list[str]] = {}
    for guild in GuildConfig.objects.order_by("name", "guild_id").prefetch_related("personas"):
        for persona in guild.personas.all():
            if not persona.enabled:
                continue
            for spec in persona_model_specs(persona=persona):
                users.setdefault(spec.name, []).append(f"{persona.name} ({guild.name})")
        autonomous = ChannelConfig.objects.filter(
            guild=guild, enabled=True, mode=ChannelMode.AUTONOMOUS
        ).exists()
        planner = guild.planner_model or settings.LLM_PLANNER_MODEL
        if autonomous and planner:
            users.setdefault(planner, []).append(f"the planner ({guild.name})")
    return users


@dataclass(frozen=True)
class RefusalTally:
    """Turns Discord refused for want of ``permission`` in one channel."""

    channel_id: int
    channel_name: str
    permission: str
    code: int
    turns: int
    latest_turn_id: int


def turn_refusals(*, since: dt.datetime, turns: QuerySet[Turn] | None = None) -> list[RefusalTally]:
    """The turns since ``since`` (of ``turns``: default all) whose delivery Discord refused
    (50001/50013), counted by channel and permission, most turns first."""
    turns = Turn.objects.all() if turns is None else turns
    rows = (
        turns.filter(created_at__gte=since)
        .exclude(discord_refusal={})
        .order_by("-created_at")
        .values_list("pk", "discord_refusal")
    )
    counts: Counter[tuple[int, str]] = Counter()
    first: dict[tuple[int, str], tuple[int, dict]] = {}
    for pk, refusal in rows:
        key = (int(refusal.get("channel_id") or 0), str(refusal.get("permission") or ""))
        counts[key] += 1
        first.setdefault(key, (pk, refusal))
    return [
        RefusalTally(
            channel_id=channel_id,
            channel_name=str(first[(channel_id, permission)][1].get("channel_name") or ""),
            permission=permission,
            code=int(first[(channel_id, permission)][1].get("code") or 0),
            turns=turns,
            latest_turn_id=first[(channel_id, permission)][0],
        )
        for (channel_id, permission), turns in counts.most_common()
    ]


def latest_doctor_report() -> DoctorReport | None:
    """The newest finished deployment check."""
    return DoctorReport.objects.exclude(ok=None).order_by("-created_at").first()


def doctor_run_pending(*, since: dt.datetime) -> DoctorReport | None:
    """A check asked for after ``since`` that has not finished yet (None: none)."""
    return (
        DoctorReport.objects.filter(ok=None, created_at__gte=since).order_by("-created_at").first()
    )


def guilds_the_bot_is_in(*, now: dt.datetime) -> dict[int, str] | None:
    """The guilds the bot is in, with their names: what the running workers hold (their
    heartbeats), else what the latest check found; None when neither knows."""
    fresh = now - dt.timedelta(seconds=WorkerHeartbeat.STALE_AFTER_SECONDS)
    beats = WorkerHeartbeat.objects.filter(updated_at__gte=fresh).exclude(shard_ids=[])
    report = latest_doctor_report()
    known = {int(k): str(v) for k, v in (report.bot_guilds if report else {}).items()}
    if beats.exists():
        ids = {int(g) for beat in beats for g in beat.guild_ids}
        names = dict(
            DiscordName.objects.filter(kind=DiscordName.Kind.GUILD, discord_id__in=ids).values_list(
                "discord_id", "name"
            )
        )
        return {g: names.get(g) or known.get(g) or str(g) for g in sorted(ids)}
    return known if report is not None else None
