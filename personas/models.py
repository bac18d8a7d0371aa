"""What server admins configure: guilds, personas, channels, blocks and user privacy.

Discord ids (snowflakes) are stored as unsigned 64-bit integers in fields named ``*_id``; they are
not foreign keys because Discord, not this database, owns those objects. Limits that matter for
prompts (fetch limit, note depth, model budgets) are enforced by database check constraints, so
neither the dashboard, the admin nor ``importconfig`` can store a value the bot would reject.
"""

from __future__ import annotations

import uuid
import zoneinfo
from collections.abc import Mapping
from enum import StrEnum

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Length, Lower
from django.db.models.lookups import LessThanOrEqual

from chat.pipeline.types import BlockType, PrivacyLevel

FETCH_LIMIT_MIN = 20
FETCH_LIMIT_MAX = 100
FETCH_LIMIT_DEFAULT = 80
NOTE_DEPTH_MAX = 100
SHORT_TERM_MEMORY_REFRESH_EVERY_MAX = 1000  # replies between short-term memory refreshes

# Bounds on what an admin can configure. The import schema, the forms (validators) and the
# database (check constraints) all use these numbers, so no path can store more.
GUILD_NAME_MAX = 100
PERSONA_NAME_MAX = 80
SYSTEM_PROMPT_MAX = 32_000  # characters
NOTE_TEXT_MAX = 4_000  # characters, guild, channel and persona context notes
PREFILL_MAX = 1_000  # characters
TRIGGERS_MAX = 20  # trigger words per persona
TRIGGER_LENGTH_MAX = 50  # characters per trigger word
SAMPLE_DIALOGUE_MAX = 50  # sample dialogue rows per persona
SAMPLE_CONTENT_MAX = 2_000  # characters per sample dialogue row
GREETING_MAX = 16_000  # characters of a first message or an alternate greeting
GREETINGS_MAX = 50  # alternate greetings per persona
MODEL_NAME_MAX = 200
INSTRUCT_SEQUENCE_MAX = 1_000  # characters of one instruct template field
PRESET_PROMPTS_MAX = 200  # prompts (and order entries) of a SillyTavern chat preset
PRESET_TEXT_MAX = 200  # characters of a preset prompt's identifier or name
FALLBACK_MODELS_MAX = 5
AVATAR_URL_MAX = 500
BLOCK_REASON_MAX = 500
TIMEZONE_NAME_MAX = 64
TEMPERATURE_MIN = 0.0
TEMPERATURE_MAX = 2.0
MAX_OUTPUT_TOKENS_MAX = 32_768
CONTEXT_WINDOW_MIN = 2
CONTEXT_WINDOW_MAX = 2_000_000
# Lorebooks (a persona's, a guild's): checked by the import schema, which the card import,
# the dashboard's editor and the configuration file all go through.
LORE_ENTRIES_MAX = 2_000  # entries per lorebook
LORE_KEYS_MAX = 50  # primary or secondary keys per entry
LORE_KEY_LENGTH_MAX = 200  # characters per key
LORE_CONTENT_MAX = 16_000  # characters per entry
LORE_TEXT_MAX = 4_000  # characters of a book's or an entry's name, description, comment
LORE_SCAN_DEPTH_MAX = 100  # like the fetch limit: no more messages are read
# Row counts: checked by the import schema (and documented for the dashboard's forms); a check
# constraint cannot count rows. Item lengths inside JSON lists (one trigger word, one sample row)
# are likewise the schema's; the number of items is also a check constraint.
GUILDS_MAX = 100  # guilds per configuration file
PERSONAS_PER_GUILD_MAX = 25
CHANNELS_PER_GUILD_MAX = 500
BLOCKS_PER_GUILD_MAX = 1_000
USERS_PER_GUILD_MAX = 1_000
# Spend and rate limits (DESIGN §3b): bounds past which a value is a typo, not a budget.
TOKENS_PER_DAY_MAX = 10_000_000_000
USD_PER_MONTH_MAX = 1_000_000  # US dollars
USER_TURNS_COUNT_MAX = 10_000
USER_TURNS_SECONDS_MAX = 31 * 86_400
LIMIT_NOTICE_MAX = 500  # characters of the notice a spent budget sends
PRICE_PER_MILLION_MAX = 10_000  # US dollars per million tokens
PRICES_MAX = 500  # models in the price table
USD_DECIMAL_PLACES = 6


class JSONArrayLength(models.Func):
    """The number of items of a JSON array column (PostgreSQL ``jsonb_array_length``, SQLite
    ``json_array_length``); PostgreSQL raises an error for a value that is not an array."""

    function = "JSON_ARRAY_LENGTH"
    output_field = models.IntegerField()

    def as_postgresql(self, compiler, connection, **extra_context):
        return self.as_sql(compiler, connection, function="JSONB_ARRAY_LENGTH", **extra_context)


def _items_at_most(field: str, limit: int, name: str) -> models.CheckConstraint:
    """A check constraint: the JSON array in ``field`` has at most ``limit`` items."""
    return models.CheckConstraint(
        condition=LessThanOrEqual(JSONArrayLength(field), limit), name=name
    )


def _at_most(field: str, limit: int, name: str) -> models.CheckConstraint:
    """A check constraint: the text in ``field`` has at most ``limit`` characters."""
    return models.CheckConstraint(condition=LessThanOrEqual(Length(field), limit), name=name)


def validate_timezone(value: str) -> None:
    """Raise ValidationError unless ``value`` is an IANA time zone name such as ``Asia/Tokyo``."""
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(f"{value!r} is not an IANA time zone name") from None


def _fetch_limit_validators() -> list:
    return [MinValueValidator(FETCH_LIMIT_MIN), MaxValueValidator(FETCH_LIMIT_MAX)]


def _depth_validators() -> list:
    return [MaxValueValidator(NOTE_DEPTH_MAX)]


def _labelled(labels: Mapping[StrEnum, str]) -> list[tuple[str, str]]:
    """Django choices for a pipeline enum: each member's value with the label people read."""
    return [(member.value, label) for member, label in labels.items()]


# The privacy levels and block kinds are the pipeline's enums (one vocabulary for prompts,
# services and storage); these are their labels on the dashboard and in the admin.
PRIVACY_LEVEL_CHOICES = _labelled(
    {
        PrivacyLevel.MINIMAL: "Minimal",
        PrivacyLevel.PARTIAL: "Partial",
        PrivacyLevel.FULL: "Full (never shown to the model, previews or records)",
    }
)
BLOCK_TYPE_CHOICES = _labelled(
    {
        BlockType.BLOCK: "Block (hidden from the persona)",
        BlockType.MUTE: "Mute (cannot trigger the persona)",
    }
)


class PrivacySource(models.TextChoices):
    """Who set a user's privacy level last."""

    ADMIN = "admin", "An admin"
    USER = "user", "The user (/privacy)"


class ChannelMode(models.TextChoices):
    REACTIVE = "reactive", "Reactive (trigger rules decide)"
    AUTONOMOUS = "autonomous", "Autonomous (the planner decides)"


class DeliveryMode(models.TextChoices):
    """How a persona's reply reaches Discord (the default: paragraph by paragraph)."""

    PARAGRAPHS = "paragraphs", "Paragraph by paragraph, each as soon as it is written"
    WHOLE = "whole", "The whole reply at once, when the model has finished"
    EDIT = "edit", "One message, edited as the model writes (at most once a second)"


MODERATION_ON, MODERATION_OFF = "on", "off"
"""A guild's ``moderation`` when it lists no category of its own: checked, or not at all."""


def moderation_on() -> str:
    """A new guild's ``moderation``: checked (a callable, as a JSON field's default must be)."""
    return MODERATION_ON


class GuildConfig(models.Model):
    """One Discord server's settings and its fallback context note."""

    guild_id = models.PositiveBigIntegerField(unique=True)
    name = models.CharField(max_length=GUILD_NAME_MAX)
    timezone = models.CharField(
        max_length=TIMEZONE_NAME_MAX, default="UTC", validators=[validate_timezone]
    )
    message_fetch_limit = models.PositiveSmallIntegerField(
        default=FETCH_LIMIT_DEFAULT, validators=_fetch_limit_validators()
    )
    context_note = models.TextField(blank=True, validators=[MaxLengthValidator(NOTE_TEXT_MAX)])
    context_note_depth = models.PositiveSmallIntegerField(default=4, validators=_depth_validators())
    lorebook = models.JSONField(
        null=True,
        blank=True,
        help_text="Shared by every persona of the guild; the configuration file's lorebook",
    )
    planner_model = models.CharField(
        max_length=MODEL_NAME_MAX,
        blank=True,
        help_text="The planner's model in autonomous channels; empty: LLM_PLANNER_MODEL, "
        "else the main persona's model",
    )
    chat_preset = models.JSONField(
        null=True,
        blank=True,
        help_text="A SillyTavern Chat Completion preset for personas that have none",
    )
    moderation = models.JSONField(
        default=moderation_on,
        blank=True,
        help_text='Reply moderation: "on" (the default), "off", or the categories allowed in '
        "every channel (never sexual/minors); the configuration file's moderation",
    )
    moderation_input = models.BooleanField(
        default=False,
        help_text="Check a triggering message before answering it; a flagged one is not answered",
    )
    limits = models.JSONField(
        null=True,
        blank=True,
        help_text="Spend and rate limits as the configuration file writes them (DESIGN §3b): "
        "tokens_per_day, usd_per_month, user_turns, notice; null: none",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "guild"
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(message_fetch_limit__gte=FETCH_LIMIT_MIN)
                & Q(message_fetch_limit__lte=FETCH_LIMIT_MAX),
                name="guild_fetch_limit_range",
            ),
            models.CheckConstraint(
                condition=Q(context_note_depth__lte=NOTE_DEPTH_MAX), name="guild_note_depth_range"
            ),
            _at_most("name", GUILD_NAME_MAX, "guild_name_length"),
            _at_most("context_note", NOTE_TEXT_MAX, "guild_note_length"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.guild_id})"


class Persona(models.Model):
    """A character the bot speaks as in one guild.

    The main persona speaks through the bot account; the others through a channel webhook with
    their own name and avatar. At most one persona per guild is main, and names are unique per
    guild ignoring case (both enforced by the database).
    """

    guild = models.ForeignKey(GuildConfig, on_delete=models.CASCADE, related_name="personas")
    name = models.CharField(max_length=PERSONA_NAME_MAX)
    is_main = models.BooleanField(default=False)
    answers_dms = models.BooleanField(
        default=False,
        help_text="Answers direct messages to the bot (at most one persona of the deployment; "
        "none: DMs go unanswered); its guild's blocks apply there too",
    )
    enabled = models.BooleanField(default=True)
    avatar_url = models.URLField(max_length=AVATAR_URL_MAX, blank=True)
    system_prompt = models.TextField(blank=True, validators=[MaxLengthValidator(SYSTEM_PROMPT_MAX)])
    triggers = models.JSONField(default=list, blank=True, help_text="Trigger words (list of str)")
    sample_dialogue = models.JSONField(
        default=list, blank=True, help_text='List of {"role": "user"|"assistant", "content": str}'
    )
    first_mes = models.TextField(
        blank=True,
        validators=[MaxLengthValidator(GREETING_MAX)],
        help_text="A character card's first message (its greeting)",
    )
    alternate_greetings = models.JSONField(
        default=list, blank=True, help_text="A character card's other greetings (list of str)"
    )
    prefill = models.TextField(blank=True, validators=[MaxLengthValidator(PREFILL_MAX)])
    context_note = models.TextField(blank=True, validators=[MaxLengthValidator(NOTE_TEXT_MAX)])
    context_note_depth = models.PositiveSmallIntegerField(default=4, validators=_depth_validators())
    deliberate_tool_mode = models.BooleanField(default=True)
    tools_enabled = models.BooleanField(
        default=True, help_text="Off: the persona is never offered a tool (memory upkeep included)"
    )
    short_term_memory_refresh_every = models.PositiveSmallIntegerField(
        default=5,
        validators=[MinValueValidator(1), MaxValueValidator(SHORT_TERM_MEMORY_REFRESH_EVERY_MAX)],
        help_text="Short-term memory is refreshed after this many of the persona's replies",
    )
    short_term_memory_depth = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=_depth_validators(),
        help_text="Empty: short-term memory in the system prompt; a number: at that depth",
    )
    force_lowercase = models.BooleanField(default=False)
    punctuation_splits = models.BooleanField(default=False)
    delivery_mode = models.CharField(
        max_length=10, choices=DeliveryMode.choices, default=DeliveryMode.PARAGRAPHS
    )
    llm_model = models.CharField(
        max_length=MODEL_NAME_MAX, blank=True, help_text="Empty: the deployment's LLM_MODEL"
    )
    fallback_models = models.JSONField(
        default=list,
        blank=True,
        help_text='Tried in order: model names, or {"model", "api", "instruct_template"}',
    )
    llm_api = models.CharField(
        max_length=16,
        choices=[("chat", "Chat Completions"), ("completions", "Text completion")],
        default="chat",
    )
    instruct_template = models.JSONField(
        null=True,
        blank=True,
        help_text="Text completion: chatml | llama3 | mistral | alpaca, or a SillyTavern "
        "instruct preset; empty: chatml",
    )
    temperature = models.FloatField(
        default=0.7,
        validators=[MinValueValidator(TEMPERATURE_MIN), MaxValueValidator(TEMPERATURE_MAX)],
    )
    max_output_tokens = models.PositiveIntegerField(
        default=512, validators=[MinValueValidator(1), MaxValueValidator(MAX_OUTPUT_TOKENS_MAX)]
    )
    context_window = models.PositiveIntegerField(
        default=16000,
        validators=[MinValueValidator(CONTEXT_WINDOW_MIN), MaxValueValidator(CONTEXT_WINDOW_MAX)],
    )
    llm_vision = models.BooleanField(
        null=True, blank=True, help_text="The model takes images; empty: decided by its name"
    )
    llm_prefill = models.BooleanField(
        null=True, blank=True, help_text="The model continues a prefill; empty: by its name"
    )
    llm_merge_same_role = models.BooleanField(
        null=True,
        blank=True,
        help_text="Merge adjacent messages of one role; empty: decided by the model's name",
    )
    reasoning_in_think_tags = models.BooleanField(
        default=False, help_text="Ask the model to wrap its reasoning in <think> tags"
    )
    verbatim_tool_nudge = models.BooleanField(
        default=False,
        help_text="Remind the model (custom endpoints) to call tools verbatim",
    )
    lorebook = models.JSONField(
        null=True,
        blank=True,
        help_text="The persona's lorebook (a card's character_book); the configuration file's",
    )
    chat_preset = models.JSONField(
        null=True,
        blank=True,
        help_text="A SillyTavern Chat Completion preset: the prompt's order and wording",
    )
    limits = models.JSONField(
        null=True,
        blank=True,
        help_text="The persona's own budget (tokens_per_day, usd_per_month), counted besides "
        "the guild's; null: only the guild's",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["guild", "-is_main", "name"]
        constraints = [
            models.UniqueConstraint(
                "guild", Lower("name"), name="persona_name_unique_per_guild_ci"
            ),
            models.UniqueConstraint(
                fields=["guild"], condition=Q(is_main=True), name="one_main_persona_per_guild"
            ),
            models.UniqueConstraint(
                fields=["answers_dms"], condition=Q(answers_dms=True), name="one_dm_persona"
            ),
            models.CheckConstraint(
                condition=Q(context_note_depth__lte=NOTE_DEPTH_MAX),
                name="persona_note_depth_range",
            ),
            models.CheckConstraint(
                condition=Q(temperature__gte=0.0) & Q(temperature__lte=2.0),
                name="persona_temperature_range",
            ),
            models.CheckConstraint(
                condition=Q(delivery_mode__in=DeliveryMode.values),
                name="persona_delivery_mode_valid",
            ),
            models.CheckConstraint(
                condition=Q(short_term_memory_refresh_every__gte=1),
                name="persona_short_term_memory_refresh_every_positive",
            ),
            models.CheckConstraint(
                condition=Q(
                    short_term_memory_refresh_every__lte=SHORT_TERM_MEMORY_REFRESH_EVERY_MAX
                ),
                name="persona_short_term_memory_refresh_every_max",
            ),
            models.CheckConstraint(
                condition=Q(short_term_memory_depth__isnull=True)
                | Q(short_term_memory_depth__lte=NOTE_DEPTH_MAX),
                name="persona_short_term_memory_depth_range",
            ),
            models.CheckConstraint(
                condition=Q(max_output_tokens__gte=1), name="persona_max_output_tokens_positive"
            ),
            models.CheckConstraint(
                condition=Q(context_window__gt=models.F("max_output_tokens")),
                name="persona_context_window_exceeds_output",
            ),
            models.CheckConstraint(
                condition=Q(max_output_tokens__lte=MAX_OUTPUT_TOKENS_MAX),
                name="persona_max_output_tokens_max",
            ),
            models.CheckConstraint(
                condition=Q(context_window__lte=CONTEXT_WINDOW_MAX),
                name="persona_context_window_max",
            ),
            _at_most("name", PERSONA_NAME_MAX, "persona_name_length"),
            _at_most("system_prompt", SYSTEM_PROMPT_MAX, "persona_system_prompt_length"),
            _at_most("prefill", PREFILL_MAX, "persona_prefill_length"),
            _at_most("context_note", NOTE_TEXT_MAX, "persona_note_length"),
            _at_most("llm_model", MODEL_NAME_MAX, "persona_model_name_length"),
            _items_at_most("triggers", TRIGGERS_MAX, "persona_trigger_count"),
            _items_at_most("sample_dialogue", SAMPLE_DIALOGUE_MAX, "persona_sample_dialogue_rows"),
            _items_at_most("fallback_models", FALLBACK_MODELS_MAX, "persona_fallback_count"),
            _at_most("first_mes", GREETING_MAX, "persona_first_mes_length"),
            _items_at_most("alternate_greetings", GREETINGS_MAX, "persona_greeting_count"),
            models.CheckConstraint(
                condition=Q(llm_api__in=["chat", "completions"]), name="persona_llm_api_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if self.context_window <= self.max_output_tokens:
            raise ValidationError({"context_window": "must be larger than max output tokens"})


class ChannelConfig(models.Model):
    """Per-channel behaviour: reactive or autonomous, a channel note and a fetch-limit override."""

    channel_id = models.PositiveBigIntegerField(unique=True)
    guild = models.ForeignKey(GuildConfig, on_delete=models.CASCADE, related_name="channels")
    mode = models.CharField(
        max_length=16, choices=ChannelMode.choices, default=ChannelMode.REACTIVE
    )
    enabled = models.BooleanField(default=True)
    context_note = models.TextField(blank=True, validators=[MaxLengthValidator(NOTE_TEXT_MAX)])
    context_note_depth = models.PositiveSmallIntegerField(default=4, validators=_depth_validators())
    message_fetch_limit = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        validators=_fetch_limit_validators(),
        help_text="Empty: the guild's limit",
    )

    class Meta:
        verbose_name = "channel"
        ordering = ["guild", "channel_id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(mode__in=ChannelMode.values), name="channel_mode_valid"
            ),
            models.CheckConstraint(
                condition=Q(context_note_depth__lte=NOTE_DEPTH_MAX),
                name="channel_note_depth_range",
            ),
            models.CheckConstraint(
                condition=Q(message_fetch_limit__isnull=True)
                | (
                    Q(message_fetch_limit__gte=FETCH_LIMIT_MIN)
                    & Q(message_fetch_limit__lte=FETCH_LIMIT_MAX)
                ),
                name="channel_fetch_limit_range",
            ),
            _at_most("context_note", NOTE_TEXT_MAX, "channel_note_length"),
        ]

    def __str__(self) -> str:
        return f"#{self.channel_id} ({self.mode})"

    @property
    def effective_fetch_limit(self) -> int:
        return self.message_fetch_limit or self.guild.message_fetch_limit


class Block(models.Model):
    """A user blocked from one persona (or, with no persona, from every persona of the guild).

    ``block`` hides the user's messages from that persona's prompts (a run of them becomes one
    notice); ``mute`` only stops the user from triggering it. Expired rows are inert.
    """

    guild = models.ForeignKey(GuildConfig, on_delete=models.CASCADE, related_name="blocks")
    persona = models.ForeignKey(
        Persona,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="blocks",
        help_text="Empty: every persona of the guild",
    )
    user_id = models.PositiveBigIntegerField()
    type = models.CharField(max_length=8, choices=BLOCK_TYPE_CHOICES, default=BlockType.BLOCK.value)
    reason = models.CharField(max_length=BLOCK_REASON_MAX, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["guild", "user_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["persona", "user_id", "type"],
                condition=Q(persona__isnull=False),
                name="block_unique_per_persona",
            ),
            models.UniqueConstraint(
                fields=["guild", "user_id", "type"],
                condition=Q(persona__isnull=True),
                name="block_unique_guild_wide",
            ),
            models.CheckConstraint(
                condition=Q(type__in=[kind.value for kind in BlockType]), name="block_type_valid"
            ),
            _at_most("reason", BLOCK_REASON_MAX, "block_reason_length"),
        ]

    def __str__(self) -> str:
        target = self.persona.name if self.persona_id else "all personas"
        return f"{self.type} {self.user_id} from {target}"

    def clean(self) -> None:
        if self.persona_id and self.guild_id and self.persona.guild_id != self.guild_id:
            raise ValidationError({"persona": "belongs to another guild"})


class UserPrivacy(models.Model):
    """A Discord user's privacy level and blacklist flag in one guild.

    The level is the user's own choice for that guild; ``full`` means the user never appears in
    its prompts, previews, turn records or memories; ``partial``: seen in conversation, but
    nothing about them is remembered or retrieved. In direct messages (no guild) the strictest
    level the user holds in any guild applies, and a blacklist in any guild holds there too.
    ``set_by`` says who set the level last (an admin, or the user with ``/privacy``), at
    ``updated_at``.
    """

    user_id = models.PositiveBigIntegerField()
    level = models.CharField(
        max_length=8, choices=PRIVACY_LEVEL_CHOICES, default=PrivacyLevel.MINIMAL.value
    )
    blacklisted = models.BooleanField(default=False)
    guild = models.ForeignKey(GuildConfig, on_delete=models.CASCADE, related_name="users")
    set_by = models.CharField(
        max_length=8, choices=PrivacySource.choices, default=PrivacySource.ADMIN
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "user privacy"
        verbose_name_plural = "user privacy"
        ordering = ["guild_id", "user_id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(level__in=[level.value for level in PrivacyLevel]),
                name="privacy_level_valid",
            ),
            models.UniqueConstraint(fields=["guild", "user_id"], name="privacy_one_per_guild_user"),
        ]
        indexes = [models.Index(fields=["user_id"], name="privacy_user")]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.level}{' (blacklisted)' if self.blacklisted else ''}"


class ConfigVersion(models.Model):
    """A stamp per guild drawn anew in the transaction of every change of what a channel's
    configuration carries (`personas.config_version`): the guild's settings, channels,
    personas and blocks. Key `DM_VERSION_KEY` (no guild has id 0) moves with every persona
    change of any guild, since the persona that answers DMs may be any guild's. A worker keeps
    a channel's configuration while the stamps it was read at are still current: one
    primary-key read per pass. Random, not a counter: a rolled-back change followed by another
    never repeats a value a process may have read inside the rolled-back transaction."""

    guild_id = models.PositiveBigIntegerField(primary_key=True)
    stamp = models.UUIDField(default=uuid.uuid4)

    def __str__(self) -> str:
        return f"configuration of {self.guild_id} at {self.stamp}"


class ChangeKind(models.TextChoices):
    """How a configuration change was made."""

    DASHBOARD = "dashboard", "dashboard form"
    UPLOAD = "upload", "upload"
    IMPORTCONFIG = "importconfig", "importconfig"
    COMMAND = "command", "slash command"
    GREETING = "greeting", "greeting"


class ConfigChange(models.Model):
    """The audit trail: one change of one guild's configuration (a row created, updated or
    deleted, a greeting posted, a channel reset), who made it and how, and what changed, field
    by field (``changes``: ``[{"field", "before", "after"}]``, values as JSON; a long value is
    cut at `AUDIT_VALUE_MAX` characters).

    Who: ``actor`` (a dashboard account: a staff user or a person logged in with Discord),
    ``actor_discord_id`` (their Discord user id, or a slash command's caller), ``actor_name``
    (the name shown when neither says more, e.g. the shell user of ``importconfig``).
    ``actor_key`` groups one person's changes for the audit page's filter. ``via`` says more of
    how: the uploaded file's name, the command (``/privacy``), the form.
    """

    guild_id = models.PositiveBigIntegerField()
    kind = models.CharField(max_length=12, choices=ChangeKind.choices)
    action = models.CharField(max_length=8)
    object_type = models.CharField(max_length=12)
    object_pk = models.CharField(max_length=40, blank=True)
    object_label = models.CharField(max_length=200)
    changes = models.JSONField(default=list, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    actor_discord_id = models.PositiveBigIntegerField(null=True, blank=True)
    actor_name = models.CharField(max_length=150)
    actor_key = models.CharField(max_length=64)
    via = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(kind__in=ChangeKind.values), name="config_change_kind_valid"
            ),
        ]
        indexes = [
            models.Index(fields=["guild_id", "-created_at", "-id"], name="config_change_recent"),
            models.Index(fields=["object_type", "object_pk"], name="config_change_object"),
        ]

    def __str__(self) -> str:
        return f"{self.actor_name} {self.action} {self.object_type} {self.object_label}"


AUDIT_VALUE_MAX = 20_000
"""Characters of one before or after value the audit trail keeps (a lorebook can be larger)."""


class ModelPrice(models.Model):
    """One row of the operator's price table (the configuration file's ``prices``): what a
    model costs in US dollars per million tokens, prompt tokens read from the provider's cache
    priced apart (``cached_input``; null: at ``input``'s price). A call to a model without a
    row costs what its provider reports, else an unknown amount (never zero)."""

    model = models.CharField(max_length=MODEL_NAME_MAX, unique=True)
    input = models.DecimalField(max_digits=12, decimal_places=USD_DECIMAL_PLACES)
    cached_input = models.DecimalField(
        max_digits=12, decimal_places=USD_DECIMAL_PLACES, null=True, blank=True
    )
    output = models.DecimalField(max_digits=12, decimal_places=USD_DECIMAL_PLACES)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model"]
        constraints = [
            models.CheckConstraint(
                condition=Q(input__gte=0)
                & Q(input__lte=PRICE_PER_MILLION_MAX)
                & Q(output__gte=0)
                & Q(output__lte=PRICE_PER_MILLION_MAX)
                & (
                    Q(cached_input__isnull=True)
                    | (Q(cached_input__gte=0) & Q(cached_input__lte=PRICE_PER_MILLION_MAX))
                ),
                name="model_price_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model}: {self.input}/{self.cached_input}/{self.output} USD per million"


# A persona's test cases live in their own module; imported here so that Django registers them.
from personas.models_cases import PersonaTestCase  # noqa: E402, F401
