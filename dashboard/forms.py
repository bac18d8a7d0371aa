"""Dashboard forms: thin wrappers over the configuration file's schema.

A form edits one row of the configuration file (``personas[]``, ``channels[]``, …). Each form
field shows one key of the row (`dashboard.form_fields.Shown`: its JSON path and, where the
input's spelling differs, how a value crosses); the row's keys and the model columns holding
them are declared once, in `personas.config_fields`. Editing an existing row starts from that
row as the export writes it, so a key the form does not show is kept as it is. A form only turns
HTML inputs into the row ``importconfig`` would read (text to numbers, comma lists to lists,
empty to ``null``, the browser's ``\r\n`` line breaks to ``\n``); every rule (ranges, enums,
ids, time zones, cross-field checks) is the import's own: ``clean`` validates the row with
``personas.config_schema.parse_config_row`` and puts each problem on the field its JSON path
names. A valid form holds the row's pydantic spec in ``spec``, ready for the save service.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, ClassVar

from django import forms
from django.db import models

from chat.pipeline.types import BlockType, PrivacyLevel
from dashboard.form_fields import (
    GUILD_LIMIT_PARTS,
    PERSONA_LIMIT_PARTS,
    ChatPresetField,
    JSONObjectField,
    LimitsField,
    LorebookField,
    RepeatedTextarea,
    Shown,
    TextListField,
    comma_list,
    comma_listed,
    datetime_or_none,
    fallbacks_text,
    iso_or_none,
    json_or,
    moderation_setting,
    moderation_text,
    none_as_empty,
    optional_text,
    stripped_id,
    stripped_or_none,
    template_text,
    unchanged,
    unix_newlines,
)
from dashboard.names import Member, picked_user_id
from personas.config_fields import (
    BLOCK_SETTINGS,
    CHANNEL_SETTINGS,
    GUILD_SETTINGS,
    PERSONA_SETTINGS,
    USER_SETTINGS,
    Setting,
    path_get,
    path_set,
    row_from_instance,
)
from personas.config_schema import (
    ConfigError,
    RowCollection,
    parse_config_row,
)
from personas.models import (
    BLOCK_TYPE_CHOICES,
    PRIVACY_LEVEL_CHOICES,
    ChannelMode,
    DeliveryMode,
)

MEMBER_LIST_ID = "guild-members"
"""The id of the page's list of members a user field offers (`dashboard/_member_list.html`)."""


class SpecForm(forms.Form):
    """Base: subclasses say which collection they edit (``collection``), the row's declaration
    (``settings``), and which key each field shows (``shown``: field name → JSON path or
    `Shown`). ``instance``: the row being edited, whose keys the form does not show are kept."""

    collection: ClassVar[RowCollection | None] = None
    settings: ClassVar[tuple[Setting, ...]] = ()
    shown: ClassVar[dict[str, str | Shown]] = {}
    # Further JSON paths whose problems belong on a field (the longest matching prefix wins).
    error_fields: ClassVar[dict[str, str]] = {}

    def __init__(
        self,
        data: Any = None,
        *args: Any,
        instance: models.Model | None = None,
        persona_names: list[str] | None = None,
        **kwargs: Any,
    ):
        self.row: dict[str, Any] = (
            row_from_instance(self.settings, instance) if instance is not None else {}
        )
        if instance is not None and data is None:
            kwargs.setdefault("initial", self.initial_from(self.row))
        super().__init__(data, *args, **kwargs)
        self.persona_names = persona_names or []
        self.spec: Any = None

    @classmethod
    def _shown(cls) -> dict[str, Shown]:
        return {
            field: shown if isinstance(shown, Shown) else Shown(shown)
            for field, shown in cls.shown.items()
        }

    @classmethod
    def initial_from(cls, row: dict[str, Any]) -> dict[str, Any]:
        """The fields' initial values for a row as the export writes it."""
        return {
            field: shown.to_form(path_get(row, shown.path)) for field, shown in cls._shown().items()
        }

    @property
    def field_paths(self) -> dict[str, str]:
        """JSON path (relative to the row) → the field showing it."""
        return {**self.error_fields, **{s.path: f for f, s in self._shown().items()}}

    def to_row(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        """The edited row: the row as it was, with each shown key set from its field."""
        row = copy.deepcopy(self.row)
        for field, shown in self._shown().items():
            value = cleaned.get(field)
            if isinstance(value, str):
                value = unix_newlines(value)
            path_set(row, shown.path, shown.from_form(value))
        return row

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned  # an input that is not even a number: say that first
        try:
            self.spec = parse_config_row(
                self.collection, self.to_row(cleaned), persona_names=self.persona_names
            )
        except ConfigError as error:
            self.add_problems(error.problems)
        return cleaned

    def add_problems(self, problems: list[tuple[str, str]]) -> None:
        """Show (JSON path, message) problems on their fields, the rest above the form."""
        for path, message in problems:
            field = self.field_for(path)
            if field is None:
                self.add_error(None, f"{path}: {message}" if path != "(row)" else message)
            elif isinstance(self.fields[field], JSONObjectField | LimitsField) and path != field:
                self.add_error(field, f"{path}: {message}")  # where, inside the JSON
            else:
                self.add_error(field, message)

    def field_for(self, path: str) -> str | None:
        paths = self.field_paths
        matches = [
            key
            for key in paths
            if path == key or path.startswith(key + ".") or path.startswith(key + "[")
        ]
        return paths[max(matches, key=len)] if matches else None


class GuildForm(SpecForm):
    collection = None
    settings = GUILD_SETTINGS
    shown = {
        "guild_id": stripped_id("id"),
        "name": "name",
        "timezone": stripped_id("timezone"),
        "message_fetch_limit": "message_fetch_limit",
        "note_text": "context_note.text",
        "note_depth": "context_note.depth",
        "lorebook": "lorebook",
        "planner_model": optional_text("planner_model"),
        "chat_preset": "chat_preset",
        "moderation": Shown("moderation", moderation_text, moderation_setting),
        "moderation_input": "moderation_input",
        "limits": "limits",
    }
    error_fields = {"context_note": "note_text"}

    guild_id = forms.CharField(label="Discord server id", required=False)
    name = forms.CharField(required=False)
    timezone = forms.CharField(required=False, help_text="An IANA name, e.g. Europe/Paris")
    message_fetch_limit = forms.IntegerField(
        label="Message fetch limit", help_text="Messages of history per prompt (20–100)"
    )
    note_text = forms.CharField(
        label="Guild note",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="Used where neither the persona nor the channel has a note",
    )
    note_depth = forms.IntegerField(label="Guild note depth", help_text="Messages from the end")
    lorebook = LorebookField(label="Guild lorebook (JSON)", help_text="Shared by every persona")
    planner_model = forms.CharField(
        label="Planner model",
        required=False,
        help_text="Decides who speaks in autonomous channels; empty: the deployment's "
        "LLM_PLANNER_MODEL, else the main persona's model",
    )
    chat_preset = ChatPresetField(help_text="For every persona without its own")
    moderation = forms.CharField(
        label="Reply moderation",
        required=False,
        help_text="on (default), off, or the categories allowed in every channel, e.g. "
        "violence, harassment (never sexual/minors); NSFW channels also allow sexual, "
        "violence and violence/graphic. Only with a moderation service (MODERATION_BASE_URL)",
    )
    moderation_input = forms.BooleanField(
        label="Check triggering messages",
        required=False,
        help_text="A message moderation flags is not answered and never shown to a model",
    )
    limits = LimitsField(
        parts=GUILD_LIMIT_PARTS,
        label="Spend and rate limits",
        help_text="Counted in the guild's time zone; docs/spend.md",
    )


class PersonaForm(SpecForm):
    """A persona, as in the file's ``personas[]``. Sample dialogue rows come as repeated
    ``sample_role`` / ``sample_content`` inputs; rows with empty content are dropped. Alternate
    greetings come as one box each (`TextListField`)."""

    collection = "personas"
    settings = PERSONA_SETTINGS
    shown = {
        "name": "name",
        "main": "main",
        "answers_dms": "answers_dms",
        "enabled": "enabled",
        "avatar_url": optional_text("avatar_url"),
        "system_prompt": "system_prompt",
        "triggers": comma_listed("triggers"),
        "note_text": "context_note.text",
        "note_depth": "context_note.depth",
        "prefill": "prefill",
        "first_mes": "first_mes",
        "alternate_greetings": "alternate_greetings",
        "deliberate_tool_mode": "deliberate_tool_mode",
        "tools_enabled": "tools_enabled",
        "short_term_memory_refresh_every": "short_term_memory.refresh_every",
        "short_term_memory_depth": "short_term_memory.depth",
        "force_lowercase": "force_lowercase",
        "punctuation_splits": "punctuation_splits",
        "delivery_mode": Shown(
            "delivery_mode", unchanged, lambda mode: mode or DeliveryMode.PARAGRAPHS
        ),
        "llm_model": optional_text("llm.model"),
        "temperature": "llm.temperature",
        "max_output_tokens": "llm.max_output_tokens",
        "context_window": "llm.context_window",
        "fallback_models": Shown("llm.fallback_models", fallbacks_text),
        "llm_api": Shown("llm.api", unchanged, lambda api: api or "chat"),
        "instruct_template": Shown("llm.instruct_template", template_text),
        "llm_vision": "llm.vision",
        "llm_prefill": "llm.prefill",
        "llm_merge_same_role": "llm.merge_same_role",
        "reasoning_in_think_tags": "llm.reasoning_in_think_tags",
        "verbatim_tool_nudge": "llm.verbatim_tool_nudge",
        "lorebook": "lorebook",
        "chat_preset": "chat_preset",
        "limits": "limits",
    }
    error_fields = {"context_note": "note_text", "sample_dialogue": "sample_dialogue"}

    name = forms.CharField(required=False)
    main = forms.BooleanField(
        label="Main persona", required=False, help_text="Speaks through the bot account"
    )
    answers_dms = forms.BooleanField(
        label="Answers DMs",
        required=False,
        help_text="Direct messages to the bot get this persona (one in the deployment; none: "
        "DMs go unanswered); people it blocked in this server are blocked there too",
    )
    enabled = forms.BooleanField(required=False, initial=True)
    avatar_url = forms.CharField(
        label="Avatar URL",
        required=False,
        widget=forms.URLInput,
        help_text="Shown on webhook replies (http or https)",
    )
    system_prompt = forms.CharField(
        label="System prompt",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 10}),
        help_text=(
            "{char} is this persona, {bot} the bot account's, {user} whoever the turn answers "
            "(SillyTavern's {{char}}, {{user}}, <BOT>, <USER> mean the same). "
            "A prompt that says {user} changes whenever someone else speaks, so the model "
            "provider cannot reuse its cached prompt; the context note can name them instead"
        ),
    )
    triggers = forms.CharField(
        label="Trigger words",
        required=False,
        help_text="Comma-separated; a whole word in any case makes the persona answer",
    )
    note_text = forms.CharField(
        label="Context note", required=False, strip=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    note_depth = forms.IntegerField(label="Context note depth", initial=4)
    prefill = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="How the reply starts",
    )
    first_mes = forms.CharField(
        label="First message",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="A character card's greeting (kept for the card's export)",
    )
    alternate_greetings = TextListField(
        label="Alternate greetings",
        widget=RepeatedTextarea(item_label="Alternate greeting"),
        help_text="The card's other greetings, one per box; fill the empty box to add one, "
        "empty a box to remove its greeting",
    )
    deliberate_tool_mode = forms.BooleanField(
        label="Tools (Deliberate Tool Mode)", required=False, initial=True
    )
    tools_enabled = forms.BooleanField(
        label="Tools offered at all",
        required=False,
        initial=True,
        help_text="Off: the persona is never offered a tool (memory upkeep included)",
    )
    short_term_memory_refresh_every = forms.IntegerField(
        label="Short-term memory: refresh every",
        initial=5,
        help_text="Of the persona's replies",
    )
    short_term_memory_depth = forms.IntegerField(
        label="Short-term memory: depth",
        required=False,
        help_text="Empty: in the system prompt; a number: at that depth in the dialogue",
    )
    force_lowercase = forms.BooleanField(label="Force lowercase", required=False)
    punctuation_splits = forms.BooleanField(label="Split replies at punctuation", required=False)
    delivery_mode = forms.ChoiceField(
        label="Delivery",
        choices=DeliveryMode.choices,
        initial=DeliveryMode.PARAGRAPHS,
        required=False,
        help_text="How replies reach Discord while the model writes them",
    )
    llm_model = forms.CharField(
        label="Model", required=False, help_text="Empty: the deployment's LLM_MODEL"
    )
    temperature = forms.FloatField(initial=0.7)
    max_output_tokens = forms.IntegerField(label="Max output tokens", initial=512)
    context_window = forms.IntegerField(label="Context window (tokens)", initial=16000)
    fallback_models = forms.CharField(
        label="Fallback models",
        required=False,
        help_text='Comma-separated, tried in order; or JSON, e.g. [{"model": "m", "api": '
        '"completions", "instruct_template": "llama3"}]',
    )
    llm_api = forms.ChoiceField(
        label="Model API",
        choices=[
            ("chat", "Chat Completions"),
            ("completions", "Text completion (POST /completions)"),
        ],
        initial="chat",
        required=False,
    )
    instruct_template = forms.CharField(
        label="Instruct template",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false"}),
        help_text="Text completion: chatml, llama3, mistral or alpaca, or a SillyTavern "
        "instruct preset (its JSON); empty: chatml",
    )
    llm_vision = forms.NullBooleanField(
        label="Model takes images",
        required=False,
        widget=forms.NullBooleanSelect,
        help_text="Unknown: decided by the model's name",
    )
    llm_prefill = forms.NullBooleanField(
        label="Model continues a prefill",
        required=False,
        widget=forms.NullBooleanSelect,
        help_text="Unknown: decided by the model's name",
    )
    llm_merge_same_role = forms.NullBooleanField(
        label="Merge messages of one role",
        required=False,
        widget=forms.NullBooleanSelect,
        help_text="Unknown: decided by the model's name",
    )
    reasoning_in_think_tags = forms.BooleanField(
        label="Ask for reasoning in <think> tags", required=False
    )
    verbatim_tool_nudge = forms.BooleanField(
        label="Remind the model to call tools verbatim", required=False
    )
    lorebook = LorebookField()
    chat_preset = ChatPresetField()
    limits = LimitsField(
        parts=PERSONA_LIMIT_PARTS,
        label="The persona's own budget",
        help_text="Counted besides the guild's; empty: only the guild's",
    )

    def clean_fallback_models(self) -> Any:
        text = self.cleaned_data["fallback_models"]
        return json_or(text, comma_list(text))

    def clean_instruct_template(self) -> Any:
        text = self.cleaned_data["instruct_template"].strip()
        return json_or(text, text or None)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if self.is_bound:
            roles = self.data.getlist("sample_role")
            contents = self.data.getlist("sample_content")
            self.sample_rows = [
                {"role": role, "content": unix_newlines(content)}
                for role, content in zip(roles, contents, strict=False)
                if content.strip()
            ]
        else:
            self.sample_rows = list(path_get(self.row, "sample_dialogue") or [])
        self.sample_errors: dict[int, list[str]] = {}

    def add_problems(self, problems: list[tuple[str, str]]) -> None:
        """Sample dialogue problems go on their row (``sample_dialogue[2].role``)."""
        rest = []
        for path, message in problems:
            if path.startswith("sample_dialogue["):
                index = int(path[len("sample_dialogue[") : path.index("]")])
                self.sample_errors.setdefault(index, []).append(message)
                self.add_error(None, f"Sample dialogue row {index + 1}: {message}")
            else:
                rest.append((path, message))
        super().add_problems(rest)

    def to_row(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        row = super().to_row(cleaned)
        row["sample_dialogue"] = self.sample_rows
        return row


class ChannelForm(SpecForm):
    collection = "channels"
    settings = CHANNEL_SETTINGS
    shown = {
        "channel_id": stripped_id("id"),
        "mode": "mode",
        "enabled": "enabled",
        "message_fetch_limit": "message_fetch_limit",
        "note_text": "context_note.text",
        "note_depth": "context_note.depth",
    }
    error_fields = {"context_note": "note_text"}

    channel_id = forms.CharField(label="Discord channel id", required=False)
    mode = forms.ChoiceField(choices=ChannelMode.choices, initial=ChannelMode.REACTIVE)
    enabled = forms.BooleanField(required=False, initial=True)
    message_fetch_limit = forms.IntegerField(
        label="Message fetch limit", required=False, help_text="Empty: the guild's limit"
    )
    note_text = forms.CharField(
        label="Channel note", required=False, strip=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    note_depth = forms.IntegerField(label="Channel note depth", initial=4)


class BlockForm(SpecForm):
    collection = "blocks"
    settings = BLOCK_SETTINGS
    shown = {
        "persona": Shown("persona", none_as_empty, stripped_or_none),
        "user_id": stripped_id("user_id"),
        "type": "type",
        "reason": "reason",
        "expires_at": Shown("expires_at", datetime_or_none, iso_or_none),
    }
    error_fields = {"(row)": "user_id"}

    persona = forms.ChoiceField(label="Persona", required=False)
    user_id = forms.CharField(
        label="User",
        required=False,
        widget=forms.TextInput(attrs={"list": MEMBER_LIST_ID, "autocomplete": "off"}),
        help_text="Pick a member by name, or give a Discord user id",
    )
    type = forms.ChoiceField(choices=BLOCK_TYPE_CHOICES, initial=BlockType.BLOCK)
    reason = forms.CharField(required=False, strip=False)
    expires_at = forms.DateTimeField(
        label="Expires (UTC)",
        required=False,
        widget=forms.DateTimeInput(
            attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"
        ),
        help_text="Empty: never",
    )

    def __init__(self, *args: Any, members: Sequence[Member] = (), **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.members = members
        self.fields["persona"].choices = [("", "All personas")] + [
            (name, name) for name in self.persona_names
        ]

    def clean_user_id(self) -> str:
        """The user as an id: typed as one, or picked (or typed) by name among ``members``."""
        try:
            user_id = picked_user_id(self.cleaned_data["user_id"], self.members)
        except ValueError as problem:
            raise forms.ValidationError(str(problem)) from None
        return "" if user_id is None else str(user_id)


class UserPrivacyForm(SpecForm):
    collection = "users"
    settings = USER_SETTINGS
    shown = {"user_id": stripped_id("id"), "privacy": "privacy", "blacklisted": "blacklisted"}

    user_id = forms.CharField(label="Discord user id", required=False)
    privacy = forms.ChoiceField(choices=PRIVACY_LEVEL_CHOICES, initial=PrivacyLevel.MINIMAL)
    blacklisted = forms.BooleanField(required=False)


class ConfigUploadForm(forms.Form):
    """A configuration file; `personas.config_schema.parse_config_bytes` reads it, as it reads
    ``importconfig``'s (size, encoding, JSON, then the schema)."""

    file = forms.FileField(label="Configuration file (JSON)")
    prune = forms.BooleanField(
        required=False,
        label="Also delete rows of these guilds that the file does not list",
    )


class CardUploadForm(forms.Form):
    """A SillyTavern character card (JSON or PNG, at most ``MAX_BYTES``)."""

    MAX_BYTES = 5 * 1024 * 1024

    file = forms.FileField(label="Character card (PNG or JSON)")

    def clean_file(self):
        upload = self.cleaned_data["file"]
        if upload.size > self.MAX_BYTES:
            raise forms.ValidationError(
                f"The file is {upload.size:,} bytes; a card may be at most "
                f"{self.MAX_BYTES:,} bytes (5 MB)."
            )
        return upload
