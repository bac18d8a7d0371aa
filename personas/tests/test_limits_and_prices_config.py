"""Limits and prices in the configuration file: stored and exported as given, bad values refused
with their JSON path (nothing written), odd prices imported with a warning."""

from __future__ import annotations

import copy
import io
import json
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import call_command

from personas.config_schema import ConfigError
from personas.models import GuildConfig, ModelPrice, Persona
from personas.selectors import config_export
from personas.services import config_import

pytestmark = pytest.mark.django_db

FIXTURE = Path(__file__).parent / "fixtures" / "config.json"


@pytest.fixture
def document() -> dict:
    return json.loads(FIXTURE.read_text())


def test_limits_and_prices_are_stored_as_the_file_gives_them(document):
    config_import(data=document)

    guild = GuildConfig.objects.get()
    assert guild.limits == {
        "tokens_per_day": 200000,
        "usd_per_month": "25.00",
        "user_turns": {"count": 5, "per_seconds": 60},
        "notice": "The bot is resting until tomorrow.",
    }
    anon = Persona.objects.get(name="Anon")
    assert anon.limits == {"tokens_per_day": 50000, "usd_per_month": None}
    assert Persona.objects.get(name="Tomori").limits is None
    mini = ModelPrice.objects.get(model="gpt-4o-mini")
    assert (mini.input, mini.cached_input, mini.output) == (
        Decimal("0.15"),
        Decimal("0.075"),
        Decimal("0.6"),
    )
    assert ModelPrice.objects.get(model="llama3.1:8b").cached_input is None


def test_the_export_writes_them_back_and_reimporting_changes_nothing(document):
    config_import(data=document)
    exported = config_export()

    assert exported["prices"] == document["prices"]
    assert exported["guilds"][0]["limits"]["usd_per_month"] == "25.00"
    report = config_import(data=json.loads(json.dumps(exported)))
    assert not report.changed
    assert config_export() == exported
    assert "prices" not in config_export(prices=False)


def test_a_file_without_prices_leaves_the_table_and_prune_drops_unlisted_prices(document):
    config_import(data=document)
    without = {key: value for key, value in document.items() if key != "prices"}
    assert not config_import(data=without).changed
    assert ModelPrice.objects.count() == 2

    config_import(data={**document, "prices": document["prices"][:1]}, prune=True)

    assert list(ModelPrice.objects.values_list("model", flat=True)) == ["gpt-4o-mini"]


def _with(document: dict, path: tuple, value: object) -> dict:
    changed = copy.deepcopy(document)
    target = changed
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return changed


LIMITS = ("guilds", 0, "limits")
PRICE = ("prices", 0, "usd_per_million")


@pytest.mark.parametrize(
    ("path", "value", "where", "what"),
    [
        pytest.param(
            (*LIMITS, "tokens_per_day"),
            -1,
            "guilds[0].limits.tokens_per_day",
            "greater than or equal to 0",
            id="negative-tokens",
        ),
        pytest.param(
            (*LIMITS, "tokens_per_day"),
            "lots",
            "guilds[0].limits.tokens_per_day",
            "valid integer",
            id="non-numeric-tokens",
        ),
        pytest.param(
            (*LIMITS, "tokens_per_day"),
            10**13,
            "guilds[0].limits.tokens_per_day",
            "less than or equal to 10000000000",
            id="absurd-tokens",
        ),
        pytest.param(
            (*LIMITS, "usd_per_month"),
            "-5",
            "guilds[0].limits.usd_per_month",
            "greater than or equal to 0",
            id="negative-usd",
        ),
        pytest.param(
            (*LIMITS, "usd_per_month"),
            "twenty",
            "guilds[0].limits.usd_per_month",
            "valid decimal",
            id="non-numeric-usd",
        ),
        pytest.param(
            (*LIMITS, "usd_per_month"),
            "1e12",
            "guilds[0].limits.usd_per_month",
            "less than or equal to 1000000",
            id="absurd-usd",
        ),
        pytest.param(
            (*LIMITS, "user_turns"),
            {"count": 0, "per_seconds": 60},
            "guilds[0].limits.user_turns.count",
            "greater than or equal to 1",
            id="zero-user-turns",
        ),
        pytest.param(
            (*LIMITS, "user_turns"),
            {"count": 5},
            "guilds[0].limits.user_turns.per_seconds",
            "required",
            id="user-turns-without-window",
        ),
        pytest.param(
            (*LIMITS, "user_turns"),
            {"count": 5, "per_seconds": 10**9},
            "guilds[0].limits.user_turns.per_seconds",
            "less than or equal to",
            id="absurd-window",
        ),
        pytest.param(
            ("guilds", 0, "personas", 1, "limits"),
            {"tokens_per_day": 10, "user_turns": {"count": 1, "per_seconds": 1}},
            "guilds[0].personas[1].limits.user_turns",
            "not a known setting",
            id="persona-user-turns",
        ),
        pytest.param(
            (*PRICE, "input"),
            -0.1,
            "prices[0].usd_per_million.input",
            "greater than or equal to 0",
            id="negative-price",
        ),
        pytest.param(
            (*PRICE, "output"),
            "cheap",
            "prices[0].usd_per_million.output",
            "valid decimal",
            id="non-numeric-price",
        ),
        pytest.param(
            (*PRICE, "output"),
            50_000,
            "prices[0].usd_per_million.output",
            "less than or equal to 10000",
            id="absurd-price",
        ),
        pytest.param(
            (*PRICE, "cached_input"),
            "0.0000001",
            "prices[0].usd_per_million.cached_input",
            "no more than 6 decimal places",
            id="price-too-precise",
        ),
        pytest.param(
            ("prices", 1, "model"),
            "gpt-4o-mini",
            "prices[1].model",
            "duplicate price for a model",
            id="duplicate-price",
        ),
        pytest.param(
            ("prices", 0, "usd_per_million"),
            {"input": 1},
            "prices[0].usd_per_million.output",
            "required",
            id="missing-output-price",
        ),
    ],
)
def test_bad_limits_and_prices_name_their_path_and_write_nothing(
    document, path, value, where, what
):
    config_import(data=document)
    before = (config_export(), list(ModelPrice.objects.values_list()))

    with pytest.raises(ConfigError) as caught:
        config_import(data=_with(document, path, value))

    problems = dict(caught.value.problems)
    assert where in problems, caught.value.problems
    assert what in problems[where]
    assert (config_export(), list(ModelPrice.objects.values_list())) == before


def test_a_price_for_a_model_nothing_uses_is_imported_with_a_warning(document):
    document["prices"].append(
        {"model": "gpt-4o-mnii", "usd_per_million": {"input": 1, "output": 2}}
    )

    report = config_import(data=document)

    assert ModelPrice.objects.filter(model="gpt-4o-mnii").exists()
    assert report.warnings == [
        (
            "prices[2].model",
            "no persona, planner or deployment setting uses 'gpt-4o-mnii' (a typo?); "
            "its price is kept",
        )
    ]
    assert "warning: prices[2].model: no persona" in report.summary()


def test_a_monthly_budget_over_an_unpriced_model_is_a_warning(document):
    document["prices"] = [document["prices"][1]]  # gpt-4o-mini (Tomori's model) has no price

    report = config_import(data=document, prune=True)

    [(path, message)] = report.warnings
    assert path == "guilds[0].limits.usd_per_month"
    assert "'gpt-4o-mini' has no price" in message


def test_importconfig_prints_the_warnings(tmp_path, document):
    document["prices"].append(
        {"model": "nobody-uses-me", "usd_per_million": {"input": 1, "output": 1}}
    )
    path = tmp_path / "config.json"
    path.write_text(json.dumps(document))
    out = io.StringIO()

    call_command("importconfig", str(path), stdout=out)

    assert "warning: prices[2].model: no persona, planner or deployment setting uses" in (
        out.getvalue()
    )
