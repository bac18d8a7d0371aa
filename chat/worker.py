"""The bot worker's composition root: client, adapter, runtime, scheduler, control listener.

`run_worker` is what ``manage.py runbot`` runs; the end-to-end tests run it too, against the
sandbox, with the same code path. This module assembles the parts; the database work it needs at
start is done by services and selectors.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from botproject.events import EventType
from chat import selectors
from chat.gateway.client import PersonaBotClient
from chat.gateway.endpoints import configure_discord_endpoints
from chat.llm.attempts import AttemptRunner
from chat.llm.base import LLMClient
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.loop.control import listen_for_control
from chat.loop.scheduler import Scheduler
from chat.pipeline.tokens import default_token_counter
from chat.services import Reconciled, TurnRuntime, turns_reconcile_interrupted

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerConfig:
    token: str
    api_base: str
    gateway_url: str | None
    shard_ids: list[int] | None = None
    shard_count: int | None = None
    step_delay: float = 2.5

    def on_my_shards(self, guild_id: int | None) -> bool:
        """Discord's rule: a guild lives on shard ``(guild_id >> 22) % shard_count``; DMs
        (``guild_id`` None) on shard 0."""
        if self.shard_count is None or self.shard_ids is None:
            return True
        shard = (guild_id >> 22) % self.shard_count if guild_id else 0
        return shard in self.shard_ids


def llm_client_from_settings() -> OpenAICompatibleClient:
    """A client for ``LLM_BASE_URL`` with ``LLM_API_KEY`` and the default ``Timeouts``; close it
    when done (``async with``).

    Raises ``ImproperlyConfigured`` naming ``LLM_BASE_URL`` when it is empty.
    """
    if not settings.LLM_BASE_URL:
        raise ImproperlyConfigured(
            "LLM_BASE_URL is empty: set it to an OpenAI-compatible endpoint, "
            "e.g. http://127.0.0.1:11434/v1"
        )
    return OpenAICompatibleClient(base_url=settings.LLM_BASE_URL, api_key=settings.LLM_API_KEY)


def build_client(config: WorkerConfig, *, llm: LLMClient, runner: AttemptRunner | None = None):
    """A client whose ``setup_hook`` wires the scheduler once the bot user is known."""
    configure_discord_endpoints(api_base=config.api_base, gateway_url=config.gateway_url)
    token_counter = default_token_counter()

    async def start(client: PersonaBotClient) -> None:
        await _load_main_personas(client)
        settled = await turns_reconcile_interrupted(
            port=client.adapter, on_shard=config.on_my_shards
        )
        if settled != Reconciled():
            logger.info("turns left by the previous run: %s", settled)
        runtime = TurnRuntime(
            port=client.adapter,
            windows=client.windows,
            llm=runner or AttemptRunner(client=llm),
            token_counter=token_counter,
        )
        client.scheduler = Scheduler(
            runtime=runtime, own=client.own_identity, step_delay=config.step_delay
        )
        client.scheduler.start()

        async def config_changed(message: Mapping[str, Any]) -> None:
            await _load_main_personas(client)
            runtime.previous_contexts.clear()
            logger.info("configuration changed; reloaded")

        client.background(listen_for_control({EventType.CONFIG_CHANGED: config_changed}))
        logger.info("worker started (shards %s of %s)", config.shard_ids, config.shard_count)

    return PersonaBotClient(
        shard_ids=config.shard_ids, shard_count=config.shard_count, on_start=start
    )


async def _load_main_personas(client: PersonaBotClient) -> None:
    """Which persona speaks through the bot account in each guild (for history attribution)."""
    names = await sync_to_async(selectors.main_persona_names)()
    client.adapter.main_persona_name.update(names)


async def run_worker(config: WorkerConfig, *, llm: LLMClient, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set, then close the gateway and cancel every loop."""
    client = build_client(config, llm=llm)
    async with client:
        runner = asyncio.create_task(client.start(config.token), name="discord-client")
        stopper = asyncio.create_task(stop.wait(), name="stop-signal")
        done, _ = await asyncio.wait({runner, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if runner in done:
            stopper.cancel()
            runner.result()  # a login failure surfaces here
            return
        await client.close()
        await asyncio.gather(runner, return_exceptions=True)
