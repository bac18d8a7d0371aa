"""Dashboard forms: thin wrappers over the configuration file's schema.

A form only turns HTML inputs into the JSON row ``importconfig`` would read (text to numbers,
comma lists to lists, empty to ``null``); every rule (ranges, enums, ids, time zones,
cross-field checks) is the import's own: ``clean`` validates the row with
``personas.config_schema.parse_config_row`` and puts each problem on the field its JSON path
names. A valid form holds the row's pydantic spec in ``spec``, ready for the save service.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any, ClassVar

from django import forms

from personas.config_schema import (
    ConfigError,
    RowCollection,
    parse_config_row,
)
from personas.models import (
    Block,
    BlockType,
    ChannelConfig,
    ChannelMode,
    DeliveryMode,
    GuildConfig,
    Persona,
    PrivacyLevel,
)


def _comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _json_or(text: str, plain: Any) -> Any:
    """``text`` read as JSON when it is written as a JSON list or object, else ``plain``."""
    stripped = text.strip()
    if stripped[:1] in ("[", "{"):
        try:
            return json.loads(stripped)
        except json.JSONDecodeError as error:
            message = f"is not valid JSON: {error.msg} (line {error.lineno})"
            raise forms.ValidationError(message) from None
    return plain


def _fallbacks_text(fallbacks: list) -> str:
    """Fallback models as the form shows them: a comma list of names, or JSON when one of
    them names its API (``{"model", "api", "instruct_template"}``)."""
    if all(isinstance(fallback, str) for fallback in fallbacks):
        return ", ".join(fallbacks)
    return json.dumps(fallbacks, ensure_ascii=False)


class JSONObjectField(forms.CharField):
    """A setting stored as a JSON object (a lorebook, a SillyTavern preset), as JSON text;
    empty: none. Only JSON syntax is checked here: the schema checks the rest and names the
    path of each problem."""

    widget = forms.Textarea(attrs={"rows": 6, "spellcheck": "false"})

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(strip=True, **kwargs)

    def to_python(self, value: Any) -> Any:
        text = super().to_python(value)
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as error:
            message = f"is not valid JSON: {error.msg} (line {error.lineno})"
            raise forms.ValidationError(message) from None

    def prepare_value(self, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        return json.dumps(value, indent=1, ensure_ascii=False)


class LorebookField(JSONObjectField):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("label", "Lorebook (JSON)")
        kwargs.setdefault("help_text", "docs/lorebooks.md; empty: none")
        super().__init__(**kwargs)


class ChatPresetField(JSONObjectField):
    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("label", "SillyTavern Chat Completion preset (JSON)")
        kwargs.setdefault(
            "help_text", "Paste the exported preset; docs/presets.md; empty: this product's order"
        )
        super().__init__(**kwargs)


class SpecForm(forms.Form):
    """Base: subclasses say which collection they edit, how fields map to JSON paths, and how
    cleaned inputs become a row (``to_row``)."""

    collection: ClassVar[RowCollection | None] = None
    # JSON path (relative to the row) → form field; the longest matching prefix wins.
    field_paths: ClassVar[dict[str, str]] = {}

    def __init__(self, *args: Any, persona_names: list[str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.persona_names = persona_names or []
        self.spec: Any = None

    def to_row(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

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
            elif isinstance(self.fields[field], JSONObjectField) and path != field:
                self.add_error(field, f"{path}: {message}")  # where, inside the JSON
            else:
                self.add_error(field, message)

    def field_for(self, path: str) -> str | None:
        matches = [
            key
            for key in self.field_paths
            if path == key or path.startswith(key + ".") or path.startswith(key + "[")
        ]
        return self.field_paths[max(matches, key=len)] if matches else None


class GuildForm(SpecForm):
    collection = None
    field_paths = {
        "id": "guild_id",
        "name": "name",
        "timezone": "timezone",
        "message_fetch_limit": "message_fetch_limit",
        "context_note.text": "note_text",
        "context_note.depth": "note_depth",
        "context_note": "note_text",
        "lorebook": "lorebook",
        "planner_model": "planner_model",
        "chat_preset": "chat_preset",
    }

    guild_id = forms.CharField(label="Discord server id", required=False)
    name = forms.CharField(required=False)
    timezone = forms.CharField(required=False, help_text="An IANA name, e.g. Europe/Paris")
    message_fetch_limit = forms.IntegerField(
        label="Message fetch limit", help_text="Messages of history per prompt (20–100)"
    )
    note_text = forms.CharField(
        label="Guild note",
        required=False,
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

    @classmethod
    def initial_for(cls, guild: GuildConfig) -> dict[str, Any]:
        return {
            "lorebook": guild.lorebook,
            "planner_model": guild.planner_model,
            "chat_preset": guild.chat_preset,
            "guild_id": str(guild.guild_id),
            "name": guild.name,
            "timezone": guild.timezone,
            "message_fetch_limit": guild.message_fetch_limit,
            "note_text": guild.context_note,
            "note_depth": guild.context_note_depth,
        }

    def to_row(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": cleaned["guild_id"].strip(),
            "name": cleaned["name"],
            "timezone": cleaned["timezone"].strip(),
            "message_fetch_limit": cleaned["message_fetch_limit"],
            "context_note": {"text": cleaned["note_text"], "depth": cleaned["note_depth"]},
            "lorebook": cleaned["lorebook"],
            "planner_model": cleaned["planner_model"].strip() or None,
            "chat_preset": cleaned["chat_preset"],
        }


class PersonaForm(SpecForm):
    """A persona, as in the file's ``personas[]``. Sample dialogue rows come as repeated
    ``sample_role`` / ``sample_content`` inputs; rows with empty content are dropped."""

    collection = "personas"
    field_paths = {
        "name": "name",
        "main": "main",
        "answers_dms": "answers_dms",
        "enabled": "enabled",
        "avatar_url": "avatar_url",
        "system_prompt": "system_prompt",
        "triggers": "triggers",
        "context_note": "note_text",
        "context_note.depth": "note_depth",
        "prefill": "prefill",
        "deliberate_tool_mode": "deliberate_tool_mode",
        "force_lowercase": "force_lowercase",
        "punctuation_splits": "punctuation_splits",
        "delivery_mode": "delivery_mode",
        "llm.model": "llm_model",
        "llm.temperature": "temperature",
        "llm.max_output_tokens": "max_output_tokens",
        "llm.context_window": "context_window",
        "llm.fallback_models": "fallback_models",
        "llm.api": "llm_api",
        "llm.instruct_template": "instruct_template",
        "llm.vision": "llm_vision",
        "llm.prefill": "llm_prefill",
        "llm.merge_same_role": "llm_merge_same_role",
        "llm.reasoning_in_think_tags": "reasoning_in_think_tags",
        "llm.verbatim_tool_nudge": "verbatim_tool_nudge",
        "sample_dialogue": "sample_dialogue",
        "lorebook": "lorebook",
        "chat_preset": "chat_preset",
    }

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
        widget=forms.Textarea(attrs={"rows": 10}),
        help_text=(
            "{char} is this persona, {bot} the bot account's, {user} whoever the turn answers. "
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
        label="Context note", required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    note_depth = forms.IntegerField(label="Context note depth", initial=4)
    prefill = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="How the reply starts",
    )
    deliberate_tool_mode = forms.BooleanField(
        label="Tools (Deliberate Tool Mode)", required=False, initial=True
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

    def clean_fallback_models(self) -> Any:
        text = self.cleaned_data["fallback_models"]
        return _json_or(text, _comma_list(text))

    def clean_instruct_template(self) -> Any:
        text = self.cleaned_data["instruct_template"].strip()
        return _json_or(text, text or None)

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if self.is_bound:
            roles = self.data.getlist("sample_role")
            contents = self.data.getlist("sample_content")
            self.sample_rows = [
                {"role": role, "content": content}
                for role, content in zip(roles, contents, strict=False)
                if content.strip()
            ]
        else:
            self.sample_rows = list(self.initial.get("sample_dialogue", []))
        self.sample_errors: dict[int, list[str]] = {}

    @classmethod
    def initial_for(cls, persona: Persona) -> dict[str, Any]:
        return {
            "name": persona.name,
            "main": persona.is_main,
            "answers_dms": persona.answers_dms,
            "enabled": persona.enabled,
            "avatar_url": persona.avatar_url,
            "system_prompt": persona.system_prompt,
            "triggers": ", ".join(persona.triggers),
            "note_text": persona.context_note,
            "note_depth": persona.context_note_depth,
            "prefill": persona.prefill,
            "deliberate_tool_mode": persona.deliberate_tool_mode,
            "force_lowercase": persona.force_lowercase,
            "punctuation_splits": persona.punctuation_splits,
            "delivery_mode": persona.delivery_mode,
            "llm_model": persona.llm_model,
            "temperature": persona.temperature,
            "max_output_tokens": persona.max_output_tokens,
            "context_window": persona.context_window,
            "fallback_models": _fallbacks_text(persona.fallback_models),
            "llm_api": persona.llm_api,
            "instruct_template": (
                json.dumps(persona.instruct_template, indent=1, ensure_ascii=False)
                if isinstance(persona.instruct_template, dict)
                else persona.instruct_template or ""
            ),
            "llm_vision": persona.llm_vision,
            "llm_prefill": persona.llm_prefill,
            "llm_merge_same_role": persona.llm_merge_same_role,
            "reasoning_in_think_tags": persona.reasoning_in_think_tags,
            "verbatim_tool_nudge": persona.verbatim_tool_nudge,
            "sample_dialogue": list(persona.sample_dialogue),
            "lorebook": persona.lorebook,
            "chat_preset": persona.chat_preset,
        }

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
        return {
            "name": cleaned["name"],
            "main": cleaned["main"],
            "answers_dms": cleaned["answers_dms"],
            "enabled": cleaned["enabled"],
            "avatar_url": cleaned["avatar_url"].strip() or None,
            "system_prompt": cleaned["system_prompt"],
            "triggers": _comma_list(cleaned["triggers"]),
            "context_note": {"text": cleaned["note_text"], "depth": cleaned["note_depth"]},
            "prefill": cleaned["prefill"],
            "deliberate_tool_mode": cleaned["deliberate_tool_mode"],
            "force_lowercase": cleaned["force_lowercase"],
            "punctuation_splits": cleaned["punctuation_splits"],
            "delivery_mode": cleaned["delivery_mode"] or DeliveryMode.PARAGRAPHS,
            "sample_dialogue": self.sample_rows,
            "llm": {
                "model": cleaned["llm_model"].strip() or None,
                "temperature": cleaned["temperature"],
                "max_output_tokens": cleaned["max_output_tokens"],
                "context_window": cleaned["context_window"],
                "fallback_models": cleaned["fallback_models"],
                "api": cleaned["llm_api"] or "chat",
                "instruct_template": cleaned["instruct_template"],
                "vision": cleaned["llm_vision"],
                "prefill": cleaned["llm_prefill"],
                "merge_same_role": cleaned["llm_merge_same_role"],
                "reasoning_in_think_tags": cleaned["reasoning_in_think_tags"],
                "verbatim_tool_nudge": cleaned["verbatim_tool_nudge"],
            },
            "lorebook": cleaned["lorebook"],
            "chat_preset": cleaned["chat_preset"],
        }


class ChannelForm(SpecForm):
    collection = "channels"
    field_paths = {
        "id": "channel_id",
        "mode": "mode",
        "enabled": "enabled",
        "message_fetch_limit": "message_fetch_limit",
        "context_note": "note_text",
        "context_note.depth": "note_depth",
    }

    channel_id = forms.CharField(label="Discord channel id", required=False)
    mode = forms.ChoiceField(choices=ChannelMode.choices, initial=ChannelMode.REACTIVE)
    enabled = forms.BooleanField(required=False, initial=True)
    message_fetch_limit = forms.IntegerField(
        label="Message fetch limit", required=False, help_text="Empty: the guild's limit"
    )
    note_text = forms.CharField(
        label="Channel note", required=False, widget=forms.Textarea(attrs={"rows": 2})
    )
    note_depth = forms.IntegerField(label="Channel note depth", initial=4)

    @classmethod
    def initial_for(cls, channel: ChannelConfig) -> dict[str, Any]:
        return {
            "channel_id": str(channel.channel_id),
            "mode": channel.mode,
            "enabled": channel.enabled,
            "message_fetch_limit": channel.message_fetch_limit,
            "note_text": channel.context_note,
            "note_depth": channel.context_note_depth,
        }

    def to_row(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": cleaned["channel_id"].strip(),
            "mode": cleaned["mode"],
            "enabled": cleaned["enabled"],
            "message_fetch_limit": cleaned["message_fetch_limit"],
            "context_note": {"text": cleaned["note_text"], "depth": cleaned["note_depth"]},
        }


class BlockForm(SpecForm):
    collection = "blocks"
    field_paths = {
        "persona": "persona",
        "user_id": "user_id",
        "type": "type",
        "reason": "reason",
        "expires_at": "expires_at",
        "(row)": "user_id",
    }

    persona = forms.ChoiceField(label="Persona", required=False)
    user_id = forms.CharField(label="Discord user id", required=False)
    type = forms.ChoiceField(choices=BlockType.choices, initial=BlockType.BLOCK)
    reason = forms.CharField(required=False)
    expires_at = forms.DateTimeField(
        label="Expires (UTC)",
        required=False,
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M"),
        help_text="Empty: never",
    )

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fields["persona"].choices = [("", "All personas")] + [
            (name, name) for name in self.persona_names
        ]

    @classmethod
    def initial_for(cls, block: Block) -> dict[str, Any]:
        return {
            "persona": block.persona.name if block.persona else "",
            "user_id": str(block.user_id),
            "type": block.type,
            "reason": block.reason,
            "expires_at": block.expires_at,
        }

    def to_row(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        expires: dt.datetime | None = cleaned["expires_at"]
        return {
            "persona": cleaned["persona"] or None,
            "user_id": cleaned["user_id"].strip(),
            "type": cleaned["type"],
            "reason": cleaned["reason"],
            "expires_at": expires.isoformat() if expires else None,
        }


class UserPrivacyForm(SpecForm):
    collection = "users"
    field_paths = {"id": "user_id", "privacy": "privacy", "blacklisted": "blacklisted"}

    user_id = forms.CharField(label="Discord user id", required=False)
    privacy = forms.ChoiceField(choices=PrivacyLevel.choices, initial=PrivacyLevel.MINIMAL)
    blacklisted = forms.BooleanField(required=False)

    def to_row(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": cleaned["user_id"].strip(),
            "privacy": cleaned["privacy"],
            "blacklisted": cleaned["blacklisted"],
        }


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
