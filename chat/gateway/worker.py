"""Assembling and running the bot worker: client, adapter, runtime, scheduler.

`run_worker` is what ``manage.py runbot`` runs; the end-to-end tests run it too, against the
sandbox, with the same code path.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from asgiref.sync import sync_to_async

from chat.gateway.client import PersonaBotClient
from chat.gateway.endpoints import configure_discord_endpoints
from chat.llm.attempts import AttemptRunner
from chat.llm.base import LLMClient
from chat.loop.control import listen_for_control
from chat.loop.scheduler import Scheduler
from chat.models import Turn
from chat.pipeline.tokens import default_token_counter
from chat.services import TurnRuntime
from personas.models import Persona

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerConfig:
    token: str
    api_base: str
    gateway_url: str | None
    shard_ids: list[int] | None = None
    shard_count: int | None = None
    step_delay: float = 2.5


def build_client(config: WorkerConfig, *, llm: LLMClient, runner: AttemptRunner | None = None):
    """A client whose ``setup_hook`` wires the scheduler once the bot user is known."""
    configure_discord_endpoints(api_base=config.api_base, gateway_url=config.gateway_url)
    token_counter = default_token_counter()

    async def start(client: PersonaBotClient) -> None:
        await sync_to_async(_load_main_personas)(client)
        await sync_to_async(_abort_interrupted_turns)(config)
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

        async def config_changed(message) -> None:
            await sync_to_async(_load_main_personas)(client)
            runtime.previous_contexts.clear()
            logger.info("configuration changed; reloaded")

        client.background(listen_for_control({"config.changed": config_changed}))
        logger.info("worker started (shards %s of %s)", config.shard_ids, config.shard_count)

    return PersonaBotClient(
        shard_ids=config.shard_ids, shard_count=config.shard_count, on_start=start
    )


def _abort_interrupted_turns(config: WorkerConfig) -> None:
    """Turns a previous run of this worker left ``running`` (it was killed) end ``aborted``;
    their triggers are still unread, so they run again."""
    running = Turn.objects.filter(status=Turn.Status.RUNNING)
    stale = [
        turn.id for turn in running.only("id", "guild_id") if _on_my_shards(turn.guild_id, config)
    ]
    Turn.objects.filter(id__in=stale).update(
        status=Turn.Status.ABORTED, error="the worker stopped during the turn"
    )


def _on_my_shards(guild_id: int | None, config: WorkerConfig) -> bool:
    """Discord's rule: a guild lives on shard ``(guild_id >> 22) % shard_count``; DMs on 0."""
    if config.shard_count is None or config.shard_ids is None:
        return True
    shard = (guild_id >> 22) % config.shard_count if guild_id else 0
    return shard in config.shard_ids


def _load_main_personas(client: PersonaBotClient) -> None:
    """Which persona speaks through the bot account in each guild (for history attribution)."""
    for guild_id, name in Persona.objects.filter(is_main=True).values_list(
        "guild__guild_id", "name"
    ):
        client.adapter.main_persona_name[guild_id] = name


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
