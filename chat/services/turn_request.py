"""What a persona turn is given and what its preparation yields: the process's long-lived
dependencies (`TurnRuntime`) and what it keeps between turns (`TurnCaches`), one turn to run
(`TurnRequest`) and the prepared turn up to the model request (`PreparedTurn`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.utils import timezone

from chat.caches import BoundedCache
from chat.llm.attempts import AttemptRunner, Render
from chat.llm.base import ModelSpec
from chat.llm.embeddings import EmbeddingModel
from chat.llm.metering import UNMETERED, CallMeter
from chat.llm.moderation import ModerationClient
from chat.llm.tools import ToolBox, VideoTranscripts, VisionModel
from chat.pipeline.context import TurnContext, TurnInput
from chat.pipeline.recall import RecalledMemory
from chat.pipeline.tokens import TokenCounter
from chat.pipeline.triggers import TurnReason
from chat.pipeline.types import HistoryMessage, PrivacyLevel
from chat.pipeline.window_reuse import RestReason
from chat.ports import UNFENCED, DiscordPort, LeaseFence
from chat.selectors import (
    ChannelConfiguration,
    ChannelSettings,
    UserStanding,
    channel_configuration,
    user_standing,
)
from chat.selectors.notice_bodies import minimal_notice_bodies
from chat.services.spend import Spend
from chat.windows import WindowRegistry
from personas.models import Persona

MAX_WARM_CONTEXTS = 2000
MAX_REFRESHED_URLS = 4096
MAX_IMAGE_HASHES = 4096
MAX_FAILURE_NOTICES = 10_000

AbortCheck = Callable[[], Awaitable[str | None]]
"""Asked before a reply goes out: a reason not to send it (the turn ends ``aborted``), or None."""


class ConfigurationRead(Protocol):
    """Reads a channel's configuration at an instant, as `chat.selectors.channel_configuration`
    does (None: the bot does not serve that guild)."""

    def __call__(
        self, *, channel_id: int, guild_id: int | None, now: dt.datetime
    ) -> ChannelConfiguration | None: ...


class TurnCaches:
    """What a process keeps between turns, each cache bounded (`BoundedCache`): a turn reads
    and fills them through these methods and attributes, and a dry run leaves them as they
    were."""

    def __init__(self, *, warm_contexts: int = MAX_WARM_CONTEXTS) -> None:
        self._contexts: BoundedCache[tuple[int, int], TurnContext] = BoundedCache(warm_contexts)
        self._failure_notices: BoundedCache[int, dt.datetime] = BoundedCache(MAX_FAILURE_NOTICES)
        self.refreshed_urls: BoundedCache[str, str] = BoundedCache(MAX_REFRESHED_URLS)
        """Attachment URLs signed anew (original → refreshed): the window keeps a message's
        original, so later turns reuse the refreshed one."""
        self.image_hashes: BoundedCache[int, str | None] = BoundedCache(MAX_IMAGE_HASHES)
        """Image attachment id → SHA-256 of its bytes (None: it could not be read): an
        attachment's bytes never change, so each image is read once."""

    def remember_context(self, channel_id: int, persona_id: int, context: TurnContext) -> None:
        """Keep the last built context of (channel, persona): its token counts and simplified
        history make the next build warm."""
        self._contexts.put((channel_id, persona_id), context)

    def warm_context(self, channel_id: int, persona_id: int) -> TurnContext | None:
        """The last context built for (channel, persona), or None; reading it changes
        nothing."""
        return self._contexts.peek((channel_id, persona_id))

    def warm_contexts(self) -> dict[tuple[int, int], TurnContext]:
        """Every kept context by (channel, persona), least recently built first (a copy)."""
        return dict(self._contexts.items())

    def forget_contexts(self) -> None:
        """Drop every kept context (the gateway reconnected: the next builds start cold)."""
        self._contexts.clear()

    def failure_notice_due(self, channel_id: int, now: dt.datetime, quiet: dt.timedelta) -> bool:
        """Whether a failure notice may go out in the channel now: none went out in the
        ``quiet`` before ``now`` since its last reply. True records ``now`` as sent."""
        last = self._failure_notices.peek(channel_id)
        if last is not None and now - last < quiet:
            return False
        self._failure_notices.put(channel_id, now)
        return True

    def channel_replied(self, channel_id: int) -> None:
        """A reply went out in the channel: its next failure gets a notice again."""
        self._failure_notices.pop(channel_id)


@dataclass(frozen=True, kw_only=True)
class TurnRuntime:
    """The dependencies every turn of a process is given (built in `chat.runtime`); the only
    state is ``caches``, changed through its methods.

    ``llm`` is None for a dry-run runtime: it prepares turns and renders their requests, and
    never asks a model.
    """

    port: DiscordPort
    windows: WindowRegistry
    llm: AttemptRunner | None
    token_counter: TokenCounter
    clock: Callable[[], dt.datetime] = timezone.now
    caches: TurnCaches = field(default_factory=TurnCaches)
    vision: VisionModel | None = None
    """The model behind ``analyze_image`` (``LLM_VISION_MODEL``); None: the tool is never
    offered."""
    videos: VideoTranscripts | None = None
    """The transcript service behind ``process_youtube_video`` (``YOUTUBE_TRANSCRIPT_URL``);
    None: the tool is never offered."""
    embeddings: EmbeddingModel | None = None
    """The embedding model long-term memory recall uses; None: the process's own
    (`memory_store.default_embedding_model`)."""
    fence: LeaseFence = UNFENCED
    """Asked before a planner step is recorded and acted on: raises `chat.ports.LeaseLost` once
    this worker lost the channel's shard lease (a process without shards: never)."""
    moderation: ModerationClient | None = None
    """The moderation service every reply piece is checked against before it reaches Discord
    (``MODERATION_BASE_URL``; `chat.services.reply_moderation`); None: nothing is checked."""
    configurations: ConfigurationRead = channel_configuration
    """How the channel loops read a channel's configuration for each pass and batch: a fresh
    read, or the worker's `chat.services.configuration_cache.ChannelConfigurations`."""
    spend: Spend = field(default_factory=Spend)
    """Spend and rate limits: every model call of a turn is counted (and may be refused)
    through a meter it builds (`chat.services.spend`)."""

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


class ParticipantScope:
    """What the co-responding turns answering one message share (seed 000's request-scoped
    participant map): the standing of the people their windows name (privacy, blacklist) and
    the bodies of their minimal notices, each read once for all of them. The channel loop
    makes one for each message it answers; a turn given none reads for itself alone. Used
    from the database thread (the turns' `sync_to_async` calls), one turn at a time.
    ``reads`` counts the database reads made through it."""

    def __init__(self) -> None:
        self._standing: dict[tuple[int | None, int], tuple[PrivacyLevel | None, bool]] = {}
        self._notice_bodies: dict[tuple[int | None, int], str | None] = {}
        self.reads = 0

    def standing(self, *, user_ids: set[int], guild_id: int | None) -> UserStanding:
        """`chat.selectors.user_standing` of ``user_ids``, reading only those not read yet."""
        unread = {u for u in user_ids if (guild_id, u) not in self._standing}
        if unread:
            self.reads += 1
            read = user_standing(user_ids=unread, guild_id=guild_id)
            for user_id in unread:
                self._standing[guild_id, user_id] = (
                    read.privacy.get(user_id),
                    user_id in read.blacklisted,
                )
        known = {u: self._standing[guild_id, u] for u in user_ids}
        return UserStanding(
            privacy={u: level for u, (level, _) in known.items() if level is not None},
            blacklisted=frozenset(u for u, (_, listed) in known.items() if listed),
        )

    def notice_bodies(self, *, memory_ids: set[int], guild_id: int | None) -> dict[int, str]:
        """`minimal_notice_bodies` of ``memory_ids``, reading only those not read yet."""
        unread = {i for i in memory_ids if (guild_id, i) not in self._notice_bodies}
        if unread:
            self.reads += 1
            read = minimal_notice_bodies(guild_id=guild_id, memory_ids=unread)
            for memory_id in unread:
                self._notice_bodies[guild_id, memory_id] = read.get(memory_id)
        return {
            i: body for i in memory_ids if (body := self._notice_bodies[guild_id, i]) is not None
        }


@dataclass(frozen=True)
class FixedInputs:
    """What a turn is given instead of reading it (a persona test case, `chat.services.
    persona_tests`): ``history`` is the window, oldest first, ending at the trigger (no
    channel is read, no anchor consulted); ``memories`` the long-term memory lines shown after
    the dialogue (nothing is recalled); ``memories_shown`` what earlier turns showed, by the
    message each was shown after; ``short_term_memory_text`` the persona's short-term memory
    (None: none)."""

    history: tuple[HistoryMessage, ...]
    memories: tuple[str, ...] = ()
    memories_shown: Mapping[int, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    short_term_memory_text: str | None = None


@dataclass(frozen=True)
class TurnRequest:
    """One persona turn to run: the channel's configuration (read once for the whole batch of
    messages it answers), the persona, its trigger and why it runs.

    ``fixed``: inputs given rather than read (a persona test case); None for every turn of a
    channel. ``pinned_anchor_id`` (a replay's dry run only): the recorded turn's window anchor,
    used instead of the channel's stored one (`turn_input.turn_window_read`). ``participants``:
    the scope the turns answering the same message share (None: the turn reads alone)."""

    configuration: ChannelConfiguration
    persona: Persona
    trigger: HistoryMessage
    reason: TurnReason
    reason_detail: Mapping[str, object] = field(default_factory=dict)
    is_queued_turn: bool = False
    later_queued_trigger_ids: frozenset[int] = frozenset()
    fixed: FixedInputs | None = None
    pinned_anchor_id: int | None = None
    participants: ParticipantScope | None = field(default=None, compare=False)

    @property
    def channel(self) -> ChannelSettings:
        return self.configuration.settings

    @property
    def user_id(self) -> int | None:
        """The person whose message caused the turn (a proxy's sender); None for a turn that
        answers no message or answers another persona."""
        if TurnReason(self.reason).answers_no_message or self.trigger.author.persona_name:
            return None
        return self.trigger.accountable_user_id

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
    ``window`` is what the turn record keeps of how the window was read and anchored;
    ``meter`` counts the turn's model calls against its budgets (a dry run's counts nothing).
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
    participant_timings: Mapping[str, float] = field(default_factory=dict)
    """Of ``participant_ms`` (the reads run concurrently, so these may add up to more), by
    the `Turn` field that keeps each: ``hydration_ms``, ``url_refresh_ms``,
    ``image_hash_ms``, ``recall_ms``."""
    meter: CallMeter = UNMETERED
