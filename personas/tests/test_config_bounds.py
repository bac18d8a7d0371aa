"""Configuration bounds: every limit is reported with its JSON path, the database holds the same
limits, and no input (size, nesting, numbers, NUL, database errors, concurrency) ends in a
traceback."""

from __future__ import annotations

import copy
import io
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import DataError, IntegrityError, connection, connections, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from personas import models as limits
from personas.config_schema import (
    CONFIG_FILE_MAX_BYTES,
    NESTING_MAX,
    PROBLEMS_SHOWN_MAX,
    ConfigError,
    parse_config_bytes,
    parse_config_document,
)
from personas.models import GuildConfig, Persona
from personas.services import CONFIG_IMPORT_LOCK_KEY, _serialise_imports, config_import

FIXTURE = Path(__file__).parent / "fixtures" / "config.json"


@pytest.fixture
def document() -> dict:
    return json.loads(FIXTURE.read_text())


def problems_of(data: object) -> dict[str, str]:
    """The problems ``parse_config_document`` reports, by path ({} when the document is valid)."""
    try:
        parse_config_document(data)
    except ConfigError as error:
        return dict(error.problems)
    return {}


def _set(document: dict, path: tuple, value: object) -> dict:
    changed = copy.deepcopy(document)
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return changed


def _personas(n: int) -> list[dict]:
    return [{"name": f"P{i}", "main": i == 0} for i in range(n)]


def _ids(n: int, **fields: object) -> list[dict]:
    return [{"id": str(1_000_000 + i), **fields} for i in range(n)]


def _blocks(n: int) -> list[dict]:
    return [{"persona": None, "user_id": str(1_000_000 + i)} for i in range(n)]


def _guilds(n: int) -> list[dict]:
    return [{"id": str(1_000_000 + i), "name": f"G{i}"} for i in range(n)]


P0 = ("guilds", 0, "personas", 0)
LLM = (*P0, "llm")

# (id, path, value at the limit, value one past it, path reported, words in the message)
BOUNDS = [
    ("guild-name", ("guilds", 0, "name"), "g" * 100, "g" * 101, "guilds[0].name", "at most 100"),
    (
        "timezone-length",
        ("guilds", 0, "timezone"),
        "UTC",
        "A" * 65,
        "guilds[0].timezone",
        "at most 64",
    ),
    (
        "guild-note",
        ("guilds", 0, "context_note", "text"),
        "n" * 4000,
        "n" * 4001,
        "guilds[0].context_note.text",
        "at most 4000",
    ),
    (
        "channel-note",
        ("guilds", 0, "channels", 0, "context_note", "text"),
        "n" * 4000,
        "n" * 4001,
        "guilds[0].channels[0].context_note.text",
        "at most 4000",
    ),
    (
        "note-depth",
        ("guilds", 0, "channels", 0, "context_note", "depth"),
        100,
        101,
        "guilds[0].channels[0].context_note.depth",
        "less than or equal to 100",
    ),
    (
        "fetch-limit-max",
        ("guilds", 0, "message_fetch_limit"),
        100,
        101,
        "guilds[0].message_fetch_limit",
        "less than or equal to 100",
    ),
    (
        "fetch-limit-min",
        ("guilds", 0, "channels", 1, "message_fetch_limit"),
        20,
        19,
        "guilds[0].channels[1].message_fetch_limit",
        "greater than or equal to 20",
    ),
    (
        "block-persona-name",
        ("guilds", 0, "blocks", 0, "persona"),
        None,
        "N" * 81,
        "guilds[0].blocks[0].persona",
        "at most 80",
    ),
    (
        "persona-name",
        (*P0, "name"),
        "N" * 80,
        "N" * 81,
        "guilds[0].personas[0].name",
        "at most 80",
    ),
    (
        "system-prompt",
        (*P0, "system_prompt"),
        "s" * 32_000,
        "s" * 32_001,
        "guilds[0].personas[0].system_prompt",
        "at most 32000",
    ),
    (
        "persona-note",
        (*P0, "context_note", "text"),
        "n" * 4000,
        "n" * 4001,
        "guilds[0].personas[0].context_note.text",
        "at most 4000",
    ),
    ("prefill", (*P0, "prefill"), "p" * 1000, "p" * 1001, "guilds[0].personas[0].prefill", "1000"),
    (
        "trigger-count",
        (*P0, "triggers"),
        [f"t{i}" for i in range(20)],
        [f"t{i}" for i in range(21)],
        "guilds[0].personas[0].triggers",
        "at most 20 items",
    ),
    (
        "trigger-length",
        (*P0, "triggers"),
        ["t" * 50],
        ["t" * 51],
        "guilds[0].personas[0].triggers[0]",
        "at most 50",
    ),
    (
        "sample-rows",
        (*P0, "sample_dialogue"),
        [{"role": "user", "content": "hi"}] * 50,
        [{"role": "user", "content": "hi"}] * 51,
        "guilds[0].personas[0].sample_dialogue",
        "at most 50 items",
    ),
    (
        "sample-content",
        (*P0, "sample_dialogue"),
        [{"role": "user", "content": "c" * 2000}],
        [{"role": "user", "content": "c" * 2001}],
        "guilds[0].personas[0].sample_dialogue[0].content",
        "at most 2000",
    ),
    (
        "avatar-url",
        (*P0, "avatar_url"),
        "https://a.example/" + "a" * 482,
        "https://a.example/" + "a" * 483,
        "guilds[0].personas[0].avatar_url",
        "at most 500",
    ),
    ("model-name", (*LLM, "model"), "m" * 200, "m" * 201, "guilds[0].personas[0].llm.model", "200"),
    (
        "fallback-count",
        (*LLM, "fallback_models"),
        ["m"] * 5,
        ["m"] * 6,
        "guilds[0].personas[0].llm.fallback_models",
        "at most 5 items",
    ),
    (
        "fallback-name",
        (*LLM, "fallback_models"),
        ["m" * 200],
        ["m" * 201],
        "guilds[0].personas[0].llm.fallback_models[0]",
        "at most 200",
    ),
    (
        "temperature-max",
        (*LLM, "temperature"),
        2.0,
        2.01,
        "guilds[0].personas[0].llm.temperature",
        "less than or equal to 2",
    ),
    (
        "temperature-min",
        (*LLM, "temperature"),
        0.0,
        -0.01,
        "guilds[0].personas[0].llm.temperature",
        "greater than or equal to 0",
    ),
    (
        "max-output-tokens",
        LLM,
        {"max_output_tokens": 32_768, "context_window": 40_000},
        {"max_output_tokens": 32_769, "context_window": 40_000},
        "guilds[0].personas[0].llm.max_output_tokens",
        "less than or equal to 32768",
    ),
    (
        "context-window",
        LLM,
        {"context_window": 2_000_000},
        {"context_window": 2_000_001},
        "guilds[0].personas[0].llm.context_window",
        "less than or equal to 2000000",
    ),
    (
        "block-reason",
        ("guilds", 0, "blocks", 1, "reason"),
        "r" * 500,
        "r" * 501,
        "guilds[0].blocks[1].reason",
        "at most 500",
    ),
    (
        "snowflake-length",
        ("guilds", 0, "users", 0, "id"),
        "1" * 19,
        "1" * 21,
        "guilds[0].users[0].id",
        "at most 20",
    ),
    (
        "personas-per-guild",
        ("guilds", 0, "personas"),
        _personas(25),
        _personas(26),
        "guilds[0].personas",
        "at most 25 items",
    ),
    (
        "channels-per-guild",
        ("guilds", 0, "channels"),
        _ids(500),
        _ids(501),
        "guilds[0].channels",
        "at most 500 items",
    ),
    (
        "blocks-per-guild",
        ("guilds", 0, "blocks"),
        _blocks(1000),
        _blocks(1001),
        "guilds[0].blocks",
        "at most 1000 items",
    ),
    (
        "users-per-guild",
        ("guilds", 0, "users"),
        _ids(1000),
        _ids(1001),
        "guilds[0].users",
        "at most 1000 items",
    ),
    ("guilds-per-file", ("guilds",), _guilds(100), _guilds(101), "guilds", "at most 100 items"),
]


def _prepared(document: dict, path: tuple, value: object) -> dict:
    """``document`` with ``value`` at ``path``; blocks naming a changed persona are dropped."""
    if path[:3] == ("guilds", 0, "personas"):
        document = _set(document, ("guilds", 0, "blocks"), [])
    return _set(document, path, value)


@pytest.mark.parametrize(
    ("path", "at_limit", "past_limit", "where", "words"),
    [pytest.param(*row[1:], id=row[0]) for row in BOUNDS],
)
def test_each_bound_accepts_its_limit_and_names_the_path_past_it(
    document, path, at_limit, past_limit, where, words
):
    assert problems_of(_prepared(document, path, at_limit)) == {}

    problems = problems_of(_prepared(document, path, past_limit))

    assert where in problems, problems
    assert words in problems[where]


@pytest.mark.django_db
def test_a_document_at_every_limit_is_stored_by_the_database(document):
    """The schema's limits are the database's: a persona at every field limit imports."""
    persona = document["guilds"][0]["personas"][1]
    persona.update(
        name="N" * 80,
        system_prompt="s" * 32_000,
        prefill="p" * 1000,
        context_note={"text": "n" * 4000, "depth": 100},
        triggers=["t" * 50] * 20,
        sample_dialogue=[{"role": "user", "content": "c" * 2000}] * 50,
        avatar_url="https://a.example/" + "a" * 482,
        llm={
            "model": "m" * 200,
            "temperature": 2.0,
            "max_output_tokens": 32_768,
            "context_window": 2_000_000,
            "fallback_models": ["m" * 200] * 5,
        },
    )
    document["guilds"][0]["blocks"][1].update(persona="N" * 80, reason="r" * 500)
    document["guilds"][0]["name"] = "g" * 100
    document["guilds"][0]["context_note"] = {"text": "n" * 4000, "depth": 100}

    config_import(data=document)

    stored = Persona.objects.get(name="N" * 80)
    assert len(stored.system_prompt) == 32_000 and stored.context_window == 2_000_000


TEXT_LIMITS = [
    pytest.param((*P0, "system_prompt"), limits.SYSTEM_PROMPT_MAX, id="system_prompt"),
    pytest.param((*P0, "prefill"), limits.PREFILL_MAX, id="prefill"),
    pytest.param((*P0, "context_note", "text"), limits.NOTE_TEXT_MAX, id="persona-note"),
    pytest.param(("guilds", 0, "name"), limits.GUILD_NAME_MAX, id="guild-name"),
    pytest.param((*P0, "name"), limits.PERSONA_NAME_MAX, id="persona-name"),
    pytest.param((*LLM, "model"), limits.MODEL_NAME_MAX, id="model"),
    pytest.param(("guilds", 0, "blocks", 0, "reason"), limits.BLOCK_REASON_MAX, id="reason"),
]


@pytest.mark.parametrize(("path", "limit"), TEXT_LIMITS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_text_is_accepted_exactly_up_to_its_limit(path, limit, data):
    document = json.loads(FIXTURE.read_text())
    length = data.draw(
        st.one_of(st.integers(1, 2 * limit), st.sampled_from([limit, limit + 1])), label="length"
    )
    if path[-1] == "name" and path[2:3] == ("personas",):
        document["guilds"][0]["blocks"] = []
    problems = problems_of(_set(document, path, "x" * length))
    assert (problems == {}) == (length <= limit), problems


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=-(2**80), max_value=2**80))
def test_max_output_tokens_is_accepted_exactly_within_its_range(tokens):
    document = json.loads(FIXTURE.read_text())
    llm = {"max_output_tokens": tokens, "context_window": limits.CONTEXT_WINDOW_MAX}
    problems = problems_of(_set(document, LLM, llm))
    assert (problems == {}) == (1 <= tokens <= limits.MAX_OUTPUT_TOKENS_MAX), problems


@settings(max_examples=60, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_temperature_is_accepted_exactly_within_0_to_2(temperature):
    document = json.loads(FIXTURE.read_text())
    problems = problems_of(_set(document, (*LLM, "temperature"), temperature))
    assert (problems == {}) == (0.0 <= temperature <= 2.0), problems


@settings(max_examples=40, deadline=None)
@given(st.tuples(st.text(max_size=15), st.text(max_size=15)).map(lambda t: f"{t[0]}\x00{t[1]}"))
def test_text_with_a_nul_character_is_refused_wherever_it_is(text):
    document = json.loads(FIXTURE.read_text())
    document["guilds"][0]["personas"][0]["system_prompt"] = text
    document["guilds"][0]["channels"][0]["context_note"]["text"] = text
    problems = problems_of(document)
    assert problems["guilds[0].personas[0].system_prompt"] == "must not contain NUL characters"
    assert "guilds[0].channels[0].context_note.text" in problems


def test_a_nul_character_in_a_key_is_reported(document):
    document["guilds"][0]["personas"][0]["sys\x00tem"] = "x"
    problems = problems_of(document)
    assert problems["guilds[0].personas[0]"] == "has a key with a NUL character"


# --- Bytes: size, encoding, nesting, huge numbers ------------------------------------------------


def test_a_file_over_the_size_limit_is_refused_before_it_is_parsed():
    with pytest.raises(ConfigError) as caught:
        parse_config_bytes(b" " * (CONFIG_FILE_MAX_BYTES + 1), source="big.json")

    assert caught.value.problems == [
        ("(document)", f"is larger than {CONFIG_FILE_MAX_BYTES:,} bytes; split it into files")
    ]
    assert caught.value.report().startswith("big.json was not imported")


def test_a_file_of_exactly_the_size_limit_is_read(document):
    raw = json.dumps(document).encode()
    raw += b" " * (CONFIG_FILE_MAX_BYTES - len(raw))

    assert len(parse_config_bytes(raw, source="f").guilds) == 1


@pytest.mark.django_db
def test_the_command_refuses_an_oversized_file_without_reading_it_all(tmp_path):
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b" " * (3 * CONFIG_FILE_MAX_BYTES) + b"]")

    with pytest.raises(CommandError, match=r"big\.json was not imported .*\n.*larger than"):
        call_command("importconfig", str(big))
    assert GuildConfig.objects.count() == 0


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        pytest.param(b"[" * 200_000 + b"]" * 200_000, "nested too deeply", id="deep-json"),
        pytest.param(b'{"version": 1, "guilds": [}', "not valid JSON", id="malformed"),
        pytest.param(b'{"version": 1, "guilds": []}\xff', "not UTF-8", id="not-utf8"),
        pytest.param(
            b'{"version": 1, "guilds": [{"message_fetch_limit": 1' + b"0" * 5000 + b"}]}",
            "number too large to read",
            id="int-over-4300-digits",
        ),
    ],
)
def test_unreadable_bytes_become_one_document_problem(raw, words):
    with pytest.raises(ConfigError) as caught:
        parse_config_bytes(raw, source="f")
    [(path, message)] = caught.value.problems
    assert path == "(document)" and words in message


def _nested(depth: int) -> object:
    value: object = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def test_deep_nesting_inside_a_document_is_reported_where_it_starts(document):
    document["guilds"][0]["personas"][0]["sample_dialogue"] = _nested(100_000)

    problems = problems_of(document)

    where = "guilds[0].personas[0].sample_dialogue" + "[0]" * (NESTING_MAX - 5)
    assert problems == {where: f"is nested too deeply (at most {NESTING_MAX} levels)"}


@pytest.mark.parametrize(
    ("path", "value", "where"),
    [
        pytest.param(
            (*LLM, "max_output_tokens"),
            2**31,
            "guilds[0].personas[0].llm.max_output_tokens",
            id="2**31-tokens",
        ),
        pytest.param(
            (*LLM, "context_window"),
            10**4000,
            "guilds[0].personas[0].llm.context_window",
            id="4000-digit-window",
        ),
        pytest.param(
            ("guilds", 0, "message_fetch_limit"),
            -(10**300),
            "guilds[0].message_fetch_limit",
            id="huge-negative-limit",
        ),
        pytest.param(
            (*LLM, "temperature"), float("inf"), "guilds[0].personas[0].llm.temperature", id="inf"
        ),
        pytest.param(
            ("guilds", 0, "channels", 0, "id"),
            "9" * 5000,
            "guilds[0].channels[0].id",
            id="5000-digit-snowflake",
        ),
        pytest.param(
            ("guilds", 0, "blocks", 1, "expires_at"),
            "9999-12-31T23:59:59-23:59",
            "guilds[0].blocks[1].expires_at",
            id="expiry-past-year-9999-in-utc",
        ),
    ],
)
def test_huge_numbers_are_reported_not_raised(document, path, value, where):
    assert where in problems_of(_set(document, path, value))


@pytest.mark.django_db
def test_the_command_reports_huge_numbers_and_nul_with_paths(tmp_path, document):
    document["guilds"][0]["personas"][0]["llm"]["max_output_tokens"] = 2**31
    document["guilds"][0]["name"] = "Lounge\x00"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))

    with pytest.raises(CommandError) as caught:
        call_command("importconfig", str(bad))

    assert "guilds[0].name: must not contain NUL characters" in str(caught.value)
    assert "guilds[0].personas[0].llm.max_output_tokens: Input should be less" in str(caught.value)
    assert GuildConfig.objects.count() == 0


# --- At most 50 problems listed ------------------------------------------------------------


def test_at_most_fifty_problems_are_listed_then_how_many_more(document):
    document["guilds"][0]["users"] = _ids(120, privacy="secret")

    with pytest.raises(ConfigError) as caught:
        parse_config_bytes(json.dumps(document).encode(), source="many.json")

    report = caught.value.report().splitlines()
    assert len(caught.value.problems) == 120
    assert report[0] == "many.json was not imported (nothing was changed):"
    assert len(report) == 1 + PROBLEMS_SHOWN_MAX + 1
    assert report[1].startswith("  guilds[0].users[0].privacy: Input should be")
    assert report[-1] == "  … and 70 more"


def test_a_huge_wrong_value_is_shortened_in_the_report(document):
    document["guilds"][0]["users"][0]["privacy"] = "s" * 100_000
    problems = problems_of(document)
    assert len(problems["guilds[0].users[0].privacy"]) < 200


@pytest.mark.django_db
def test_the_command_lists_fifty_problems(tmp_path, document):
    document["guilds"][0]["users"] = _ids(60, privacy="secret")
    bad = tmp_path / "many.json"
    bad.write_text(json.dumps(document))

    with pytest.raises(CommandError) as caught:
        call_command("importconfig", str(bad))

    lines = str(caught.value).splitlines()
    assert len(lines) == 52 and lines[-1] == "  … and 10 more"


# --- Database errors -----------------------------------------------------------------------------


def _forbid_guild_name(name: str) -> None:
    """A database rule the schema does not know: the database refuses a guild named ``name``."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "ALTER TABLE personas_guildconfig ADD CONSTRAINT test_forbidden_name "
                f"CHECK (name <> '{name}')"
            )
        else:
            cursor.execute(
                "CREATE TRIGGER test_forbidden_name BEFORE INSERT ON personas_guildconfig "
                f"WHEN NEW.name = '{name}' BEGIN SELECT RAISE(ABORT, 'forbidden name'); END"
            )


@pytest.mark.django_db
def test_a_database_error_becomes_a_report_naming_the_path(document):
    _forbid_guild_name("Forbidden")
    document["guilds"][0]["name"] = "Forbidden"

    with pytest.raises(ConfigError) as caught:
        config_import(data=document)

    [(path, message)] = caught.value.problems
    assert path == "guilds[0]" and message.startswith("could not be saved: ")
    assert GuildConfig.objects.count() == 0 and Persona.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("field", "value"),
    ids=lambda v: v if isinstance(v, str) and len(v) < 30 else "past-the-limit",
    argvalues=[
        ("system_prompt", "s" * (limits.SYSTEM_PROMPT_MAX + 1)),
        ("prefill", "p" * (limits.PREFILL_MAX + 1)),
        ("context_note", "n" * (limits.NOTE_TEXT_MAX + 1)),
        ("max_output_tokens", limits.MAX_OUTPUT_TOKENS_MAX + 1),
        ("context_window", limits.CONTEXT_WINDOW_MAX + 1),
        ("llm_model", "m" * (limits.MODEL_NAME_MAX + 1)),
        ("name", "N" * (limits.PERSONA_NAME_MAX + 1)),
        ("triggers", ["t"] * (limits.TRIGGERS_MAX + 1)),
        ("sample_dialogue", [{"role": "user", "content": "hi"}] * (limits.SAMPLE_DIALOGUE_MAX + 1)),
        ("fallback_models", ["m"] * (limits.FALLBACK_MODELS_MAX + 1)),
    ],
)
def test_the_database_refuses_a_persona_past_a_limit(field, value):
    guild = GuildConfig.objects.create(guild_id=1, name="Lounge")
    values = {"context_window": limits.CONTEXT_WINDOW_MAX} if field == "max_output_tokens" else {}
    with pytest.raises((IntegrityError, DataError)), transaction.atomic():
        Persona.objects.create(guild=guild, **{"name": "P", **values, field: value})


@pytest.mark.django_db
@pytest.mark.parametrize(
    "create",
    [
        pytest.param(
            lambda: GuildConfig.objects.create(guild_id=2, name="g", context_note="n" * 4001),
            id="guild-note",
        ),
        pytest.param(
            lambda: GuildConfig.objects.create(guild_id=2, name="g" * 101), id="guild-name"
        ),
    ],
)
def test_the_database_refuses_a_guild_past_a_limit(create: Callable[[], object]):
    with pytest.raises((IntegrityError, DataError)), transaction.atomic():
        create()


# --- Concurrent imports --------------------------------------------------------------------


def _in_threads(*jobs: Callable[[], object]) -> list[object]:
    """Run each job in its own thread (so on its own database connection), all released at once;
    returns each job's result or the exception it raised."""
    barrier = threading.Barrier(len(jobs))
    results: list[object] = [None] * len(jobs)

    def run(i: int, job: Callable[[], object]) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = job()
        except Exception as error:
            results[i] = error
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("round_", range(3))
def test_two_concurrent_imports_of_a_new_guild_both_succeed(document, round_):
    document["guilds"][0]["id"] = str(1100000000000000100 + round_)

    reports = _in_threads(
        lambda: config_import(data=document), lambda: config_import(data=document)
    )

    assert not [r for r in reports if isinstance(r, BaseException)], reports
    created = sorted(r.counts["GuildConfig"]["created"] for r in reports)
    assert created == [0, 1]
    assert GuildConfig.objects.count() == 1 and Persona.objects.count() == 2


@pytest.mark.postgres_only(reason="watches the import wait for the advisory lock in pg_locks")
@pytest.mark.django_db(transaction=True)
def test_an_import_waits_while_another_holds_the_import_lock(document):
    holding, release = threading.Event(), threading.Event()

    def hold_the_lock() -> None:
        with transaction.atomic():
            _serialise_imports()
            holding.set()
            assert release.wait(timeout=30)

    def import_after_it() -> object:
        assert holding.wait(timeout=30)
        return config_import(data=document)

    def observe() -> str:
        assert holding.wait(timeout=30)
        try:
            return _wait_until_an_import_waits()
        finally:
            release.set()

    holder, importer, observed = _in_threads(hold_the_lock, import_after_it, observe)

    assert holder is None and not isinstance(importer, BaseException), (holder, importer)
    assert GuildConfig.objects.count() == 1
    assert observed == "waiting"


def _wait_until_an_import_waits() -> str:
    """Poll PostgreSQL until a session waits for the import lock: "waiting", or "not waiting"
    after 20 s."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND classid = 0 AND objid = %s "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                [CONFIG_IMPORT_LOCK_KEY],
            )
            if cursor.fetchone()[0] >= 1:
                return "waiting"
        time.sleep(0.02)
    return "not waiting"


def test_parse_config_bytes_reads_what_the_command_reads(document):
    raw = "\ufeff".encode() + json.dumps(document).encode()
    assert parse_config_bytes(raw, source="bom.json").guilds[0].name == "Hoshimi Lounge"


def test_config_error_text_is_the_capped_list():
    error = ConfigError([(f"p[{i}]", "bad") for i in range(51)])
    assert str(error).splitlines()[-1] == "… and 1 more"
    assert io.StringIO(str(error)).read().count("\n") == PROBLEMS_SHOWN_MAX


@pytest.mark.django_db
def test_the_command_reads_standard_input(monkeypatch, document):
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(document)))
    out = io.StringIO()

    call_command("importconfig", "-", stdout=out)

    assert "Persona: 2 created" in out.getvalue()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("raw", "words"),
    [
        pytest.param(b"[" * 200_000 + b"]" * 200_000, "nested too deeply", id="deep"),
        pytest.param(b'{"version": 1, "guilds": [' + b"9" * 5000 + b"]}", "too large", id="int"),
    ],
)
def test_the_command_turns_hostile_files_into_a_report(tmp_path, raw, words):
    bad = tmp_path / "hostile.json"
    bad.write_bytes(raw)

    with pytest.raises(CommandError) as caught:
        call_command("importconfig", str(bad))

    assert str(caught.value).startswith(f"{bad} was not imported (nothing was changed):")
    assert words in str(caught.value)
