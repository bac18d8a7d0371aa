"""The worker's kept channel configurations: answered from memory while the configuration's
stamps stand, read anew after any change of what they carry, whichever way it was written."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.db.models.signals import post_delete, post_save
from django.test.utils import CaptureQueriesContext

from chat import selectors
from chat.selectors import ChannelConfiguration
from chat.services.configuration_cache import ChannelConfigurations
from personas.config_schema import parse_config_row
from personas.config_version import CONFIGURATION_MODELS, config_versions
from personas.models import Block, ChannelConfig, GuildConfig, Persona
from personas.services import (
    block_save,
    channel_save,
    config_import,
    config_row_delete,
    guild_save,
    persona_save,
)

pytestmark = pytest.mark.django_db

FIXTURE = Path(__file__).parents[3] / "personas" / "tests" / "fixtures" / "config.json"
GUILD = 1100000000000000001
POETRY = 1200000000000000001
OTHER_GUILD = 1100000000000000009
DM = 1400000000000000001
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def document() -> dict:
    return json.loads(FIXTURE.read_text())


@pytest.fixture
def guild() -> GuildConfig:
    config_import(data=document())
    return GuildConfig.objects.get(guild_id=GUILD)


@pytest.fixture
def other_guild() -> GuildConfig:
    return guild_save(spec=parse_config_row(None, {"id": str(OTHER_GUILD), "name": "Other"}))


def row(instance: object) -> dict:
    fields = instance._meta.concrete_fields  # type: ignore[attr-defined]
    return {f.attname: getattr(instance, f.attname) for f in fields}


def snapshot(configuration: ChannelConfiguration | None) -> object:
    """Everything a configuration carries, compared by value (rows compare by key alone)."""
    if configuration is None:
        return None
    settings = configuration.settings
    return (
        {**vars(settings), "guild": row(settings.guild) if settings.guild else None},
        [(row(p), row(p.guild)) for p in configuration.personas],
        configuration.blocks,
        configuration.read_at,
    )


def read_both(cache: ChannelConfigurations, channel_id: int, guild_id: int | None):
    kept = cache(channel_id=channel_id, guild_id=guild_id, now=NOW)
    fresh = selectors.channel_configuration(channel_id=channel_id, guild_id=guild_id, now=NOW)
    return snapshot(kept), snapshot(fresh)


def persona_row(persona: str, **changes) -> dict:
    [found] = [p for p in document()["guilds"][0]["personas"] if p["name"] == persona]
    return {**found, **changes}


def test_a_second_read_is_one_statement_and_the_same_configuration(guild):
    cache = ChannelConfigurations()
    first = cache(channel_id=POETRY, guild_id=GUILD, now=NOW)
    with CaptureQueriesContext(connection) as queries:
        second = cache(channel_id=POETRY, guild_id=GUILD, now=NOW)
    assert len(queries) == 1
    assert cache.reads == 1
    assert snapshot(second) == snapshot(first) == read_both(cache, POETRY, GUILD)[1]
    assert [p.name for p in second.personas] == ["Tomori", "Anon"]


def test_unconfigured_guilds_are_kept_too_until_the_guild_is_configured(guild):
    cache = ChannelConfigurations()
    assert cache(channel_id=5, guild_id=OTHER_GUILD, now=NOW) is None
    assert cache(channel_id=5, guild_id=OTHER_GUILD, now=NOW) is None
    assert cache.reads == 1
    guild_save(spec=parse_config_row(None, {"id": str(OTHER_GUILD), "name": "Other"}))
    assert cache(channel_id=5, guild_id=OTHER_GUILD, now=NOW).guild_id == OTHER_GUILD


def _admin_deletes_blocks(guild: GuildConfig) -> None:
    """The admin's bulk "delete selected" action: a queryset delete."""
    admin = User.objects.create_superuser("root", password="pw")
    from django.test import Client

    client = Client()
    client.force_login(admin)
    response = client.post(
        "/admin/personas/block/",
        {
            "action": "delete_selected",
            "_selected_action": [b.pk for b in Block.objects.filter(guild=guild)],
            "post": "yes",
        },
    )
    assert response.status_code == 302
    assert not Block.objects.filter(guild=guild).exists()


def _import_changed(guild: GuildConfig) -> None:
    data = document()
    data["guilds"][0]["personas"][1]["system_prompt"] = "You are Anon, quiet today."
    data["guilds"][0]["channels"][0]["mode"] = "autonomous"
    config_import(data=data)


CHANGES: dict[str, Callable[[GuildConfig], object]] = {
    "guild settings": lambda guild: guild_save(
        spec=parse_config_row(
            None,
            {"id": str(GUILD), "name": "Hoshimi", "timezone": "UTC", "planner_model": "p"},
        )
    ),
    "channel mode": lambda guild: channel_save(
        guild=guild, spec=parse_config_row("channels", {"id": str(POETRY), "mode": "autonomous"})
    ),
    "channel note": lambda guild: channel_save(
        guild=guild,
        spec=parse_config_row(
            "channels", {"id": str(POETRY), "context_note": {"text": "Prose", "depth": 2}}
        ),
    ),
    "persona prompt": lambda guild: persona_save(
        guild=guild,
        spec=parse_config_row("personas", persona_row("Anon", system_prompt="Whisper.")),
        persona=Persona.objects.get(name="Anon"),
    ),
    "persona disabled": lambda guild: persona_save(
        guild=guild,
        spec=parse_config_row("personas", persona_row("Anon", enabled=False)),
        persona=Persona.objects.get(name="Anon"),
    ),
    "persona renamed": lambda guild: persona_save(
        guild=guild,
        spec=parse_config_row("personas", persona_row("Anon", name="Soyo")),
        persona=Persona.objects.get(name="Anon"),
    ),
    "persona added": lambda guild: persona_save(
        guild=guild, spec=parse_config_row("personas", {"name": "Rana", "triggers": ["rana"]})
    ),
    "persona deleted": lambda guild: config_row_delete(
        instance=Persona.objects.get(name="Anon"), actor=None
    ),
    "block added": lambda guild: block_save(
        guild=guild,
        spec=parse_config_row(
            "blocks", {"persona": None, "user_id": "77", "type": "mute"}, persona_names=[]
        ),
    ),
    "block expiry changed": lambda guild: block_save(
        guild=guild,
        spec=parse_config_row(
            "blocks",
            {"persona": "Tomori", "user_id": "1300000000000000001", "expires_at": NOW.isoformat()},
            persona_names=["Tomori"],
        ),
        block=Block.objects.get(type="block"),
    ),
    "block removed": lambda guild: config_row_delete(
        instance=Block.objects.get(type="block"), actor=None
    ),
    "admin deletes blocks": _admin_deletes_blocks,
    "configuration imported": _import_changed,
    "guild deleted": lambda guild: guild.delete(),
}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_every_change_of_the_configuration_is_read_at_the_next_read(guild, change):
    cache = ChannelConfigurations()
    before, _ = read_both(cache, POETRY, GUILD)
    CHANGES[change](guild)
    after, fresh = read_both(cache, POETRY, GUILD)
    assert after != before
    assert after == fresh
    assert cache.reads == 2


def test_a_block_that_lapses_stops_applying_without_a_write(guild):
    block_save(
        guild=guild,
        spec=parse_config_row(
            "blocks",
            {"persona": None, "user_id": "88", "expires_at": (NOW + dt.timedelta(minutes=1))},
            persona_names=[],
        ),
    )
    cache = ChannelConfigurations()
    blocked = cache(channel_id=POETRY, guild_id=GUILD, now=NOW)
    assert {b.persona_name for b in blocked.blocks if b.user_id == 88} == {"Tomori", "Anon"}
    later = NOW + dt.timedelta(minutes=2)
    with CaptureQueriesContext(connection) as queries:
        lapsed = cache(channel_id=POETRY, guild_id=GUILD, now=later)
    assert len(queries) == 1
    assert cache.reads == 1
    assert not [b for b in lapsed.blocks if b.user_id == 88]
    fresh = selectors.channel_configuration(channel_id=POETRY, guild_id=GUILD, now=later)
    assert lapsed.blocks == fresh.blocks
    assert lapsed.read_at == later


def _choose_dm_persona(guild: GuildConfig, name: str) -> None:
    persona = Persona.objects.get(guild=guild, name=name)
    spec = parse_config_row("personas", {**row_spec(persona), "answers_dms": True})
    persona_save(guild=guild, spec=spec, persona=persona)


def row_spec(persona: Persona) -> dict:
    return {"name": persona.name, "triggers": persona.triggers, "main": persona.is_main}


def test_dms_follow_the_dm_persona_from_any_guild_and_its_guilds_blocks(guild, other_guild):
    cache = ChannelConfigurations()
    assert cache(channel_id=DM, guild_id=None, now=NOW).personas == ()
    _choose_dm_persona(guild, "Tomori")  # a persona of another guild than any read before
    kept, fresh = read_both(cache, DM, None)
    assert kept == fresh
    assert [p["name"] for p, _ in kept[1]] == ["Tomori"]
    assert cache(channel_id=DM, guild_id=None, now=NOW).blocks  # Tomori's guild's blocks
    reads = cache.reads
    cache(channel_id=DM, guild_id=None, now=NOW)
    assert cache.reads == reads

    config_row_delete(instance=Block.objects.get(type="block"), actor=None)  # its guild's
    kept, fresh = read_both(cache, DM, None)
    assert kept == fresh
    assert not [b for b in cache(channel_id=DM, guild_id=None, now=NOW).blocks if b.type == "block"]

    guild_save(spec=parse_config_row(None, {"id": str(GUILD), "name": "Renamed"}))
    kept, fresh = read_both(cache, DM, None)
    assert kept == fresh
    assert kept[1][0][1]["name"] == "Renamed"

    persona_save(guild=other_guild, spec=parse_config_row("personas", {"name": "Taki"}))
    _choose_dm_persona(other_guild, "Taki")  # the role moves to another guild's persona
    kept, fresh = read_both(cache, DM, None)
    assert kept == fresh
    assert [p["name"] for p, _ in kept[1]] == ["Taki"]
    assert cache(channel_id=DM, guild_id=None, now=NOW).blocks == ()


def test_only_the_least_recently_read_channels_beyond_the_bound_are_dropped(guild):
    cache = ChannelConfigurations(capacity=2)
    cache(channel_id=1, guild_id=GUILD, now=NOW)
    cache(channel_id=2, guild_id=GUILD, now=NOW)
    cache(channel_id=1, guild_id=GUILD, now=NOW)  # 2 is now the least recently read
    cache(channel_id=3, guild_id=GUILD, now=NOW)
    assert len(cache) == 2
    assert cache.reads == 3
    cache(channel_id=1, guild_id=GUILD, now=NOW)
    assert cache.reads == 3
    cache(channel_id=2, guild_id=GUILD, now=NOW)
    assert cache.reads == 4


def test_a_change_committed_while_the_configuration_is_read_is_read_next_time(guild):
    """The stamps are read before the rows they cover."""
    changed = False

    def stamps_then_a_change(keys: set[int]) -> dict[int, str]:
        nonlocal changed
        stamps = config_versions(keys)
        if not changed:
            changed = True
            CHANGES["persona prompt"](guild)
        return stamps

    cache = ChannelConfigurations(read_stamps=stamps_then_a_change)
    cache(channel_id=POETRY, guild_id=GUILD, now=NOW)
    kept, fresh = read_both(cache, POETRY, GUILD)
    assert kept == fresh
    assert cache.reads == 2


def test_every_row_a_configuration_reads_moves_a_stamp_when_written(guild):
    """A new read in `configured_channel` (another table) must be covered by the stamps."""
    _choose_dm_persona(guild, "Tomori")
    read = set()
    for channel_id, guild_id in ((POETRY, GUILD), (DM, None), (5, 99)):
        with CaptureQueriesContext(connection) as queries:
            selectors.configured_channel(channel_id=channel_id, guild_id=guild_id)
        for query in queries:
            read |= {t for t in connection.introspection.table_names() if f'"{t}"' in query["sql"]}
    covered = {model._meta.db_table for model in CONFIGURATION_MODELS}
    assert read == covered
    for model in CONFIGURATION_MODELS:
        assert post_save.has_listeners(model) and post_delete.has_listeners(model)
        uids = {key[0] for key, *_ in post_save.receivers + post_delete.receivers}
        name = model._meta.model_name
        assert {f"config_version_save_{name}", f"config_version_del_{name}"} <= uids


def test_moving_a_row_to_another_guild_moves_both_guilds_stamps(guild, other_guild):
    channel = ChannelConfig.objects.get(channel_id=POETRY)
    before = config_versions({GUILD, OTHER_GUILD})
    channel.guild = other_guild
    channel.save()
    after = config_versions({GUILD, OTHER_GUILD})
    assert all(after[key] != before[key] for key in before)


def test_the_workers_runtime_reads_configurations_through_a_kept_cache(guild):
    from chat.pipeline.tokens import default_token_counter
    from chat.runtime import TurnCapabilities, gateway_runtime

    runtime = gateway_runtime(
        port=None,  # type: ignore[arg-type]
        windows=None,  # type: ignore[arg-type]
        runner=None,  # type: ignore[arg-type]
        capabilities=TurnCapabilities(token_counter=default_token_counter()),
    )
    assert isinstance(runtime.configurations, ChannelConfigurations)
    runtime.configurations(channel_id=POETRY, guild_id=GUILD, now=NOW)
    runtime.configurations(channel_id=POETRY, guild_id=GUILD, now=NOW)
    assert runtime.configurations.reads == 1


def test_configuration_a_data_migration_wrote_without_signals_is_read_after_migrate(guild):
    cache = ChannelConfigurations()
    before = cache(channel_id=POETRY, guild_id=GUILD, now=NOW)
    unconfigured = cache(channel_id=5, guild_id=OTHER_GUILD, now=NOW)
    # What a data migration does: writes that send no signal and move no stamp.
    Persona.objects.filter(guild=guild, name="Anon").update(enabled=False)
    GuildConfig.objects.bulk_create([GuildConfig(guild_id=OTHER_GUILD, name="Other")])
    stale = cache(channel_id=POETRY, guild_id=GUILD, now=NOW)
    assert snapshot(stale) == snapshot(before)  # no stamp moved: what was kept is answered

    call_command("migrate", verbosity=0)

    assert read_both(cache, POETRY, GUILD)[0] == read_both(cache, POETRY, GUILD)[1]
    assert [p.name for p in before.personas] == ["Tomori", "Anon"]
    assert [p.name for p in cache(channel_id=POETRY, guild_id=GUILD, now=NOW).personas] == [
        "Tomori"
    ]
    assert unconfigured is None
    assert cache(channel_id=5, guild_id=OTHER_GUILD, now=NOW) is not None
