"""Celery tasks: thin wrappers that call a service and own their retry policy."""

from __future__ import annotations

import logging

from celery import shared_task
from django.utils import timezone

from chat.loop.ingress import event_queue_prune

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def event_queue_prune_task() -> int:
    """Hourly (Celery beat): drop deduplication keys past their retention; returns how many.

    Bounded retention keeps the event queue small; ready rows are never touched. A failed run
    is not retried: the next hour's run does the same work.
    """
    deleted = event_queue_prune(now=timezone.now())
    logger.info("pruned %d consumed event-queue keys", deleted)
    return deleted
