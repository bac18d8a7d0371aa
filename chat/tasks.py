"""Celery tasks: thin wrappers that load by id, call a service and own their retry policy.

Beat schedule (``CELERY_BEAT_SCHEDULE`` in settings):

- ``records_prune_task`` hourly: turns, planner steps, message index and deduplication keys
  past their retention, and budget reservations a stopped process never settled (the usage
  rollups and counters are never pruned);
- ``short_term_memory_maintenance_task`` every ``SHORT_TERM_MEMORY_MAINTENANCE_SECONDS``
  (300 s): clears expired memory and queues one ``short_term_memory_refresh_task`` per due
  memory whose channel has been quiet for ``SHORT_TERM_MEMORY_IDLE_SECONDS`` (600 s);
- ``memory_extraction_schedule_task`` every ``MEMORY_EXTRACTION_SECONDS`` (300 s): queues one
  ``memory_extraction_task`` per guild channel quiet for ``MEMORY_EXTRACTION_QUIET_SECONDS``
  (600 s) with at least ``MEMORY_EXTRACTION_MIN_MESSAGES`` (4) new messages since its last
  extraction.

- ``memory_embed_task`` every ``MEMORY_EMBED_SECONDS`` (300 s): embeds the memories and
  document passages that have no vector of the configured embedding model (written while its
  endpoint failed, or the model changed).

- ``doctor_task`` every ``DOCTOR_SECONDS`` (600 s): the deployment check (``manage.py
  doctor``), its report saved for the dashboard's overview.

Queued by the dashboard: ``document_embed_task`` once per uploaded document; ``doctor_task``
when an admin asks for a check; ``persona_test_run_task`` once per persona test run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging

from asgiref.sync import sync_to_async
from celery import shared_task
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils import timezone

from chat.models import DoctorReport, PersonaTestRun, ShortTermMemory
from chat.pipeline.memory import RAW_TURNS_TTL
from chat.runtime import discord_deployment, memory_runtime, persona_test_runner
from chat.selectors.short_term_memory import short_term_memories_due
from chat.services.doctor import doctor_run
from chat.services.memory_documents import document_embed, documents_embed_stale
from chat.services.memory_extraction import Extraction, memories_extract, memory_extraction_due
from chat.services.memory_refresh import MemoryRefresh, short_term_memory_refresh
from chat.services.memory_store import default_embedding_model, memories_embed_missing
from chat.services.persona_test_runs import persona_test_run_execute, persona_test_run_refused
from chat.services.retention import Retention, records_prune
from chat.services.short_term_memory import (
    short_term_memory_claim,
    short_term_memory_expire,
    short_term_memory_release,
)
from chat.services.spend import reservations_prune

logger = logging.getLogger(__name__)

REFRESH_MAX_RETRIES = 3
REFRESH_RETRY_SECONDS = 60


@shared_task(ignore_result=True)
def records_prune_task() -> dict[str, int]:
    """Hourly (Celery beat): delete turns, planner steps, message-index rows and deduplication
    keys past their retention (``TURN_RETENTION_DAYS``, ``MESSAGE_INDEX_RETENTION_DAYS``,
    ``DEDUP_RETENTION_DAYS``) in bounded batches; returns how many of each went.

    Ready queue rows and turns still running or delivering are never touched. A failed run is
    not retried: the next hour's run does the same work.
    """
    now = timezone.now()
    deleted = records_prune(
        now=now,
        retention=Retention(
            turns=dt.timedelta(days=settings.TURN_RETENTION_DAYS),
            message_index=dt.timedelta(days=settings.MESSAGE_INDEX_RETENTION_DAYS),
            dedup_keys=dt.timedelta(days=settings.DEDUP_RETENTION_DAYS),
        ),
    )
    deleted["spend_reservations"] = reservations_prune(now=now)
    logger.info("pruned records past their retention: %s", deleted)
    return deleted


@shared_task(ignore_result=True)
def short_term_memory_maintenance_task() -> list[int]:
    """Periodic (Celery beat): clear expired memory, then queue a refresh of every due memory
    in a quiet channel that no other refresh holds (`short_term_memory_claim`); returns the
    queued ids. Not retried: the next run finds the same rows."""
    now = timezone.now()
    cleared = short_term_memory_expire(now=now)
    due = short_term_memories_due(
        now=now,
        idle_for=dt.timedelta(seconds=settings.SHORT_TERM_MEMORY_IDLE_SECONDS),
        raw_turns_ttl=RAW_TURNS_TTL,
    )
    claimed = short_term_memory_claim(memory_ids=due, now=now)
    for memory_id in claimed:
        short_term_memory_refresh_task.delay(memory_id)
    logger.info("memory maintenance: %d cleared, %d refreshes queued", cleared, len(claimed))
    return claimed


@shared_task(bind=True, ignore_result=True, max_retries=REFRESH_MAX_RETRIES)
def short_term_memory_refresh_task(self, memory_id: int) -> str:
    """Refresh one memory (`short_term_memory_refresh`): re-fetched by id, skipped when gone or
    no longer due. A failure of the model or of Discord is retried up to three times, a minute
    apart; returns the outcome (``refreshed``, ``skipped`` or ``failed``)."""
    result = asyncio.run(_refresh(memory_id))
    logger.info("memory %s: %s %s", memory_id, result.status, result.detail)
    if result.retry:
        if self.request.retries < self.max_retries:
            raise self.retry(countdown=REFRESH_RETRY_SECONDS)
        short_term_memory_release(memory_id=memory_id)  # given up: the next run may queue it
    return result.status


async def _refresh(memory_id: int) -> MemoryRefresh:
    """Compose a REST-only runtime (no gateway in this process) and run the service; the
    database connection the event loop's thread opened is closed at the end."""
    try:
        return await _refresh_with_rest_discord(memory_id)
    finally:
        await sync_to_async(connections.close_all)()


async def _refresh_with_rest_discord(memory_id: int) -> MemoryRefresh:
    memory = await ShortTermMemory.objects.filter(id=memory_id).afirst()
    if memory is None:
        return MemoryRefresh("skipped", "the memory is gone")
    async with memory_runtime(guild_id=memory.guild_id) as runtime:
        return await short_term_memory_refresh(runtime=runtime, memory_id=memory_id)


EXTRACTION_MAX_RETRIES = 2
EXTRACTION_RETRY_SECONDS = 120


@shared_task(ignore_result=True)
def memory_extraction_schedule_task() -> list[int]:
    """Periodic (Celery beat): queue an extraction of every guild channel whose conversation
    went quiet with something new to read (`memory_extraction_due`); returns the channels."""
    due = memory_extraction_due(now=timezone.now())
    for channel_id, guild_id in due:
        memory_extraction_task.delay(channel_id, guild_id)
    logger.info("memory extraction: %d channels queued", len(due))
    return [channel_id for channel_id, _ in due]


@shared_task(bind=True, ignore_result=True, max_retries=EXTRACTION_MAX_RETRIES)
def memory_extraction_task(self, channel_id: int, guild_id: int) -> str:
    """Extract durable facts from one quiet channel (`memories_extract`). A failure of the
    model or of Discord is retried twice, two minutes apart; returns the outcome."""
    result = asyncio.run(_extract(channel_id, guild_id))
    logger.info("memory extraction in %s: %s %s", channel_id, result.status, result.detail)
    if result.retry and self.request.retries < self.max_retries:
        raise self.retry(countdown=EXTRACTION_RETRY_SECONDS)
    return result.status


async def _extract(channel_id: int, guild_id: int) -> Extraction:
    """A REST-only runtime (no gateway in this process) for one extraction; the database
    connection the event loop's thread opened is closed at the end."""
    try:
        async with memory_runtime(guild_id=guild_id) as runtime:
            return await memories_extract(runtime=runtime, channel_id=channel_id, guild_id=guild_id)
    finally:
        await sync_to_async(connections.close_all)()


@shared_task(ignore_result=True)
def document_embed_task(document_id: int) -> str:
    """Cut an uploaded document into passages and embed them (`document_embed`), counting
    progress on the row; returns its status (``gone`` when it was deleted meanwhile). An
    embedding failure leaves it ``failed`` with the error; uploading it again retries."""
    document = document_embed(document_id=document_id)
    return "gone" if document is None else document.status


@shared_task(ignore_result=True)
def memory_embed_task() -> dict[str, int]:
    """Periodic (Celery beat): embed the memories without a vector of the configured model
    (`memories_embed_missing`), then the documents with passages of another model
    (`documents_embed_stale`). Not retried: the next run finds what is left."""
    memories = memories_embed_missing()
    documents = documents_embed_stale()
    logger.info("embedded %d memories and %d documents", memories, len(documents))
    return {"memories": memories, "documents": len(documents)}


@shared_task(ignore_result=True)
def doctor_task(report_id: int | None = None) -> bool:
    """Periodic (Celery beat), or queued by an admin on the dashboard with the id of the report
    row it made: check the deployment (`doctor_run`) and save the report on that row (a new
    one when it is gone). Returns whether every check passed. Not retried: the next run checks
    again."""
    return asyncio.run(_doctor(report_id))


async def _doctor(report_id: int | None) -> bool:
    try:
        _, examination = await doctor_run(
            discord=discord_deployment,
            origin=DoctorReport.Origin.SCHEDULE,
            now=timezone.now,
            report_id=report_id,
        )
    finally:
        await sync_to_async(connections.close_all)()
    return examination.ok


@shared_task(ignore_result=True)
def persona_test_run_task(run_id: int) -> str | None:
    """Run the queued persona test run ``run_id`` (queued by the dashboard after its commit):
    its status, progress and results are written as it goes. Returns the run's final status;
    None when the run is gone or was already taken. Not retried: a run is started once (a
    model's failure is that case's result, not the task's)."""
    run = asyncio.run(persona_test_run_now(run_id))
    return run.status if run is not None else None


async def persona_test_run_now(run_id: int) -> PersonaTestRun | None:
    """Run the queued run ``run_id`` with the deployment's models (``LLM_BASE_URL``,
    ``JUDGE_MODEL``, the embedding model) and ``PERSONA_TEST_CONCURRENCY``; without a model
    endpoint the run fails saying so. The task and ``manage.py personatest`` run it this way."""
    try:
        async with persona_test_runner() as (runner, spend):
            run = await persona_test_run_execute(
                run_id=run_id,
                runner=runner,
                spend=spend,
                embeddings=default_embedding_model,
                judge_model=settings.JUDGE_MODEL,
                concurrency=settings.PERSONA_TEST_CONCURRENCY,
            )
    except ImproperlyConfigured as problem:
        run = await sync_to_async(persona_test_run_refused)(run_id=run_id, reason=str(problem))
    finally:
        await sync_to_async(connections.close_all)()
    return run
