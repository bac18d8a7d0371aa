from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.utils import timezone

from chat.loop.ingress import OwnIdentity, event_ingest, event_queue_consume
from chat.models import EventQueue
from chat.tasks import event_queue_prune_task
from chat.tests.factories import message

pytestmark = pytest.mark.django_db


def test_beat_runs_the_event_queue_prune_every_hour():
    entry = settings.CELERY_BEAT_SCHEDULE["event-queue-prune"]
    assert (entry["task"], entry["schedule"]) == (event_queue_prune_task.name, 3600.0)


def test_the_prune_task_removes_expired_keys_and_keeps_ready_work():
    old, waiting = message(content="old"), message(content="waiting")
    event_ingest(message=old, guild_id=1)
    event_queue_consume(own=OwnIdentity(bot_user_id=999))
    event_ingest(message=waiting, guild_id=1)
    EventQueue.objects.update(created_at=timezone.now() - dt.timedelta(days=3))

    assert event_queue_prune_task.apply().get() == 1
    assert list(EventQueue.objects.values_list("message_id", flat=True)) == [waiting.id]
