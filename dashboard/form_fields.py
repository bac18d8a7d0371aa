"""How a dashboard form field shows one key of a configuration row (`dashboard.forms`):
`Shown` pairs the key's JSON path with how a value crosses between the row and the field, the
crossings below spell the usual ones (comma lists, optional texts, ids, timestamps, JSON), and
`JSONObjectField` edits a setting stored as a JSON object."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django import forms


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
