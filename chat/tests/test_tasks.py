from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.utils import timezone

from chat.models import (
    EventQueue,
    MessageIndex,
    ShortTermMemory,
    SpendCounter,
    SpendReservation,
    Turn,
    UnreadEvent,
    UsageDay,
)
from chat.pipeline.memory import RAW_TURNS_TTL
from chat.selectors.short_term_memory import short_term_memories_due
from chat.services.event_queue import OwnIdentity, event_ingest_many, event_queue_consume
from chat.services.retention import Retention, records_prune
from chat.tasks import records_prune_task, short_term_memory_maintenance_task
from chat.tests.factories import message
from personas.models import GuildConfig, Persona

pytestmark = pytest.mark.django_db


def test_beat_runs_the_records_prune_every_hour():
    entry = settings.CELERY_BEAT_SCHEDULE["records-prune"]
    assert (entry["task"], entry["schedule"]) == (records_prune_task.name, 3600.0)


def test_the_prune_task_removes_expired_records_and_keeps_work_and_recent_ones(settings):
    settings.TURN_RETENTION_DAYS, settings.DEDUP_RETENTION_DAYS = 30, 7
    settings.MESSAGE_INDEX_RETENTION_DAYS = 90
    now = timezone.now()
    old_key, waiting = message(content="old"), message(content="waiting")
    event_ingest_many(batch=[(old_key, 1)])
    event_queue_consume(own=OwnIdentity(bot_user_id=999))
    event_ingest_many(batch=[(waiting, 1)])
    EventQueue.objects.update(created_at=now - dt.timedelta(days=8))
    turns = {
        status: Turn.objects.create(
            channel_id=1, persona_name="Tomori", reason="mention", status=status
        )
        for status in ("replied", "failed", "running", "delivering")
    }
    recent = Turn.objects.create(channel_id=1, persona_name="Tomori", reason="mention")
    Turn.objects.exclude(id=recent.id).update(created_at=now - dt.timedelta(days=31))
    MessageIndex.objects.create(message_id=1, channel_id=1)
    MessageIndex.objects.create(message_id=2, channel_id=1)
    MessageIndex.objects.filter(message_id=1).update(created_at=now - dt.timedelta(days=91))
    year_ago = (now - dt.timedelta(days=400)).date()
    UsageDay.objects.create(guild_id=1, day=year_ago, kind="reply", model="m", calls=3)
    SpendCounter.objects.create(guild_id=1, period="day", starts_on=year_ago, calls=3)
    for expires_at in (now - dt.timedelta(minutes=1), now + dt.timedelta(minutes=5)):
        SpendReservation.objects.create(
            ticket=str(expires_at.timestamp()),
            holder="h",
            guild_id=1,
            day=year_ago,
            month=year_ago,
            tokens=10,
            expires_at=expires_at,
        )

    deleted = records_prune_task.apply().get()

    assert deleted == {
        "turns": 2,
        "planner_steps": 0,
        "message_index": 1,
        "dedup_keys": 1,
        "spend_reservations": 1,
    }
    # Retention prunes turns, never the usage rollups or counters; a live reservation stays.
    assert UsageDay.objects.get().calls == SpendCounter.objects.get().calls == 3
    assert SpendReservation.objects.count() == 1
    assert list(EventQueue.objects.values_list("message_id", flat=True)) == [waiting.id]
    assert set(Turn.objects.values_list("id", flat=True)) == {
        turns["running"].id,
        turns["delivering"].id,
        recent.id,
    }
    assert list(MessageIndex.objects.values_list("message_id", flat=True)) == [2]


def test_a_large_backlog_is_pruned_in_bounded_batches():
    now = timezone.now()
    Turn.objects.bulk_create(
        Turn(channel_id=1, persona_name="T", reason="mention", status="replied") for _ in range(25)
    )
    Turn.objects.update(created_at=now - dt.timedelta(days=40))

    first = records_prune(now=now, retention=Retention(), batch_size=10, max_batches=2)
    second = records_prune(now=now, retention=Retention(), batch_size=10, max_batches=2)

    assert (first["turns"], second["turns"]) == (20, 5)
    assert not Turn.objects.exists()


def test_beat_runs_short_term_memory_maintenance_every_five_minutes():
    entry = settings.CELERY_BEAT_SCHEDULE["short-term-memory-maintenance"]
    assert entry["task"] == short_term_memory_maintenance_task.name
    assert entry["schedule"] == settings.SHORT_TERM_MEMORY_MAINTENANCE_SECONDS == 300.0


def test_maintenance_picks_due_memories_of_quiet_channels_only():
    guild = GuildConfig.objects.create(guild_id=1, name="g")
    tomori = Persona.objects.create(guild=guild, name="Tomori", is_main=True)
    quiet = Persona.objects.create(guild=guild, name="Anon", short_term_memory_refresh_every=2)
    off = Persona.objects.create(guild=guild, name="Rana", tools_enabled=False)
    now = timezone.now()
    idle, busy_channel = dt.timedelta(minutes=10), 30

    def memory(persona, channel_id, turns, quiet_for):
        return ShortTermMemory.objects.create(
            persona=persona,
            channel_id=channel_id,
            guild_id=1,
            turns_since_refresh=turns,
            last_turn_at=now - quiet_for,
        ).id

    due = memory(tomori, 10, 5, dt.timedelta(minutes=11))
    custom_cadence = memory(quiet, 10, 2, dt.timedelta(hours=1))
    memory(tomori, 11, 4, dt.timedelta(hours=1))  # not due at 4
    memory(tomori, 12, 5, dt.timedelta(minutes=9))  # the channel is still talking
    memory(tomori, 13, 5, dt.timedelta(hours=12))  # its raw turns expired
    memory(off, 10, 9, dt.timedelta(hours=1))  # tools off: never
    memory(quiet, busy_channel, 5, dt.timedelta(hours=1))
    UnreadEvent.objects.create(
        channel_id=busy_channel, message_id=1, guild_id=1, author_id=2, event={}
    )

    assert short_term_memories_due(now=now, idle_for=idle, raw_turns_ttl=RAW_TURNS_TTL) == [
        custom_cadence,
        due,
    ]
