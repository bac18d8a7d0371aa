"""Configuration: every environment variable is parsed by a typed reader that names it."""

from __future__ import annotations

import os
import runpy
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from botproject.env import (
    env_bool,
    env_choice,
    env_database,
    env_int,
    env_list,
    env_origin_list,
    env_port,
    env_positive_float,
    env_refuse_renamed,
    env_url,
)

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


def test_a_retired_variable_name_is_refused_with_its_new_name():
    renamed = {"STM_IDLE_SECONDS": "SHORT_TERM_MEMORY_IDLE_SECONDS"}
    env_refuse_renamed(renamed, environ={"SHORT_TERM_MEMORY_IDLE_SECONDS": "600"})
    with pytest.raises(ImproperlyConfigured, match="STM_IDLE_SECONDS is now called SHORT_TERM"):
        env_refuse_renamed(renamed, environ={"STM_IDLE_SECONDS": "600"})


def test_env_positive_float_reads_seconds_and_names_the_variable_on_a_bad_value():
    name = "SHORT_TERM_MEMORY_MAINTENANCE_SECONDS"
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


@pytest.mark.parametrize(
    ("raw", "expected"), [(None, "withhold"), ("", "withhold"), ("ALLOW", "allow")]
)
def test_env_choice_reads_one_of_its_choices(raw, expected):
    environ = {} if raw is None else {"MODERATION_ON_ERROR": raw}
    choices = ("withhold", "allow")
    assert env_choice("MODERATION_ON_ERROR", "withhold", choices=choices, environ=environ) == (
        expected
    )


def test_env_choice_names_the_variable_and_its_choices():
    with pytest.raises(
        ImproperlyConfigured, match="MODERATION_ON_ERROR must be one of withhold, allow, got 'x'"
    ):
        env_choice(
            "MODERATION_ON_ERROR",
            "withhold",
            choices=("withhold", "allow"),
            environ={"MODERATION_ON_ERROR": "x"},
        )


def test_env_database_names_the_variable_on_an_unknown_scheme():
    with pytest.raises(ImproperlyConfigured, match="DATABASE_URL is not a database URL"):
        env_database("DATABASE_URL", "", environ={"DATABASE_URL": "mongo://x/y"})


@pytest.mark.parametrize(
    ("raw", "expected"), [(None, 0), ("", 0), ("0", 0), ("31536000", 31536000)]
)
def test_env_int_reads_whole_numbers(raw, expected):
    environ = {} if raw is None else {"DJANGO_SECURE_HSTS_SECONDS": raw}
    assert env_int("DJANGO_SECURE_HSTS_SECONDS", 0, minimum=0, environ=environ) == expected


@pytest.mark.parametrize(("raw", "expected"), [(None, None), ("", None), ("0", 0), ("9101", 9101)])
def test_env_port_is_off_when_unset_and_zero_picks_a_free_port(raw, expected):
    environ = {} if raw is None else {"WORKER_METRICS_PORT": raw}
    assert env_port("WORKER_METRICS_PORT", environ=environ) == expected


@pytest.mark.parametrize(("raw", "message"), [("http", "whole number"), ("70000", "0..65535")])
def test_env_port_names_the_variable_on_a_bad_value(raw, message):
    with pytest.raises(ImproperlyConfigured, match=f"WORKER_METRICS_PORT must be .*{message}"):
        env_port("WORKER_METRICS_PORT", environ={"WORKER_METRICS_PORT": raw})


@pytest.mark.parametrize(
    ("raw", "message"),
    [("3.5", "whole number, got '3.5'"), ("-1", r"in 0\.\.100, got -1"), ("101", "got 101")],
)
def test_env_int_names_the_variable_on_a_bad_value(raw, message):
    with pytest.raises(
        ImproperlyConfigured, match=f"DJANGO_SECURE_HSTS_SECONDS must be .*{message}"
    ):
        env_int(
            "DJANGO_SECURE_HSTS_SECONDS",
            0,
            minimum=0,
            maximum=100,
            environ={"DJANGO_SECURE_HSTS_SECONDS": raw},
        )


def test_env_origin_list_accepts_origins_with_ports_and_wildcards():
    raw = "https://bot.example.com, http://127.0.0.1:8000/ ,https://*.example.org"
    assert env_origin_list("CSRF_TRUSTED_ORIGINS", [], environ={"CSRF_TRUSTED_ORIGINS": raw}) == [
        "https://bot.example.com",
        "http://127.0.0.1:8000",
        "https://*.example.org",
    ]


@pytest.mark.parametrize(
    "origin",
    [
        "bot.example.com",
        "ftp://bot.example.com",
        "https://",
        "https://bot.example.com/admin",
        "https://bot.example.com?x=1",
        "https://user@bot.example.com",
    ],
)
def test_env_origin_list_names_the_variable_and_the_bad_entry(origin):
    with pytest.raises(
        ImproperlyConfigured, match="CSRF_TRUSTED_ORIGINS must list origins"
    ) as caught:
        env_origin_list(
            "CSRF_TRUSTED_ORIGINS",
            [],
            environ={"CSRF_TRUSTED_ORIGINS": f"https://ok.example.com,{origin}"},
        )
    assert repr(origin) in str(caught.value)


def _manage(*args: str, **overrides: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update({"DJANGO_SETTINGS_MODULE": "botproject.settings", "DJANGO_DEBUG": "1"})
    env.update(overrides)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True
    )


def _start(**overrides: str) -> subprocess.CompletedProcess:
    return _manage("check", **overrides)


PRODUCTION = {
    "DJANGO_DEBUG": "0",
    "ALLOWED_HOSTS": "bot.example.com",
    "DJANGO_SECURE_HSTS_SECONDS": "31536000",
    "DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS": "1",
    "DJANGO_SECURE_HSTS_PRELOAD": "1",
    "DJANGO_SECURE_SSL_REDIRECT": "1",
    "DJANGO_SECURE_PROXY_SSL_HEADER": "1",
    "CSRF_TRUSTED_ORIGINS": "https://bot.example.com",
}


def test_deploy_checks_are_clean_in_production_mode():
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(64),
        **PRODUCTION,
    )
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def _settings_module(**overrides: str) -> dict[str, object]:
    """The settings module's names as a process started with ``overrides`` (and a debug
    default, a secret key) would read them: the module runs in this process on that
    environment, as Django's lazy settings import it at start. Raises what it raises."""
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env.update({"DJANGO_DEBUG": "1", "DJANGO_SECRET_KEY": secrets.token_urlsafe(64)})
    env.update(overrides)
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        return runpy.run_path(str(ROOT / "botproject" / "settings.py"))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _settings(*names: str, **overrides: str) -> dict[str, str]:
    """The repr of each named setting as a process started with ``overrides`` sees it."""
    module = _settings_module(**overrides)
    return {name: repr(module.get(name)) for name in names}


def test_production_settings_come_from_the_environment():
    assert _settings(
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_HSTS_SECONDS",
        "SECURE_SSL_REDIRECT",
        "SECURE_PROXY_SSL_HEADER",
        "CSRF_TRUSTED_ORIGINS",
        **PRODUCTION,
    ) == {
        "SESSION_COOKIE_SECURE": "True",
        "CSRF_COOKIE_SECURE": "True",
        "SECURE_HSTS_SECONDS": "31536000",
        "SECURE_SSL_REDIRECT": "True",
        "SECURE_PROXY_SSL_HEADER": "('HTTP_X_FORWARDED_PROTO', 'https')",
        "CSRF_TRUSTED_ORIGINS": "['https://bot.example.com']",
    }


def test_https_options_are_off_unless_asked_for():
    assert _settings(
        "SECURE_HSTS_SECONDS", "SECURE_SSL_REDIRECT", "SECURE_PROXY_SSL_HEADER", DJANGO_DEBUG="0"
    ) == {
        "SECURE_HSTS_SECONDS": "0",
        "SECURE_SSL_REDIRECT": "False",
        "SECURE_PROXY_SSL_HEADER": "None",
    }


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"DJANGO_DEBUG": "0"}, "True"),
        ({"DJANGO_DEBUG": "1"}, "False"),
        ({"DJANGO_DEBUG": "0", "DJANGO_SECURE_COOKIES": "0"}, "False"),
        ({"DJANGO_DEBUG": "1", "DJANGO_SECURE_COOKIES": "1"}, "True"),
    ],
)
def test_cookies_are_secure_outside_debug_unless_overridden(overrides, expected):
    cookies = _settings("SESSION_COOKIE_SECURE", "CSRF_COOKIE_SECURE", **overrides)
    assert cookies == {"SESSION_COOKIE_SECURE": expected, "CSRF_COOKIE_SECURE": expected}


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("DJANGO_DEBUG", "sometimes"),
        ("REDIS_URL", "localhost"),
        ("DATABASE_URL", "nosuchdb://x"),
        ("DISCORD_API_BASE", "discord.com/api"),
        ("DISCORD_GATEWAY_URL", "http://gateway.example"),
        ("LLM_BASE_URL", "ftp://models.example"),
        ("DJANGO_SECURE_COOKIES", "sometimes"),
        ("DJANGO_SECURE_HSTS_SECONDS", "1y"),
        ("DJANGO_SECURE_HSTS_SECONDS", "-1"),
        ("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", "all"),
        ("DJANGO_SECURE_HSTS_PRELOAD", "please"),
        ("DJANGO_SECURE_SSL_REDIRECT", "https"),
        ("DJANGO_SECURE_PROXY_SSL_HEADER", "X-Forwarded-Proto"),
        ("CSRF_TRUSTED_ORIGINS", "bot.example.com"),
        ("CSRF_TRUSTED_ORIGINS", "https://ok.example.com,https://bot.example.com/admin"),
        ("LLM_VISION_BASE_URL", "models.example/v1"),
        ("PLURALKIT_API_BASE", "ftp://api.pluralkit.me/v2"),
        ("YOUTUBE_TRANSCRIPT_URL", "transcripts.example"),
        ("MODERATION_BASE_URL", "api.openai.com/v1"),
        ("MODERATION_ON_ERROR", "shrug"),
        ("LLM_EMBEDDING_MODEL", "text embedding 3"),
        ("LLM_EMBEDDING_BASE_URL", "models.example/v1"),
        ("LLM_EMBEDDING_BASE_URL", "https://models.example/v1"),  # without a model
        ("MEMORY_RECALL_K", "many"),
        ("MEMORY_RECALL_RELATIVE_PERCENT", "150"),
        ("MEMORY_RECALL_VECTOR_PERCENT", "most"),
        ("OFFLINE_EMBEDDING_MODEL", "bert"),
        ("MEMORY_PERSONAL_MAX_CHARS", "5000"),
        ("DOCUMENT_MAX_BYTES", "0"),
    ],
)
def test_start_up_fails_naming_the_bad_variable(variable, value):
    with pytest.raises(ImproperlyConfigured) as refused:
        _settings_module(**{variable: value})
    assert str(refused.value).startswith(variable)


def test_a_bad_variable_stops_a_real_start_with_its_name():
    """The in-process readings above are what a real start does: one start proves it."""
    result = _start(DJANGO_SECURE_HSTS_SECONDS="1y")
    assert result.returncode != 0
    assert "ImproperlyConfigured: DJANGO_SECURE_HSTS_SECONDS" in result.stderr


def test_start_up_without_a_secret_key_outside_debug_says_what_to_set():
    result = _start(DJANGO_DEBUG="0", DJANGO_SECRET_KEY="")
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in result.stderr


def test_start_up_with_good_values_passes_the_system_checks():
    result = _start(REDIS_URL="redis://127.0.0.1:6379/3", LLM_BASE_URL="http://127.0.0.1:9/v1")
    assert result.returncode == 0, result.stderr
