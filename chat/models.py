"""What the bot worker persists: the message index, the event queue, unread pools, turns,
planner steps, short-term memories and history-window anchors (long-term memories and
documents: `chat.models_memory`).

Discord ids are unsigned 64-bit integers (``*_id`` fields), never foreign keys. The event queue
and the unread pool are unique on (channel, message), so a dispatch replayed by the gateway or a
worker restarted mid-burst cannot enqueue the same message twice.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.db.models.functions import Length
from django.db.models.lookups import LessThanOrEqual

from chat.fields import CompressedJSONField

# Imported here so that Django registers them with the app.
from chat.models_memory import Document, DocumentChunk, Memory, MemoryVersion  # noqa: F401
from chat.models_persona_tests import PersonaTestResult, PersonaTestRun  # noqa: F401
from chat.models_spend import (  # noqa: F401
    SpendCounter,
    SpendReservation,
    UsageDay,
    UserTurnWindow,
)
from chat.pipeline.memory import MAX_SUMMARY_CHARS, MemoryState
from chat.pipeline.triggers import TurnReason
from personas.models import FETCH_LIMIT_MAX, FETCH_LIMIT_MIN, Persona

TURN_REASON_LABELS = {
    TurnReason.MENTION: "Mentioned",
    TurnReason.REPLY: "Reply to a persona",
    TurnReason.TRIGGER_WORD: "Trigger word",
    TurnReason.DIRECT_MESSAGE: "Direct message",
    TurnReason.PLANNER: "Planner decision",
    TurnReason.MAINTENANCE: "Memory maintenance",
    TurnReason.EXTRACTION: "Memory extraction",
    TurnReason.GREETING: "Greeting (from the dashboard)",
}

TURN_REASON_CHOICES = [(str(reason), TURN_REASON_LABELS[reason]) for reason in TurnReason]


class MessageIndex(models.Model):
    """A message the bot delivered, and which persona spoke it; or a proxied member's message.

    Written when a delivery succeeds (one row per Discord message sent, the "Replying to"
    notice included); ``author_id`` is the account Discord shows (the bot user, or the webhook's
    id for webhook personas) and ``webhook_id`` the webhook that sent it. The reactive trigger
    rules read it to know which persona a reply answers.

    A proxied message (a proxy system's webhook speaking for a member, PluralKit-style) has no
    persona and the ``proxy_*`` fields: the member, the sender behind it, and the original the
    proxy deleted (superseded: never answered, never in history).
    """

    message_id = models.PositiveBigIntegerField(unique=True)
    channel_id = models.PositiveBigIntegerField()
    guild_id = models.PositiveBigIntegerField(null=True, blank=True)
    author_id = models.PositiveBigIntegerField(null=True, blank=True)
    persona = models.ForeignKey(
        Persona, on_delete=models.SET_NULL, null=True, blank=True, related_name="messages"
    )
    webhook_id = models.PositiveBigIntegerField(null=True, blank=True)
    proxy_member_id = models.CharField(
        max_length=64, blank=True, help_text="A proxied message: the proxy system's member id"
    )
    proxy_member_name = models.CharField(max_length=100, blank=True)
    proxy_sender_id = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The account behind the member (blocks, privacy)"
    )
    proxy_original_id = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The user's message the proxy replaced (deleted)"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "message index entry"
        verbose_name_plural = "message index"
        indexes = [
            models.Index(fields=["channel_id", "message_id"]),
            models.Index(fields=["proxy_original_id"], name="message_index_proxy_original"),
        ]

    def __str__(self) -> str:
        return f"message {self.message_id} in {self.channel_id}"


class EventQueue(models.Model):
    """The persisted ingress queue (seed 003, phase 1).

    Every gateway ``MESSAGE_CREATE`` is written here before anything else looks at it. The row
    stays after consumption (``consumed`` or ``discarded``) as the deduplication key until the
    retention sweep removes it.
    """

    class Status(models.TextChoices):
        READY = "ready", "Ready"
        CONSUMED = "consumed", "Moved to the unread pool"
        DISCARDED = "discarded", "Discarded (own message or echo)"

    channel_id = models.PositiveBigIntegerField()
    message_id = models.PositiveBigIntegerField()
    guild_id = models.PositiveBigIntegerField(null=True, blank=True)
    event = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.READY)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        verbose_name = "queued event"
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(
                fields=["channel_id", "message_id"], name="event_queue_dedup_key"
            ),
            models.CheckConstraint(
                condition=Q(status__in=["ready", "consumed", "discarded"]),
                name="event_queue_status_valid",
            ),
        ]
        indexes = [models.Index(fields=["status", "id"])]

    def __str__(self) -> str:
        return f"{self.channel_id}-{self.message_id} ({self.status})"


class UnreadEvent(models.Model):
    """A message in a channel's unread pool (seed 003, phase 2), waiting to be read or answered."""

    channel_id = models.PositiveBigIntegerField()
    message_id = models.PositiveBigIntegerField()
    guild_id = models.PositiveBigIntegerField(null=True, blank=True)
    author_id = models.PositiveBigIntegerField()
    event = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["channel_id", "message_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["channel_id", "message_id"], name="unread_event_unique"
            ),
        ]

    def __str__(self) -> str:
        return f"unread {self.message_id} in {self.channel_id}"


CLAIMING_STATUSES = ["delivering", "replied", "withheld"]
"""The statuses of a turn that holds its trigger: at most one per (trigger, persona)."""


class Turn(models.Model):
    """Everything one persona turn did, for moderators: why it ran, what the model saw and said.

    ``context_items`` is the pipeline's structured item list (tag, role, text, token count);
    ``request`` is the exact request body of the final attempt; ``attempts`` holds one entry per
    model call (model, latency, error, usage). Users with full privacy never appear here: the
    pipeline drops them before a turn is recorded.

    The items and the request repeat the same prompt text, so both live in one compressed
    ``prompt_record`` (the second copy compresses to back-references); ``context_items`` and
    ``request`` read and write it like fields, and are accepted by the constructor.

    A turn is ``delivering`` from just before its reply is sent until the delivery is recorded;
    at most one turn per (trigger, persona) is ``delivering``, ``replied`` or ``withheld`` (a
    database constraint), and a worker that starts reconciles the ``delivering`` turns a crash
    left against what Discord shows. Only `chat.services.turn_lifecycle` changes a status.
    """

    class Status(models.TextChoices):
        RUNNING = "running", "Running"
        DELIVERING = "delivering", "Delivering (sent or being sent)"
        REPLIED = "replied", "Replied"
        FAILED = "failed", "Failed"
        ABORTED = "aborted", "Aborted"
        WITHHELD = "withheld", "Withheld (stopped before Discord showed it)"
        REFUSED = "refused", "Refused (a limit said no)"

    guild_id = models.PositiveBigIntegerField(null=True, blank=True)
    channel_id = models.PositiveBigIntegerField()
    persona = models.ForeignKey(
        Persona, on_delete=models.SET_NULL, null=True, blank=True, related_name="turns"
    )
    persona_name = models.CharField(max_length=80)
    trigger_message_id = models.PositiveBigIntegerField(null=True, blank=True)
    trigger_author_id = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text="Who addressed the persona (a proxy's sender); the presence reunion notes "
        "read. Empty for maintenance turns and turns answering another persona.",
    )
    reason = models.CharField(max_length=16, choices=TURN_REASON_CHOICES)
    reason_detail = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.RUNNING)
    prompt_record = CompressedJSONField(default=dict)
    cache_prefix_end = models.PositiveIntegerField(null=True, blank=True)
    truncation = models.JSONField(default=dict, blank=True)
    window = models.JSONField(
        default=dict,
        blank=True,
        help_text="The history window read (`services.window_report`): its messages, refs and "
        "what was left out; rest_reason (null: reused), reanchor_reason (null: the stored anchor "
        "was kept), advanced_by, message_count",
    )
    tool_allowlist = models.JSONField(default=list, blank=True)
    recalled = models.JSONField(
        default=list,
        blank=True,
        help_text="The long-term memories shown to the model, best first: key, kind, text, "
        "score, keyword, vector, why",
    )
    prefill = models.TextField(blank=True)
    attempts = models.JSONField(default=list, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    reply_text = models.TextField(blank=True)
    delivered_message_ids = models.JSONField(default=list, blank=True)
    warnings = models.JSONField(default=list, blank=True)
    lorebook = models.JSONField(
        default=dict,
        blank=True,
        help_text="Lorebook entries that fired (book, entry, key) and those left out "
        "(over budget, failed roll): `LoreActivation.as_record`",
    )
    moderation = models.JSONField(
        default=dict,
        blank=True,
        help_text="The moderation of the reply (and of its trigger, when the guild checks "
        "triggers): model, nsfw_channel, allowed; checks (kind, message, text, categories, "
        "scores, verdict, blocking, latency_ms, error); withheld (the reply as written, when it "
        "was stopped); trigger_withheld (the trigger was not answered)",
    )
    error = models.TextField(blank=True)
    discord_refusal = models.JSONField(
        default=dict,
        blank=True,
        help_text="Set when Discord refused the turn's delivery for want of a permission "
        "(50001 Missing Access, 50013 Missing Permissions): code, reason, permission, "
        "channel_id, channel_name (`chat.ports.DiscordRefusal.as_record`)",
    )
    history_ms = models.FloatField(null=True, blank=True)
    participant_ms = models.FloatField(null=True, blank=True)
    hydration_ms = models.FloatField(
        null=True, blank=True, help_text="Of participant_ms: privacy, blocks, notice bodies"
    )
    url_refresh_ms = models.FloatField(
        null=True, blank=True, help_text="Of participant_ms: expiring attachment URLs signed anew"
    )
    image_hash_ms = models.FloatField(
        null=True, blank=True, help_text="Of participant_ms: the window's images read and hashed"
    )
    recall_ms = models.FloatField(
        null=True, blank=True, help_text="Of participant_ms: long-term memory recall"
    )
    build_ms = models.FloatField(null=True, blank=True)
    llm_ms = models.FloatField(null=True, blank=True)
    deliver_ms = models.FloatField(null=True, blank=True)
    limits_ms = models.FloatField(
        null=True,
        blank=True,
        help_text="Spend and rate limits: the user's turns counted, each model call reserved "
        "and settled (waits for calls in flight included); not part of llm_ms",
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["channel_id", "-created_at"]),
            models.Index(fields=["trigger_message_id"], name="turn_trigger_message"),
            # The overview's latest turns and failures of each guild a person may see.
            models.Index(fields=["guild_id", "-created_at"], name="turn_guild_recent"),
            models.Index(
                fields=["guild_id", "-created_at"],
                condition=Q(status="failed"),
                name="turn_guild_failed",
            ),
            models.Index(fields=["channel_id"], condition=Q(status="running"), name="turn_running"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    status__in=[
                        "running",
                        "delivering",
                        "replied",
                        "failed",
                        "aborted",
                        "withheld",
                        "refused",
                    ]
                ),
                name="turn_status_valid",
            ),
            models.UniqueConstraint(
                fields=["trigger_message_id", "persona"],
                condition=Q(status__in=CLAIMING_STATUSES),
                name="turn_one_answer_per_trigger_and_persona",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.persona_name} in {self.channel_id} ({self.status})"

    @property
    def context_items(self) -> list[dict]:
        return self.prompt_record.get("context_items", [])

    @context_items.setter
    def context_items(self, items: list[dict]) -> None:
        self.prompt_record = {**self.prompt_record, "context_items": items}

    @property
    def request(self) -> dict:
        return self.prompt_record.get("request", {})

    @request.setter
    def request(self, body: dict) -> None:
        self.prompt_record = {**self.prompt_record, "request": body}


class ShortTermMemory(models.Model):
    """A persona's rolling memory of a channel (in a DM: of its conversation with ``user_id``).

    One per (guild, channel, persona), per user in DMs. ``turns_since_refresh`` counts the
    persona's *raw turns* (delivered replies) since the last refresh, the newest at
    ``last_turn_at``; a refresh writes ``summary`` (at most 1,500 characters) or up to five
    ``categories``, resets the count, stamps ``refreshed_at`` and names the turn that wrote it in
    ``last_refreshed_turn``. ``refresh_claimed_at`` marks a background refresh queued and not
    finished (one at a time per memory); ``refresh_run`` is the token of the one refresh running
    now (`chat.services.short_term_memory.short_term_memory_refresh_begin`), so two requests for
    one stretch of conversation make one model call. The rules (due at the persona's cadence
    when its tools are on; raw turns expire after 12 h, the summary after 24 h) are in
    `chat.pipeline.memory`.
    """

    guild_id = models.PositiveBigIntegerField(null=True, blank=True)
    channel_id = models.PositiveBigIntegerField()
    persona = models.ForeignKey(Persona, on_delete=models.CASCADE, related_name="memories")
    user_id = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="Set for a DM-scoped memory"
    )
    summary = models.TextField(blank=True)
    categories = models.JSONField(default=dict, blank=True)
    turns_since_refresh = models.PositiveIntegerField(default=0)
    last_turn_at = models.DateTimeField(null=True, blank=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)
    refresh_claimed_at = models.DateTimeField(
        null=True, blank=True, help_text="A background refresh was queued for it at this time"
    )
    refresh_run = models.CharField(
        max_length=32, blank=True, help_text="The token of the refresh running now (one at a time)"
    )
    refresh_run_at = models.DateTimeField(
        null=True, blank=True, help_text="When the running refresh began (database clock)"
    )
    last_refreshed_turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "short-term memory"
        verbose_name_plural = "short-term memories"
        constraints = [
            models.UniqueConstraint(
                fields=["persona", "channel_id"],
                condition=Q(user_id__isnull=True),
                name="short_term_memory_unique_per_channel",
            ),
            models.UniqueConstraint(
                fields=["persona", "user_id"],
                condition=Q(user_id__isnull=False),
                name="short_term_memory_unique_per_dm_user",
            ),
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("summary"), MAX_SUMMARY_CHARS),
                name="short_term_memory_summary_length",
            ),
        ]

    def __str__(self) -> str:
        scope = f"DM {self.user_id}" if self.user_id else f"channel {self.channel_id}"
        return f"{self.persona} / {scope}"

    @property
    def state(self) -> MemoryState:
        """The memory as `chat.pipeline.memory`'s rules read it."""
        return MemoryState(
            summary=self.summary,
            categories=self.categories if isinstance(self.categories, dict) else {},
            turns_since_refresh=self.turns_since_refresh,
            last_turn_at=self.last_turn_at,
            refreshed_at=self.refreshed_at,
        )


class PlannerStep(models.Model):
    """One step of an autonomous channel's planner loop (seed 003): what the planner was shown,
    what it decided and what came of it — the inspector's answer to "why did it speak".

    ``loop_id`` groups the steps of one loop; ``prompt`` is the exact Chat Completions messages;
    ``decision`` the model's raw answer and ``action`` the validated action (empty when it was
    invalid or the model failed); ``turn`` is the persona turn a ``send_message`` ran.
    """

    guild_id = models.PositiveBigIntegerField(null=True, blank=True)
    channel_id = models.PositiveBigIntegerField()
    loop_id = models.CharField(max_length=32, db_index=True)
    iteration = models.PositiveSmallIntegerField()
    prompt = models.JSONField(default=list, blank=True)
    decision = models.TextField(blank=True)
    action = models.JSONField(default=dict, blank=True)
    success = models.BooleanField(default=False)
    result = models.TextField(blank=True)
    ignored = models.JSONField(
        default=dict,
        blank=True,
        help_text="Keys of the decision the action does not use (name → value), left out "
        "rather than failing the step",
    )
    turn = models.ForeignKey(
        Turn, on_delete=models.SET_NULL, null=True, blank=True, related_name="planner_steps"
    )
    llm_ms = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["channel_id", "-created_at"])]

    def __str__(self) -> str:
        return f"planner step {self.iteration} in {self.channel_id}: {self.action or 'invalid'}"


class ChannelWindowAnchor(models.Model):
    """Where a channel's history window starts (DESIGN §5, anchored selection).

    Only the id is stored; the worker keeps the window itself in memory. ``limit`` is the fetch
    limit the anchor was chosen for: a changed limit forces a new anchor.

    The row is what inspection reads (the preview, replay, ``/prompt``, a memory refresh):
    ``reanchor_due`` says the worker serving the channel dropped its windows since the anchor
    was stored (its gateway connected, reconnected or disconnected), so its next turn chooses
    a new anchor (DESIGN §5); ``guild_id`` (None: a DM) tells which worker's shards the channel
    is on, so each worker marks only its own channels.
    """

    channel_id = models.PositiveBigIntegerField(unique=True)
    guild_id = models.PositiveBigIntegerField(null=True, blank=True)
    anchor_message_id = models.PositiveBigIntegerField()
    limit = models.PositiveSmallIntegerField()
    reanchor_due = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(limit__gte=FETCH_LIMIT_MIN) & Q(limit__lte=FETCH_LIMIT_MAX),
                name="anchor_limit_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.channel_id} from {self.anchor_message_id} (limit {self.limit})"


class ChannelResetMarker(models.Model):
    """A ``/reset`` of a channel: its personas see only what is said after ``marker_id``.

    ``marker_id`` is a snowflake of the moment of the reset (the command's interaction id), so
    every later message has a greater id; the anchored selection starts the window after it
    (DESIGN §5: a reset marker newer than the anchor wins). One per channel: a new reset
    replaces the old. ``reset_by`` is the member who ran the command.
    """

    channel_id = models.PositiveBigIntegerField(unique=True)
    guild_id = models.PositiveBigIntegerField(null=True, blank=True)
    marker_id = models.PositiveBigIntegerField()
    reset_by = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.channel_id} reset after {self.marker_id}"


class ShardLease(models.Model):
    """Who runs a gateway shard: one worker at a time (DESIGN §2, scale-out).

    Leases under different shard counts that share a guild exclude each other (a reshard
    never lets two workers serve one channel). A worker holds a lease for each of its shards
    and renews it well before ``expires_at``; a
    second worker for the same shard waits as a standby and takes over once the lease lapses
    (its holder stopped renewing: killed, hung, or cut off from the database). Leases live in
    the database because what they guard — the queue, the unread pools, the turns — lives
    there too, and a Redis restart must not change who owns a shard.
    """

    shard_id = models.PositiveSmallIntegerField()
    shard_count = models.PositiveSmallIntegerField()
    holder = models.CharField(max_length=64)
    expires_at = models.DateTimeField()
    fence = models.PositiveBigIntegerField(default=0)
    """The fencing token: a number higher than every token before, taken with the lease and
    kept by its renewals; a worker acts only while its token is still the lease's
    (`chat.leases`)."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["shard_id", "shard_count"], name="shard_lease_unique"),
            models.CheckConstraint(
                condition=Q(shard_id__lt=models.F("shard_count")), name="shard_lease_id_in_range"
            ),
        ]

    def __str__(self) -> str:
        return f"shard {self.shard_id}/{self.shard_count} held by {self.holder}"


class WorkerHeartbeat(models.Model):
    """A running bot worker's pulse, written every few seconds while it holds the gateway or
    waits as a standby.

    ``shard_ids`` are the shards this worker has connected now, ``latencies`` the gateway
    heartbeat latency of each (shard id as a string → seconds), ``guild_ids`` the guilds those
    shards serve (strings: JavaScript cannot hold snowflakes). A standby (no gateway) has none
    of those: ``standby_for`` are the shards whose lease it waits for (of ``shard_count``) and
    ``waiting_for`` the workers holding them (empty: none yet). A row not updated for
    ``STALE_AFTER`` belongs to a worker that stopped.
    """

    STALE_AFTER_SECONDS = 30

    holder = models.CharField(max_length=64, unique=True)
    shard_ids = models.JSONField(default=list, blank=True)
    shard_count = models.PositiveSmallIntegerField(null=True, blank=True)
    latencies = models.JSONField(default=dict, blank=True)
    guild_ids = models.JSONField(default=list, blank=True)
    standby_for = models.JSONField(default=list, blank=True)
    waiting_for = models.JSONField(default=list, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True, db_index=True)

    class Meta:
        ordering = ["holder"]

    def __str__(self) -> str:
        if self.standby_for:
            return f"worker {self.holder} (standby for shards {self.standby_for})"
        return f"worker {self.holder} (shards {self.shard_ids})"


class DiscordName(models.Model):
    """The name Discord shows for a guild, a channel, a thread or a user, as the gateway last
    said it (guild and channel create/update, member updates), so the dashboard shows names
    without asking Discord. ``guild_id`` is the guild the object belongs to (a user's: where
    the name was last seen), ``parent_id`` a thread's channel, ``avatar_url`` a user's
    avatar. Users with full privacy are never stored.
    """

    class Kind(models.TextChoices):
        GUILD = "guild"
        CHANNEL = "channel"
        THREAD = "thread"
        USER = "user"

    kind = models.CharField(max_length=8, choices=Kind.choices)
    discord_id = models.PositiveBigIntegerField()
    name = models.CharField(max_length=100)
    guild_id = models.PositiveBigIntegerField(null=True, blank=True)
    parent_id = models.PositiveBigIntegerField(null=True, blank=True)
    avatar_url = models.URLField(max_length=300, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "discord_id"], name="discord_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.discord_id}: {self.name}"


class DoctorReport(models.Model):
    """One run of the deployment check (`chat.services.doctor`): ``manage.py doctor``, Celery
    beat's every ``DOCTOR_SECONDS``, or one an admin asked for on the dashboard.

    ``checks`` are its lines (`chat.pipeline.going_live.Check.as_json`), ``ok`` whether all
    passed (None while it runs); ``application_id`` and ``invite_url`` what Discord said of the
    application (empty when it could not be read), ``bot_guilds`` the guilds the bot was in
    (id as a string → name). Reports older than a week are deleted as new ones are saved.
    """

    class Origin(models.TextChoices):
        COMMAND = "command", "manage.py doctor"
        SCHEDULE = "schedule", "Celery beat"
        DASHBOARD = "dashboard", "Asked for on the dashboard"

    origin = models.CharField(max_length=10, choices=Origin.choices)
    requested_by = models.CharField(max_length=150, blank=True)
    ok = models.BooleanField(null=True, blank=True)
    checks = models.JSONField(default=list, blank=True)
    application_id = models.PositiveBigIntegerField(null=True, blank=True)
    invite_url = models.URLField(max_length=300, blank=True)
    bot_guilds = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        state = "running" if self.ok is None else ("ok" if self.ok else "FAIL")
        return f"doctor {self.created_at:%Y-%m-%d %H:%M} ({state})"
