"""The declaration of where each configuration key lives covers the schema and the models, so
a new key or column cannot be forgotten by import, export or the dashboard's forms."""

from __future__ import annotations

import types
import typing

import pytest
from django.db import models
from pydantic import BaseModel

from personas.config_fields import (
    BLOCK_SETTINGS,
    CHANNEL_SETTINGS,
    GUILD_SETTINGS,
    PERSONA_SETTINGS,
    USER_SETTINGS,
    Setting,
    path_get,
    path_set,
)
from personas.config_schema import BlockSpec, ChannelSpec, GuildSpec, PersonaSpec, UserSpec
from personas.models import Block, ChannelConfig, GuildConfig, Persona, UserPrivacy

ROW_COLLECTIONS = {"personas", "channels", "blocks", "users"}
PERSONA_COLLECTIONS = {"tests"}
"""A persona's test cases: rows of their own table (`personas.models_cases`), not columns."""
STORED_WHOLE = {"lorebook", "chat_preset", "limits"}
"""Objects kept whole in one JSON column."""
NOT_SETTINGS = {"id", "guild", "created_at", "updated_at", "set_by"}
"""Columns that are no key of a row: the primary key, the owning guild, timestamps, who set a
user's privacy (the user or an admin)."""

TABLES = [
    pytest.param(GuildSpec, GuildConfig, GUILD_SETTINGS, id="guild"),
    pytest.param(PersonaSpec, Persona, PERSONA_SETTINGS, id="persona"),
    pytest.param(ChannelSpec, ChannelConfig, CHANNEL_SETTINGS, id="channel"),
    pytest.param(BlockSpec, Block, BLOCK_SETTINGS, id="block"),
    pytest.param(UserSpec, UserPrivacy, USER_SETTINGS, id="user"),
]


def _nested_model(annotation: object) -> type[BaseModel] | None:
    """The row object a field holds (``ContextNoteSpec | None`` → ContextNoteSpec)."""
    candidates = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
    for candidate in (annotation, *candidates):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def leaf_paths(spec: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key of a row, objects walked into: ``llm.temperature``, ``context_note.depth``."""
    paths = set()
    for name, field in spec.model_fields.items():
        if not prefix and spec is GuildSpec and name in ROW_COLLECTIONS:
            continue
        if not prefix and spec is PersonaSpec and name in PERSONA_COLLECTIONS:
            continue
        nested = None if name in STORED_WHOLE else _nested_model(field.annotation)
        path = f"{prefix}{name}"
        paths |= leaf_paths(nested, path + ".") if nested else {path}
    return paths


@pytest.mark.parametrize(("spec", "model", "settings"), TABLES)
def test_every_key_of_the_row_is_declared_once(spec, model, settings: tuple[Setting, ...]):
    declared = [setting.path for setting in settings]

    assert sorted(declared) == sorted(leaf_paths(spec))
    assert len(set(declared)) == len(declared)


@pytest.mark.parametrize(("spec", "model", "settings"), TABLES)
def test_every_column_of_the_model_is_declared_once(spec, model, settings: tuple[Setting, ...]):
    columns = {
        field.name
        for field in model._meta.get_fields()
        if field.concrete and not field.auto_created and field.name not in NOT_SETTINGS
    }
    declared = [setting.column for setting in settings]

    assert sorted(declared) == sorted(columns)
    assert isinstance(model._meta.get_field(declared[0]), models.Field)


def test_paths_read_and_write_nested_objects():
    row: dict = {"context_note": None}
    path_set(row, "context_note.depth", 2)
    path_set(row, "llm.model", None)

    assert row == {"context_note": {"depth": 2}, "llm": {"model": None}}
    assert path_get(row, "llm.model", "default") is None
    assert path_get({"context_note": None}, "context_note.text", "") == ""
    assert path_get({}, "llm.temperature", 0.7) == 0.7
