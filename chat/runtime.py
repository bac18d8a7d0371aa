"""How the bot's parts are put together outside the gateway: the model clients, the vision model,
the REST-only Discord port, the sandbox's control port, and the turn runtimes made of them.

The worker (`chat.worker`, started by ``runbot``), Celery (`chat.tasks`) and the dashboard (the
prompt preview, replay and playground) build what they need here, so each part is configured
one way. The dashboard reaches Discord and the sandbox only through this module's ports.

- `llm_client_from_settings`, `vision_client_from_settings`, `vision_model_from_settings`: the
  model endpoints (``LLM_*``), read when called, never at import; `video_transcripts_from_settings`:
  the transcript service (``YOUTUBE_TRANSCRIPT_URL``).
- `gateway_runtime`: the worker's runtime over its gateway port.
- `discord_rest_port`: a logged-in, never-connected Discord client behind `RestDiscordPort`,
  taught what the worker knows (its webhooks, the main personas).
- `memory_runtime`: a REST-only runtime that asks the model (Celery's memory refresh and
  extraction).
- `dry_run_runtime`: a runtime with no model client at all; it prepares turns and renders their
  requests (`chat.services.turns.turn_prepare` with ``dry_run``).
- `sandbox_control`: the local sandbox's control API behind `SandboxControl`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from chat import selectors
from chat.gateway.rest import rest_port
from chat.llm.attempts import AttemptRunner
from chat.llm.base import LLMClient, ModelSpec
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.llm.tools import VideoTranscripts, VisionModel
from chat.llm.video_transcripts import VideoTranscriptService
from chat.pipeline.tokens import default_token_counter
from chat.pipeline.types import HistoryMessage
from chat.ports import (
    UNFENCED,
    DiscordPort,
    LeaseFence,
    RestDiscordPort,
    SandboxControl,
    SandboxRefused,
)
from chat.sandbox.control import ControlClient, ControlError
from chat.services.configuration_cache import ChannelConfigurations
from chat.services.spend import Spend
from chat.services.turn_request import TurnCaches, TurnRuntime
from chat.windows import WindowRegistry


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


def vision_client_from_settings() -> OpenAICompatibleClient | None:
    """A client of its own for ``LLM_VISION_BASE_URL`` (with ``LLM_API_KEY``) when that is set
    and a vision model is configured; None when the vision model shares ``LLM_BASE_URL``."""
    if not settings.LLM_VISION_MODEL or not settings.LLM_VISION_BASE_URL:
        return None
    return OpenAICompatibleClient(
        base_url=settings.LLM_VISION_BASE_URL, api_key=settings.LLM_API_KEY
    )


def vision_model_from_settings(client: LLMClient) -> VisionModel | None:
    """The model ``analyze_image`` asks (``LLM_VISION_MODEL`` through ``client``); None when
    no vision model is configured (the tool is then never offered)."""
    if not settings.LLM_VISION_MODEL:
        return None
    endpoint = settings.LLM_VISION_BASE_URL or settings.LLM_BASE_URL
    return VisionModel(
        client=client,
        model=ModelSpec(
            settings.LLM_VISION_MODEL,
            supports_vision=True,
            max_output_tokens=600,
            asks_cost=selectors.endpoint_reports_cost(endpoint),
        ),
    )


def video_transcripts_from_settings() -> VideoTranscriptService | None:
    """The transcript service behind ``process_youtube_video`` (``YOUTUBE_TRANSCRIPT_URL``);
    None when it is not configured (the tool is then never offered)."""
    if not settings.YOUTUBE_TRANSCRIPT_URL:
        return None
    return VideoTranscriptService(settings.YOUTUBE_TRANSCRIPT_URL)


def gateway_runtime(
    *,
    port: DiscordPort,
    windows: WindowRegistry,
    runner: AttemptRunner,
    vision: VisionModel | None,
    videos: VideoTranscripts | None = None,
    fence: LeaseFence = UNFENCED,
) -> TurnRuntime:
    """The worker's runtime over its gateway port and window registry: ``runner`` asks the
    model, ``vision`` backs ``analyze_image`` (None: not offered), ``videos`` backs
    ``process_youtube_video`` (None: not offered), and as many warm contexts
    as ``WORKER_WARM_CONTEXTS`` are kept; ``fence`` is asked before each planner step (the
    port's acts are fenced by the port itself, `chat.leases.FencedPort`). The channel loops
    read configurations through a `ChannelConfigurations` kept for the runtime's life; every
    model call is counted, and checked against the limits, through its `Spend`."""
    token_counter = default_token_counter()
    return TurnRuntime(
        fence=fence,
        port=port,
        windows=windows,
        llm=runner,
        token_counter=token_counter,
        vision=vision,
        videos=videos,
        caches=TurnCaches(warm_contexts=settings.WORKER_WARM_CONTEXTS),
        configurations=ChannelConfigurations(),
        spend=Spend(token_counter=token_counter, own_thread=True),
    )


@contextlib.asynccontextmanager
async def discord_rest_port() -> AsyncIterator[RestDiscordPort]:
    """A REST-only Discord port (``DISCORD_TOKEN`` at ``DISCORD_API_BASE``) that attributes
    history as the worker does: it knows the bot's persona webhooks and each guild's main
    persona (read from the database). The HTTP session closes on exit.

    Raises `chat.ports.DiscordUnavailable` when there is no token or the login is refused.
    """
    webhook_ids = frozenset(await sync_to_async(selectors.own_webhook_ids)())
    main_names = await sync_to_async(selectors.main_persona_names)()
    async with rest_port(
        token=settings.DISCORD_TOKEN,
        api_base=settings.DISCORD_API_BASE,
        gateway_url=settings.DISCORD_GATEWAY_URL,
        webhook_ids=webhook_ids,
        main_persona_names=main_names,
    ) as port:
        yield port


@contextlib.asynccontextmanager
async def memory_runtime(*, guild_id: int | None) -> AsyncIterator[TurnRuntime]:
    """A runtime for a process with no gateway that asks the model (Celery's memory refresh
    and extraction):
    a REST-only port with the guild's channel and role names loaded, a fresh window registry,
    and an unstreamed attempt runner on ``LLM_BASE_URL``, its calls counted (and checked
    against the limits) through a `Spend`. Everything closes on exit.

    Raises what `discord_rest_port` and `llm_client_from_settings` raise.
    """
    async with discord_rest_port() as port, llm_client_from_settings() as client:
        if guild_id is not None:
            await port.load_directory(guild_id)
        spend = Spend(token_counter=default_token_counter())
        try:
            yield TurnRuntime(
                port=port,
                windows=WindowRegistry(
                    fetch_history=port.fetch_history, cache_view=port.cache_view
                ),
                llm=AttemptRunner(client=client, stream=False),
                token_counter=default_token_counter(),
                spend=spend,
            )
        finally:
            await spend.close()  # every call counted before the task ends


HistoryRead = Callable[[int, int], Awaitable[list[HistoryMessage]]]


def dry_run_runtime(
    *, port: RestDiscordPort, now: dt.datetime, fetch_history: HistoryRead | None = None
) -> TurnRuntime:
    """A runtime that prepares turns as of ``now`` and never asks a model (it has no client):
    the prompt preview and replay render their requests with it. ``fetch_history`` reads the
    channel's newest messages (default: the port's; the preview adds a hypothetical message)."""
    read = fetch_history or port.fetch_history
    return TurnRuntime(
        port=port,
        windows=WindowRegistry(fetch_history=read, cache_view=port.cache_view),
        llm=None,
        token_counter=default_token_counter(),
        clock=lambda: now,
        videos=video_transcripts_from_settings(),
    )


class _SandboxControl:
    """`SandboxControl` over the sandbox's control client; its errors become `SandboxRefused`."""

    def __init__(self, client: ControlClient) -> None:
        self._client = client

    async def world(self) -> dict[str, Any]:
        try:
            return await self._client.world()
        except ControlError as error:
            raise SandboxRefused(str(error)) from None

    async def say(self, channel_id: int, author_id: int, content: str) -> dict[str, Any]:
        try:
            return await self._client.say(channel_id, author_id, content)
        except ControlError as error:
            raise SandboxRefused(str(error)) from None

    async def run_command(
        self,
        channel_id: int,
        author_id: int,
        name: str,
        options: dict[str, Any],
        *,
        target_message_id: int | None = None,
    ) -> dict[str, Any]:
        try:
            return await self._client.run_command(
                channel_id, author_id, name, options, target_message_id=target_message_id
            )
        except ControlError as error:
            raise SandboxRefused(str(error)) from None


@contextlib.asynccontextmanager
async def sandbox_control(base_url: str) -> AsyncIterator[SandboxControl]:
    """The control API of the sandbox at ``base_url`` (e.g. ``http://127.0.0.1:8765``); its
    HTTP session closes on exit. Requests raise `SandboxRefused` when the sandbox answers with
    an error, and ``OSError`` / ``aiohttp.ClientError`` when nothing answers."""
    async with ControlClient(base_url) as client:
        yield _SandboxControl(client)
