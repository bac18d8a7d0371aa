"""Configuration: every environment variable is parsed by a typed reader that names it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from botproject.env import env_bool, env_database, env_list, env_positive_float, env_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("raw", "expected"), [("1", True), ("TRUE", True), ("off", False), ("", False)]
)
def test_env_bool_reads_the_usual_spellings(raw, expected):
    assert env_bool("DJANGO_DEBUG", False, environ={"DJANGO_DEBUG": raw}) is expected


def test_env_bool_names_the_variable_on_a_bad_value():
    with pytest.raises(ImproperlyConfigured, match=r"DJANGO_DEBUG .* got 'maybe'"):
        env_bool("DJANGO_DEBUG", False, environ={"DJANGO_DEBUG": "maybe"})


def test_env_list_splits_on_commas_and_drops_blanks():
    value = env_list("ALLOWED_HOSTS", [], environ={"ALLOWED_HOSTS": "a.example, ,b.example"})
    assert value == ["a.example", "b.example"]


def test_env_positive_float_reads_seconds_and_names_the_variable_on_a_bad_value():
    name = "STM_MAINTENANCE_SECONDS"
    assert env_positive_float(name, 300.0, environ={}) == 300.0
    assert env_positive_float(name, 300.0, environ={name: " 0.5 "}) == 0.5
    for raw in ("0", "-1", "soon", "inf"):
        with pytest.raises(ImproperlyConfigured, match=rf"{name} must be a number .* got"):
            env_positive_float(name, 300.0, environ={name: raw})


@pytest.mark.parametrize("raw", ["localhost:6379", "http://127.0.0.1:6379", "redis://"])
def test_env_url_rejects_wrong_schemes_and_missing_hosts(raw):
    with pytest.raises(ImproperlyConfigured, match="REDIS_URL must be a URL"):
        env_url("REDIS_URL", "", schemes=("redis",), environ={"REDIS_URL": raw})


def test_env_url_strips_a_trailing_slash_from_http_urls():
    url = env_url("LLM_BASE_URL", "", schemes=("http",), environ={"LLM_BASE_URL": "http://h/v1/"})
    assert url == "http://h/v1"


def test_env_database_parses_postgres_urls():
    config = env_database(
        "DATABASE_URL", "", environ={"DATABASE_URL": "postgres://bot:pw@db.internal:5433/bot"}
    )
    assert (config["ENGINE"], config["HOST"], config["PORT"], config["NAME"]) == (
        "django.db.backends.postgresql",
        "db.internal",
        5433,
        "bot",
    )


def test_env_database_names_the_variable_on_an_unknown_scheme():
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL is not a database URL"):
        env_database("DATABASE_URL", "", environ={"DATABASE_URL": "mongo://x/y"})


def _start(**overrides: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update({"DJANGO_SETTINGS_MODULE": "botproject.settings", "DJANGO_DEBUG": "1"})
    env.update(overrides)
    return subprocess.run(
        [sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True
    )


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DJANGO_DEBUG", "sometimes"),
        ("REDIS_URL", "localhost"),
        ("DATABASE_URL", "nosuchdb://x"),
        ("DISCORD_API_BASE", "discord.com/api"),
        ("DISCORD_GATEWAY_URL", "http://gateway.example"),
        ("LLM_BASE_URL", "ftp://models.example"),
        ("LLM_VISION_BASE_URL", "models.example/v1"),
        ("PLURALKIT_API_BASE", "ftp://api.pluralkit.me/v2"),
    ],
)
def test_start_up_fails_naming_the_bad_variable(variable, value):
    result = _start(**{variable: value})
    assert result.returncode != 0
    assert f"ImproperlyConfigured: {variable}" in result.stderr


def test_start_up_without_a_secret_key_outside_debug_says_what_to_set():
    result = _start(DJANGO_DEBUG="0", DJANGO_SECRET_KEY="")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def test_start_up_with_good_values_passes_the_system_checks():
    result = _start(REDIS_URL="redis://127.0.0.1:6379/3", LLM_BASE_URL="http://127.0.0.1:9/v1")
    assert result.returncode == 0, result.stderr
