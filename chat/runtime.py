"""How the bot's parts are put together outside the gateway: the model clients, the vision model,
the REST-only Discord port, the sandbox's control port, and the turn runtimes made of them.

The worker (`chat.worker`, started by ``runbot``), Celery (`chat.tasks`) and the dashboard (the
prompt preview, replay and playground) build what they need here, so each part is configured
one way. The dashboard reaches Discord and the sandbox only through this module's ports.

- `llm_client_from_settings`, `vision_client_from_settings`, `vision_model_from_settings`: the
  model endpoints (``LLM_*``), read when called, never at import; `video_transcripts_from_settings`:
  the transcript service (``YOUTUBE_TRANSCRIPT_URL``).
- `turn_capabilities_from_settings`: what the settings give every turn (the tokenizer, the
  vision model, the transcript service, the embedding model), one way for the worker, Celery
  and the dashboard's dry runs, so a preview offers what the real turn offers.
- `gateway_runtime`: the worker's runtime over its gateway port.
- `discord_rest_port`: a logged-in, never-connected Discord client behind `RestDiscordPort`,
  taught what the worker knows (its webhooks, the main personas).
- `memory_runtime`: a REST-only runtime that asks the model (Celery's memory refresh and
  extraction).
- `dry_run_runtime`: a runtime that asks no model; it prepares turns and renders their
  requests (`chat.services.turns.turn_prepare` with ``dry_run``).
- `sandbox_control`: the local sandbox's control API behind `SandboxControl`.
- `discord_deployment`: what the deployment check reads of Discord (`DiscordDeployment`).
- `persona_test_runner`: the attempt runner persona test runs ask the models with.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from chat import selectors
from chat.gateway.deployment import deployment_reader
from chat.gateway.rest import rest_port
from chat.llm.attempts import AttemptRunner
from chat.llm.base import LLMClient, ModelRequest, ModelSpec
from chat.llm.embeddings import EmbeddingModel
from chat.llm.moderation import ModerationClient, ModerationOnError, OpenAIModerationClient
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.llm.tools import VideoTranscripts, VisionModel
from chat.llm.video_transcripts import VideoTranscriptService
from chat.pipeline.tokens import TokenCounter, default_token_counter
from chat.pipeline.types import HistoryMessage
from chat.ports import (
    UNFENCED,
    DiscordDeployment,
    DiscordPort,
    LeaseFence,
    RestDiscordPort,
    SandboxControl,
    SandboxRefused,
)
from chat.sandbox.control import ControlClient, ControlError
from chat.services.configuration_cache import ChannelConfigurations
from chat.services.memory_store import default_embedding_model
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
            asks_cost=selectors.endpoint_reports_cost(base_url=endpoint),
        ),
    )


def video_transcripts_from_settings() -> VideoTranscriptService | None:
    """The transcript service behind ``process_youtube_video`` (``YOUTUBE_TRANSCRIPT_URL``);
    None when it is not configured (the tool is then never offered)."""
    if not settings.YOUTUBE_TRANSCRIPT_URL:
        return None
    return VideoTranscriptService(settings.YOUTUBE_TRANSCRIPT_URL)


def moderation_from_settings() -> OpenAIModerationClient | None:
    """The moderation service at ``MODERATION_BASE_URL`` (with ``MODERATION_API_KEY``,
    ``MODERATION_MODEL`` and ``MODERATION_ON_ERROR``); None when it is not set (nothing is
    checked). It opens its connection at the first check; close it when done (``aclose``)."""
    if not settings.MODERATION_BASE_URL:
        return None
    return OpenAIModerationClient(
        base_url=settings.MODERATION_BASE_URL,
        api_key=settings.MODERATION_API_KEY,
        model=settings.MODERATION_MODEL,
        on_error=ModerationOnError(settings.MODERATION_ON_ERROR),
    )


@dataclass(frozen=True, kw_only=True)
class TurnCapabilities:
    """What the settings give every turn of a process, whichever process it is: the
    tokenizer, the model behind ``analyze_image`` and ``process_gif`` (None: not offered), the
    transcript service behind ``process_youtube_video`` (None: not offered), the embedding
    model long-term memory recall uses and the moderation service reply pieces are checked
    against (None: nothing is checked). Each is a `TurnRuntime` field of the same name; close
    them when done (`aclose`)."""

    token_counter: TokenCounter
    vision: VisionModel | None = None
    videos: VideoTranscripts | None = None
    embeddings: EmbeddingModel | None = None
    moderation: ModerationClient | None = None

    def runtime_fields(self) -> dict[str, Any]:
        """The capabilities as `TurnRuntime` keyword arguments."""
        return {
            "token_counter": self.token_counter,
            "vision": self.vision,
            "videos": self.videos,
            "embeddings": self.embeddings,
            "moderation": self.moderation,
        }

    async def aclose(self) -> None:
        """Close the connections the capabilities opened (the moderation service's)."""
        if self.moderation is not None:
            await self.moderation.aclose()


def turn_capabilities_from_settings(*, vision_client: LLMClient) -> TurnCapabilities:
    """The capabilities the settings configure (``LLM_VISION_MODEL``,
    ``YOUTUBE_TRANSCRIPT_URL``, ``LLM_EMBEDDING_MODEL``, ``MODERATION_BASE_URL``), read when
    called. The worker, Celery
    and the dashboard's dry runs all build theirs here, so a preview offers exactly the tools
    the worker's turn offers. ``vision_client`` is the client the vision model is asked through
    (`vision_client_from_settings`, else the ``LLM_BASE_URL`` client; a dry run's asks
    nothing)."""
    return TurnCapabilities(
        token_counter=default_token_counter(),
        vision=vision_model_from_settings(vision_client),
        videos=video_transcripts_from_settings(),
        embeddings=default_embedding_model(),
        moderation=moderation_from_settings(),
    )


class _NoModel:
    """The client behind a dry run's vision model: a dry run runs no tool, so it is never
    asked (`TurnRuntime.runner` refuses the same way)."""

    async def complete(self, request: ModelRequest) -> NoReturn:
        raise RuntimeError("a dry-run runtime asks no model")

    def stream(self, request: ModelRequest) -> NoReturn:
        raise RuntimeError("a dry-run runtime asks no model")


def gateway_runtime(
    *,
    port: DiscordPort,
    windows: WindowRegistry,
    runner: AttemptRunner,
    capabilities: TurnCapabilities,
    fence: LeaseFence = UNFENCED,
) -> TurnRuntime:
    """The worker's runtime over its gateway port and window registry: ``runner`` asks the
    model, ``capabilities`` are what the settings give (`turn_capabilities_from_settings`),
    and as many warm contexts as ``WORKER_WARM_CONTEXTS`` are kept; ``fence`` is asked before
    each planner step (the port's acts are fenced by the port itself,
    `chat.leases.FencedPort`). The channel loops read configurations through a
    `ChannelConfigurations` kept for the runtime's life; every model call is counted, and
    checked against the limits, through its `Spend`."""
    return TurnRuntime(
        fence=fence,
        port=port,
        windows=windows,
        llm=runner,
        caches=TurnCaches(warm_contexts=settings.WORKER_WARM_CONTEXTS),
        configurations=ChannelConfigurations(),
        **capabilities.runtime_fields(),
        spend=Spend(token_counter=capabilities.token_counter, own_thread=True),
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
    a REST-only port with the guild's channel and role names loaded, a fresh window registry
    (without a gateway: the channel's stored anchor says where its window starts), an
    unstreamed attempt runner on ``LLM_BASE_URL`` and the settings' capabilities, its calls
    counted (and checked against the limits) through a `Spend`. Everything closes on exit.

    Raises what `discord_rest_port` and `llm_client_from_settings` raise.
    """
    async with discord_rest_port() as port, llm_client_from_settings() as client:
        if guild_id is not None:
            await port.load_directory(guild_id)
        vision_client = vision_client_from_settings()
        capabilities = turn_capabilities_from_settings(vision_client=vision_client or client)
        spend = Spend(token_counter=capabilities.token_counter)
        try:
            yield TurnRuntime(
                port=port,
                windows=WindowRegistry(
                    fetch_history=port.fetch_history, cache_view=port.cache_view, gateway=False
                ),
                llm=AttemptRunner(client=client, stream=False),
                spend=spend,
                **capabilities.runtime_fields(),
            )
        finally:
            await spend.close()  # every call counted before the task ends
            await capabilities.aclose()
            if vision_client is not None:
                await vision_client.aclose()


HistoryRead = Callable[[int, int], Awaitable[list[HistoryMessage]]]


def dry_run_runtime(
    *, port: RestDiscordPort, now: dt.datetime, fetch_history: HistoryRead | None = None
) -> TurnRuntime:
    """A runtime that prepares turns as of ``now`` and never asks a model (it has no client):
    the prompt preview and replay render their requests with it. Its capabilities come from
    the settings as the worker's do (`turn_capabilities_from_settings`), so it offers the same
    tools. Its window registry has no gateway: where the window starts is the channel's
    stored anchor, read as the worker will use it (`ChannelWindowAnchor.reanchor_due`).
    ``fetch_history`` reads the channel's newest messages (default: the port's; the preview
    adds a hypothetical message)."""
    read = fetch_history or port.fetch_history
    return TurnRuntime(
        port=port,
        windows=WindowRegistry(fetch_history=read, cache_view=port.cache_view, gateway=False),
        llm=None,
        clock=lambda: now,
        **turn_capabilities_from_settings(vision_client=_NoModel()).runtime_fields(),
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


@contextlib.asynccontextmanager
async def discord_deployment() -> AsyncIterator[DiscordDeployment]:
    """What the deployment check (`chat.services.doctor`) reads of Discord, logged in with
    ``DISCORD_TOKEN`` at ``DISCORD_API_BASE``; the HTTP session closes on exit. Raises
    `chat.ports.TokenRefused` (401) or `chat.ports.DiscordUnavailable`."""
    async with deployment_reader(
        token=settings.DISCORD_TOKEN,
        api_base=settings.DISCORD_API_BASE,
        gateway_url=settings.DISCORD_GATEWAY_URL,
    ) as reader:
        yield reader


@contextlib.asynccontextmanager
async def persona_test_runner() -> AsyncIterator[tuple[AttemptRunner, Spend]]:
    """The attempt runner a persona test run asks its models with (``LLM_BASE_URL``, replies
    unstreamed: the whole reply is checked) and the `Spend` its calls are counted through;
    both close on exit (every call counted). Raises ``ImproperlyConfigured`` as
    `llm_client_from_settings` does."""
    async with llm_client_from_settings() as client:
        spend = Spend(token_counter=default_token_counter())
        try:
            yield AttemptRunner(client=client, stream=False), spend
        finally:
            await spend.close()
