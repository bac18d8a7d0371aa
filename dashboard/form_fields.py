"""How a dashboard form field shows one key of a configuration row (`dashboard.forms`):
`Shown` pairs the key's JSON path with how a value crosses between the row and the field, the
crossings below spell the usual ones (comma lists, optional texts, ids, timestamps, JSON),
`JSONObjectField` edits a setting stored as a JSON object and `TextListField` a list of texts
that may span lines (a card's alternate greetings)."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe


def unchanged(value: Any) -> Any:
    return value


def comma_list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def comma_text(values: list[str] | None) -> str:
    return ", ".join(values or [])


def stripped_or_none(text: str) -> str | None:
    return text.strip() or None


def none_as_empty(value: Any) -> Any:
    return "" if value is None else value


def stripped(text: str) -> str:
    return text.strip()


def iso_or_none(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def datetime_or_none(value: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value) if value else None


def unix_newlines(text: str) -> str:
    """Text with ``\n`` line breaks, whatever the browser sent (``\r\n``, ``\r``)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


@dataclass(frozen=True)
class Shown:
    """A form field showing the row's key at ``path``: ``to_form`` turns the row's value into
    the field's initial value, ``from_form`` the field's cleaned value into the row's."""

    path: str
    to_form: Callable[[Any], Any] = unchanged
    from_form: Callable[[Any], Any] = unchanged


def comma_listed(path: str) -> Shown:
    return Shown(path, comma_text, comma_list)


def optional_text(path: str) -> Shown:
    return Shown(path, none_as_empty, stripped_or_none)


def stripped_id(path: str) -> Shown:
    return Shown(path, unchanged, stripped)


def moderation_text(setting: Any) -> str:
    """A guild's moderation as the form shows it: ``on``, ``off``, or its categories as a
    comma list."""
    return ", ".join(setting) if isinstance(setting, list) else str(setting or "on")


def moderation_setting(text: str) -> Any:
    """The form's moderation text as the file writes it: ``on`` (also when empty), ``off``, or
    a list of the categories it names."""
    word = text.strip().lower()
    if word in ("", "on", "off"):
        return word or "on"
    return comma_list(text)


def json_value(text: str) -> Any:
    """The JSON value ``text`` writes. Raises ``ValidationError`` naming the line."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        message = f"is not valid JSON: {error.msg} (line {error.lineno})"
        raise forms.ValidationError(message) from None


def json_or(text: str, plain: Any) -> Any:
    """``text`` read as JSON when it is written as a JSON list or object, else ``plain``."""
    stripped = text.strip()
    return json_value(stripped) if stripped[:1] in ("[", "{") else plain


def fallbacks_text(fallbacks: list) -> str:
    """Fallback models as the form shows them: a comma list of names, or JSON when one of
    them names its API (``{"model", "api", "instruct_template"}``)."""
    if all(isinstance(fallback, str) for fallback in fallbacks):
        return ", ".join(fallbacks)
    return json.dumps(fallbacks, ensure_ascii=False)


def template_text(template: Any) -> str:
    """An instruct template as the form shows it: a built-in's name, or a preset as JSON."""
    if isinstance(template, dict):
        return json.dumps(template, indent=1, ensure_ascii=False)
    return template or ""


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
        return json_value(text) if text else None

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


class RepeatedTextarea(forms.Widget):
    """One textarea for each text of a list, then an empty one for a new text; the browser
    posts them all under the field's name, in order. ``item_label`` names one text for
    screen readers (``Alternate greeting 2``)."""

    def __init__(
        self, attrs: dict[str, Any] | None = None, *, rows: int = 3, item_label: str = "Text"
    ) -> None:
        super().__init__(attrs)
        self.rows = rows
        self.item_label = item_label

    def format_value(self, value: Any) -> list[str]:
        """The texts to show (a bound form's posted boxes include the empty one: left out)."""
        texts = [value] if isinstance(value, str) else list(value or [])
        return [str(text) for text in texts if str(text).strip()]

    def value_from_datadict(self, data: Any, files: Any, name: str) -> list[str]:
        return data.getlist(name) if hasattr(data, "getlist") else list(data.get(name) or [])

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return name not in data

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> str:
        first_id = {**self.attrs, **(attrs or {})}.get("id") or f"id_{name}"
        texts = self.format_value(value)
        labels = [f"{self.item_label} {i + 1}" for i in range(len(texts))] + [
            f"A new {self.item_label.lower()}"
        ]
        boxes = [
            (name, first_id if i == 0 else f"{first_id}_{i}", self.rows, label, text)
            for i, (label, text) in enumerate(zip(labels, [*texts, ""], strict=True))
        ]
        # HTML drops the newline right after the start tag, so a text's own leading newline
        # survives (as in Django's Textarea).
        return format_html(
            '<div class="repeated-texts">{}</div>',
            format_html_join(
                "",
                '<textarea name="{}" id="{}" rows="{}" aria-label="{}">\n{}</textarea>',
                boxes,
            ),
        )


class TextListField(forms.Field):
    """A list of texts, each in its own box (`RepeatedTextarea`): empty boxes are dropped, and
    line breaks are ``\n`` whatever the browser sent; otherwise each text is kept as typed."""

    widget = RepeatedTextarea

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)

    def to_python(self, value: Any) -> list[str]:
        texts = [value] if isinstance(value, str) else list(value or [])
        return [unix_newlines(text) for text in texts if text.strip()]


@dataclass(frozen=True)
class LimitPart:
    """One input of a `LimitsField`: the key it fills (``user_turns.count`` for a nested one),
    its label and its input type (``number`` or ``text``; ``textarea`` for the notice)."""

    key: str
    label: str
    kind: str = "number"
    help: str = ""


GUILD_LIMIT_PARTS = (
    LimitPart("tokens_per_day", "Tokens a day", help="Prompt and reply tokens; empty: no limit"),
    LimitPart("usd_per_month", "US dollars a month", "text", "e.g. 25.00; empty: no limit"),
    LimitPart("user_turns.count", "Triggers per user", help="empty: no limit"),
    LimitPart("user_turns.per_seconds", "… every (seconds)"),
    LimitPart("notice", "Notice when the budget is spent", "textarea", "empty: the default text"),
)
PERSONA_LIMIT_PARTS = GUILD_LIMIT_PARTS[:2]


class LimitInputs(dict):
    """A `LimitsField`'s inputs by part key; as text (a moderator's read-only view), one line
    per input that holds a value, or an empty string when none does."""

    def __init__(self, values: dict[str, Any], parts: tuple[LimitPart, ...]) -> None:
        super().__init__(values)
        self.parts = parts

    def __str__(self) -> str:
        return "\n".join(
            f"{part.label}: {self[part.key]}"
            for part in self.parts
            if self.get(part.key) not in (None, "")
        )


class LimitsWidget(forms.Widget):
    """A `LimitsField`'s inputs, one labelled input per `LimitPart`, posted as
    ``<name>_<key>``."""

    def __init__(self, parts: tuple[LimitPart, ...], attrs: dict[str, Any] | None = None) -> None:
        super().__init__(attrs)
        self.parts = parts

    def _input_name(self, name: str, part: LimitPart) -> str:
        return f"{name}_{part.key.replace('.', '_')}"

    def value_from_datadict(self, data: Any, files: Any, name: str) -> LimitInputs:
        return LimitInputs(
            {part.key: data.get(self._input_name(name, part), "") for part in self.parts},
            self.parts,
        )

    def value_omitted_from_data(self, data: Any, files: Any, name: str) -> bool:
        return not any(self._input_name(name, part) in data for part in self.parts)

    def render(
        self, name: str, value: Any, attrs: dict[str, Any] | None = None, renderer: Any = None
    ) -> str:
        first_id = {**self.attrs, **(attrs or {})}.get("id") or f"id_{name}"
        values = value if isinstance(value, dict) else {}
        rows = []
        for index, part in enumerate(self.parts):
            input_id = first_id if index == 0 else f"{first_id}_{part.key.replace('.', '_')}"
            text = "" if values.get(part.key) is None else str(values[part.key])
            input_name = self._input_name(name, part)
            if part.kind == "textarea":
                control = format_html(
                    '<textarea name="{}" id="{}" rows="2">\n{}</textarea>',
                    input_name,
                    input_id,
                    text,
                )
            else:
                control = format_html(
                    '<input type="{}" name="{}" id="{}" value="{}"{}>',
                    part.kind,
                    input_name,
                    input_id,
                    text,
                    mark_safe(' min="0" step="1"') if part.kind == "number" else "",
                )
            rows.append(
                format_html(
                    '<label for="{}">{}</label>{}{}',
                    input_id,
                    part.label,
                    control,
                    format_html(' <small class="muted">{}</small>', part.help) if part.help else "",
                )
            )
        return format_html(
            '<div class="limit-inputs">{}</div>',
            format_html_join("", "<div>{}</div>", ((row,) for row in rows)),
        )


def limits_inputs(limits: dict[str, Any] | None, parts: tuple[LimitPart, ...]) -> LimitInputs:
    """A stored limits object as a `LimitsField`'s inputs (by part key)."""
    limits = limits or {}
    values = {}
    for part in parts:
        value: Any = limits
        for key in part.key.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        values[part.key] = value
    return LimitInputs(values, parts)


class LimitsField(forms.Field):
    """A limits object (the configuration file's ``limits``) as labelled inputs. Numbers that
    are whole are sent on as integers and anything else as typed, so the schema's rules (and
    their messages) decide; every input empty: no limits (null)."""

    def __init__(self, *, parts: tuple[LimitPart, ...], **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        self.parts = parts
        super().__init__(widget=LimitsWidget(parts), **kwargs)

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, LimitInputs):
            return value  # a bound form shows what was posted
        return limits_inputs(value, self.parts)

    def to_python(self, value: Any) -> dict[str, Any] | None:
        typed = value if isinstance(value, dict) else {}
        texts = {part.key: unix_newlines(str(typed.get(part.key) or "")) for part in self.parts}
        if not any(text.strip() for text in texts.values()):
            return None
        limits: dict[str, Any] = {}
        for part in self.parts:
            text = texts[part.key]
            if part.kind == "textarea":
                entry: Any = text
            elif not text.strip():
                entry = None
            elif part.kind == "number" and text.strip().lstrip("-").isdigit():
                entry = int(text.strip())
            else:
                entry = text.strip()
            parent, _, key = part.key.rpartition(".")
            if parent:
                limits.setdefault(parent, {})[key] = entry
            else:
                limits[key] = entry
        turns = limits.get("user_turns")
        if isinstance(turns, dict):
            turns = {k: v for k, v in turns.items() if v is not None}
            limits["user_turns"] = turns or None
        return limits
