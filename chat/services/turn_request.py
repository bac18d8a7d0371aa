"""What a persona turn is given and what its preparation yields: the worker's long-lived
dependencies (`TurnRuntime`), one turn to run (`TurnRequest`) and the prepared turn up to the
model request (`PreparedTurn`).
"""

from __future__ import annotations

import datetime as dt
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.utils import timezone

from chat.llm.attempts import AttemptRunner, Render
from chat.llm.base import ModelSpec
from chat.llm.embeddings import EmbeddingModel
from chat.llm.tools import ToolBox, VideoTranscripts, VisionModel
from chat.pipeline.context import TurnContext, TurnInput
from chat.pipeline.recall import RecalledMemory
from chat.pipeline.tokens import TokenCounter
from chat.pipeline.triggers import TurnReason
from chat.pipeline.types import HistoryMessage
from chat.pipeline.window_reuse import RestReason
from chat.ports import UNFENCED, DiscordPort, LeaseFence
from chat.selectors import ChannelConfiguration, ChannelSettings, channel_configuration
from chat.windows import WindowRegistry
from personas.models import Persona

MAX_WARM_CONTEXTS = 2000
MAX_REFRESHED_URLS = 4096
MAX_IMAGE_HASHES = 4096

AbortCheck = Callable[[], Awaitable[str | None]]
"""Asked before a reply goes out: a reason not to send it (the turn ends ``aborted``), or None."""


class ConfigurationRead(Protocol):
    """Reads a channel's configuration at an instant, as `chat.selectors.channel_configuration`
    does (None: the bot does not serve that guild)."""

    def __call__(
        self, *, channel_id: int, guild_id: int | None, now: dt.datetime
    ) -> ChannelConfiguration | None: ...


@dataclass
class TurnRuntime:
    """The worker's long-lived dependencies, passed to every turn (built in `chat.runtime`).

    ``llm`` is None for a dry-run runtime: it prepares turns and renders their requests, and
    never asks a model.
    """

    port: DiscordPort
    windows: WindowRegistry
    llm: AttemptRunner | None
    token_counter: TokenCounter
    clock: Callable[[], dt.datetime] = timezone.now
    previous_contexts: dict[tuple[int, int], TurnContext] = field(default_factory=dict)
    """Per (channel, persona): the last built context, whose token counts and simplified
    history make the next build warm."""
    failure_notices: dict[int, dt.datetime] = field(default_factory=dict)
    vision: VisionModel | None = None
    """The model behind ``analyze_image`` (``LLM_VISION_MODEL``); None: the tool is never
    offered."""
    videos: VideoTranscripts | None = None
    """The transcript service behind ``process_youtube_video`` (``YOUTUBE_TRANSCRIPT_URL``);
    None: the tool is never offered."""
    max_warm_contexts: int = MAX_WARM_CONTEXTS
    """How many contexts `remember_context` keeps (``WORKER_WARM_CONTEXTS``)."""
    embeddings: EmbeddingModel | None = None
    """The embedding model long-term memory recall uses; None: the process's own
    (`memory_store.default_embedding_model`)."""
    fence: LeaseFence = UNFENCED
    """Asked before a planner step is recorded and acted on: raises `chat.ports.LeaseLost` once
    this worker lost the channel's shard lease (a process without shards: never)."""
    refreshed_urls: OrderedDict[str, str] = field(default_factory=OrderedDict)
    """Attachment URLs signed anew (original → refreshed), the newest `MAX_REFRESHED_URLS`:
    the window keeps a message's original, so later turns reuse the refreshed one."""
    image_hashes: OrderedDict[int, str | None] = field(default_factory=OrderedDict)
    """Image attachment id → SHA-256 of its bytes (None: it could not be read), the newest
    `MAX_IMAGE_HASHES`: an attachment's bytes never change, so each image is read once."""
    configurations: ConfigurationRead = channel_configuration
    """How the channel loops read a channel's configuration for each pass and batch: a fresh
    read, or the worker's `chat.services.configuration_cache.ChannelConfigurations`."""

    def remember_context(self, channel_id: int, persona_id: int, context: TurnContext) -> None:
        """Keep the last built context per (channel, persona) for a warm next build; the least
        recently used beyond ``max_warm_contexts`` are dropped, so memory stays bounded."""
        key = (channel_id, persona_id)
        self.previous_contexts.pop(key, None)
        self.previous_contexts[key] = context
        while len(self.previous_contexts) > self.max_warm_contexts:
            del self.previous_contexts[next(iter(self.previous_contexts))]

    @property
    def runner(self) -> AttemptRunner:
        """The attempt runner that asks the model; raises ``RuntimeError`` on a dry-run
        runtime."""
        if self.llm is None:
            raise RuntimeError("a dry-run runtime asks no model")
        return self.llm

    @property
    def streams(self) -> bool:
        """Whether the requests this runtime renders stream: its runner's setting; a dry run
        renders them as the worker sends them (streamed)."""
        return self.llm.stream if self.llm is not None else True


@dataclass(frozen=True)
class TurnRequest:
    """One persona turn to run: the channel's configuration (read once for the whole batch of
    messages it answers), the persona, its trigger and why it runs."""

    configuration: ChannelConfiguration
    persona: Persona
    trigger: HistoryMessage
    reason: TurnReason
    reason_detail: Mapping[str, object] = field(default_factory=dict)
    is_queued_turn: bool = False
    later_queued_trigger_ids: frozenset[int] = frozenset()

    @property
    def channel(self) -> ChannelSettings:
        return self.configuration.settings

    @property
    def memory_user_id(self) -> int | None:
        """Whose short-term memory the turn uses: in a DM the user's (the trigger's accountable
        account); in a guild channel None (one memory per guild, channel and persona)."""
        return self.trigger.accountable_user_id if self.channel.guild is None else None


@dataclass(frozen=True)
class PreparedTurn:
    """Everything a turn needs to call the model, and what it was built from.

    ``body`` is the exact Chat Completions body the first model attempt sends; ``render`` and
    ``toolbox`` let the attempt runner re-render it per attempt (fallback model, shorter
    history). ``rest_reason`` is why the window was read from Discord (None: reused);
    ``window`` is what the turn record keeps of how the window was read and anchored.
    """

    request: TurnRequest
    turn_input: TurnInput
    context: TurnContext
    models: tuple[ModelSpec, ...]
    render: Render
    toolbox: ToolBox
    body: dict[str, Any]
    rest_reason: RestReason | None
    window: Mapping[str, object]
    history_ms: float
    participant_ms: float
    build_ms: float
    recalled: tuple[RecalledMemory, ...] = ()
