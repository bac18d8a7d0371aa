"""Where each key of the configuration file lives in the database: one declaration per row.

A row of the file (``personas[]``, ``channels[]``, …; `personas.config_schema` validates it)
and a model instance are two spellings of the same settings. Each `Setting` pairs a key's JSON
path in the row (``llm.temperature``) with the model column holding it (``temperature``) and,
where the two differ, how a value crosses over. Import (`personas.services`), export
(`personas.selectors`) and the dashboard's forms all go through these tables, so a key is
declared once; `personas/tests/test_config_fields.py` fails when a key of the schema or a
column of a model is in no table.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import models
from pydantic import BaseModel

_MISSING = object()


def _same(value: Any) -> Any:
    return value


def _copy_list(value: Any) -> Any:
    return list(value)


def _none_as_empty(value: Any) -> Any:
    return value or ""


def _empty_as_none(value: Any) -> Any:
    return value or None


def _as_int(value: Any) -> Any:
    return int(value)


def _as_str(value: Any) -> Any:
    return str(value)


def _iso_or_none(value: dt.datetime | None) -> str | None:
    return value.isoformat() if value else None


def _dumped_rows(rows: Any) -> Any:
    return [row.model_dump() for row in rows]


def _fallback_models(fallbacks: Any) -> Any:
    """Fallback models as stored: a bare name, or an object naming its API (and its own
    context window, written only when it has one)."""
    return [f if isinstance(f, str) else _fallback_object(f) for f in fallbacks]


def _fallback_object(fallback: BaseModel) -> dict[str, Any]:
    stored = fallback.model_dump(mode="json")
    if stored.get("context_window") is None:
        stored.pop("context_window", None)
    return stored


def _name_or_dumped(value: str | BaseModel | None) -> Any:
    """A built-in's name as it is; an object (an imported preset) with every field written."""
    return value if value is None or isinstance(value, str) else value.model_dump(mode="json")


def _dumped_json(value: BaseModel | None) -> Any:
    """An object stored whole in a JSON column, every default written out (None: none)."""
    return None if value is None else value.model_dump(mode="json")


@dataclass(frozen=True)
class Setting:
    """One key of a configuration row and the column that holds it.

    ``path`` is the key's JSON path in the row (dots for nested objects). ``to_column`` turns
    the validated row's value into the column's (None: the save service resolves it itself,
    e.g. a block's persona name); ``to_json`` turns the column's value into the file's.
    ``default`` is the value when the row leaves out an object on the path (a ``null``
    ``context_note`` stores an empty note at depth 4). An object stored whole in one JSON
    column (a lorebook) is one setting.
    """

    path: str
    column: str
    to_column: Callable[[Any], Any] | None = _same
    to_json: Callable[[Any], Any] = _same
    default: Any = _MISSING


def _moderation(value: Any) -> Any:
    """A guild's moderation as stored and written: ``"on"``, ``"off"``, or its categories
    (sorted, once each; none listed is ``"on"``)."""
    if isinstance(value, list):
        return sorted(set(value)) or "on"
    return value


def _note(prefix: str = "") -> tuple[Setting, Setting]:
    return (
        Setting("context_note.text", f"{prefix}context_note", default=""),
        Setting("context_note.depth", f"{prefix}context_note_depth", default=4),
    )


GUILD_SETTINGS: tuple[Setting, ...] = (
    Setting("id", "guild_id", to_column=_as_int, to_json=_as_str),
    Setting("name", "name"),
    Setting("timezone", "timezone"),
    Setting("message_fetch_limit", "message_fetch_limit"),
    *_note(),
    Setting("lorebook", "lorebook", to_column=_dumped_json),
    Setting("planner_model", "planner_model", to_column=_none_as_empty, to_json=_empty_as_none),
    Setting("chat_preset", "chat_preset", to_column=_dumped_json),
    Setting("moderation", "moderation", to_column=_moderation, to_json=_moderation),
    Setting("moderation_input", "moderation_input"),
    Setting("limits", "limits", to_column=_dumped_json),
)
"""A guild's own settings (its personas, channels, blocks and users have tables of their own)."""

PERSONA_SETTINGS: tuple[Setting, ...] = (
    Setting("name", "name"),
    Setting("main", "is_main"),
    Setting("answers_dms", "answers_dms"),
    Setting("enabled", "enabled"),
    Setting("avatar_url", "avatar_url", to_column=_none_as_empty, to_json=_empty_as_none),
    Setting("system_prompt", "system_prompt"),
    Setting("triggers", "triggers", to_column=_copy_list, to_json=_copy_list),
    *_note(),
    Setting("prefill", "prefill"),
    Setting("deliberate_tool_mode", "deliberate_tool_mode"),
    Setting("tools_enabled", "tools_enabled"),
    Setting("short_term_memory.refresh_every", "short_term_memory_refresh_every"),
    Setting("short_term_memory.depth", "short_term_memory_depth"),
    Setting("force_lowercase", "force_lowercase"),
    Setting("punctuation_splits", "punctuation_splits"),
    Setting("delivery_mode", "delivery_mode", to_column=_as_str),
    Setting("sample_dialogue", "sample_dialogue", to_column=_dumped_rows, to_json=_copy_list),
    Setting("first_mes", "first_mes"),
    Setting("alternate_greetings", "alternate_greetings", to_column=_copy_list, to_json=_copy_list),
    Setting("llm.model", "llm_model", to_column=_none_as_empty, to_json=_empty_as_none),
    Setting("llm.temperature", "temperature"),
    Setting("llm.max_output_tokens", "max_output_tokens"),
    Setting("llm.context_window", "context_window"),
    Setting(
        "llm.fallback_models", "fallback_models", to_column=_fallback_models, to_json=_copy_list
    ),
    Setting("llm.api", "llm_api"),
    Setting("llm.instruct_template", "instruct_template", to_column=_name_or_dumped),
    Setting("llm.vision", "llm_vision"),
    Setting("llm.prefill", "llm_prefill"),
    Setting("llm.merge_same_role", "llm_merge_same_role"),
    Setting("llm.reasoning_in_think_tags", "reasoning_in_think_tags"),
    Setting("llm.verbatim_tool_nudge", "verbatim_tool_nudge"),
    Setting("lorebook", "lorebook", to_column=_dumped_json),
    Setting("chat_preset", "chat_preset", to_column=_dumped_json),
    Setting("limits", "limits", to_column=_dumped_json),
)

CHANNEL_SETTINGS: tuple[Setting, ...] = (
    Setting("id", "channel_id", to_column=_as_int, to_json=_as_str),
    Setting("mode", "mode"),
    Setting("enabled", "enabled"),
    Setting("message_fetch_limit", "message_fetch_limit"),
    *_note(),
)

BLOCK_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "persona",
        "persona",
        to_column=None,
        to_json=lambda persona: persona.name if persona else None,
    ),
    Setting("user_id", "user_id", to_column=_as_int, to_json=_as_str),
    Setting("type", "type"),
    Setting("reason", "reason"),
    Setting("expires_at", "expires_at", to_json=_iso_or_none),
)

USER_SETTINGS: tuple[Setting, ...] = (
    Setting("id", "user_id", to_column=_as_int, to_json=_as_str),
    Setting("privacy", "level"),
    Setting("blacklisted", "blacklisted"),
)


def row_from_instance(settings: tuple[Setting, ...], instance: models.Model) -> dict[str, Any]:
    """The instance as a configuration row (nested objects built from the paths, keys in the
    declaration's order)."""
    row: dict[str, Any] = {}
    for setting in settings:
        path_set(row, setting.path, setting.to_json(getattr(instance, setting.column)))
    return row


def columns_from_spec(settings: tuple[Setting, ...], spec: BaseModel) -> dict[str, Any]:
    """The column values a validated row stores. Settings whose ``to_column`` is None are left
    to the caller."""
    values = {}
    for setting in settings:
        if setting.to_column is None:
            continue
        value = path_get(spec, setting.path, setting.default)
        if value is _MISSING:
            raise KeyError(f"the row has no {setting.path!r}")
        values[setting.column] = setting.to_column(value)
    return values


def path_get(row: Mapping[str, Any] | BaseModel, path: str, default: Any = None) -> Any:
    """The value at ``path`` (``llm.temperature``) of a row (a dict or a spec); ``default`` when
    a key on the way is missing or an object on the way is null (a null value at the end is
    returned as is)."""
    value: Any = row
    for key in path.split("."):
        if isinstance(value, BaseModel) and key in type(value).model_fields:
            value = getattr(value, key)
        elif isinstance(value, Mapping) and key in value:
            value = value[key]
        else:
            return default
    return value


def path_set(row: dict[str, Any], path: str, value: Any) -> None:
    """Set ``path`` in ``row``, making the objects on the way (a null one is replaced)."""
    *parents, last = path.split(".")
    for key in parents:
        if not isinstance(row.get(key), dict):
            row[key] = {}
        row = row[key]
    row[last] = value
