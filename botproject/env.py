"""Typed readers for the process environment.

Only ``botproject/settings.py`` calls these. Each reader returns a parsed value or raises
``ImproperlyConfigured`` with a message that names the variable and says what was wrong, so a
bad deployment stops at start-up instead of failing later in some request.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from urllib.parse import urlparse

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str = "", *, environ: Mapping[str, str] | None = None) -> str:
    """The variable's value with surrounding whitespace removed, or ``default`` when unset."""
    environ = os.environ if environ is None else environ
    value = environ.get(name)
    return default if value is None else value.strip()


def env_bool(name: str, default: bool, *, environ: Mapping[str, str] | None = None) -> bool:
    """``1/true/yes/on`` or ``0/false/no/off`` (any case); ``default`` when unset.

    Raises ImproperlyConfigured for anything else, e.g. ``DJANGO_DEBUG=maybe``.
    """
    environ = os.environ if environ is None else environ
    if name not in environ:
        return default
    value = environ[name].strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name} must be one of 1/true/yes/on or 0/false/no/off, got {environ[name]!r}"
    )


def env_refuse_renamed(
    renamed: Mapping[str, str], *, environ: Mapping[str, str] | None = None
) -> None:
    """Raise ImproperlyConfigured when a variable of a retired name (``renamed``: old → new) is
    set, so a deployment that still sets it is not silently ignored."""
    environ = os.environ if environ is None else environ
    for old, new in renamed.items():
        if old in environ:
            raise ImproperlyConfigured(f"{old} is now called {new}; set {new} instead")


def env_positive_float(
    name: str, default: float, *, environ: Mapping[str, str] | None = None
) -> float:
    """A number greater than zero; ``default`` when unset.

    Raises ImproperlyConfigured naming the variable for anything else, e.g. ``0`` or ``soon``.
    """
    environ = os.environ if environ is None else environ
    if name not in environ:
        return default
    try:
        value = float(environ[name].strip())
    except ValueError:
        value = 0.0
    if not value > 0 or value == float("inf"):
        raise ImproperlyConfigured(f"{name} must be a number greater than 0, got {environ[name]!r}")
    return value


def env_list(
    name: str, default: list[str], *, environ: Mapping[str, str] | None = None
) -> list[str]:
    """A comma-separated list with blanks dropped; ``default`` when unset."""
    environ = os.environ if environ is None else environ
    if name not in environ:
        return list(default)
    return [part.strip() for part in environ[name].split(",") if part.strip()]


def env_url(
    name: str,
    default: str,
    *,
    schemes: tuple[str, ...],
    environ: Mapping[str, str] | None = None,
) -> str:
    """A URL whose scheme is one of ``schemes`` and which names a host; ``default`` when unset.

    Raises ImproperlyConfigured naming the variable when the value is not such a URL.
    """
    value = env_str(name, default, environ=environ)
    parsed = urlparse(value)
    if parsed.scheme not in schemes or not parsed.netloc:
        raise ImproperlyConfigured(
            f"{name} must be a URL starting with {' or '.join(s + '://' for s in schemes)}, "
            f"got {value!r}"
        )
    return value.rstrip("/") if parsed.scheme.startswith("http") else value


def env_choice(
    name: str, default: str, *, choices: tuple[str, ...], environ: Mapping[str, str] | None = None
) -> str:
    """One of ``choices`` (any case, blank meaning ``default``); ``default`` when unset.

    Raises ImproperlyConfigured naming the variable and the choices for anything else.
    """
    value = env_str(name, "", environ=environ).lower() or default
    if value not in choices:
        raise ImproperlyConfigured(
            f"{name} must be one of {', '.join(choices)}, got {env_str(name, environ=environ)!r}"
        )
    return value


def env_database(name: str, default: str, *, environ: Mapping[str, str] | None = None) -> dict:
    """A Django DATABASES entry parsed from a URL (``sqlite:///path``, ``postgres://…``)."""
    import dj_database_url

    value = env_str(name, default, environ=environ)
    try:
        config = dj_database_url.parse(value, conn_max_age=60, conn_health_checks=True)
    except (ValueError, KeyError) as error:
        raise ImproperlyConfigured(
            f"{name} is not a database URL Django can use: {error}"
        ) from None
    if not config.get("ENGINE"):
        raise ImproperlyConfigured(f"{name} names no supported database engine: {value!r}")
    return config


def env_int(
    name: str,
    default: int,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> int:
    """A whole number within ``minimum``..``maximum`` (either may be open); ``default`` when
    unset or blank.

    Raises ImproperlyConfigured naming the variable when the value is not a whole number or is
    out of range, e.g. ``DJANGO_SECURE_HSTS_SECONDS=1y``.
    """
    value = env_str(name, "", environ=environ)
    if not value:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a whole number, got {value!r}") from None
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        bounds = f"{'' if minimum is None else minimum}..{'' if maximum is None else maximum}"
        raise ImproperlyConfigured(f"{name} must be in {bounds}, got {number}")
    return number


def env_port(name: str, *, environ: Mapping[str, str] | None = None) -> int | None:
    """A TCP port to listen on, 0..65535 (0: the system picks a free one); None when unset or
    blank (nothing listens). Raises ImproperlyConfigured naming the variable otherwise."""
    if not env_str(name, "", environ=environ):
        return None
    return env_int(name, 0, minimum=0, maximum=65535, environ=environ)


def env_origin_list(
    name: str, default: list[str], *, environ: Mapping[str, str] | None = None
) -> list[str]:
    """A comma-separated list of origins such as ``https://bot.example.com`` (scheme ``http`` or
    ``https`` and a host, optionally a port; a ``*.`` wildcard host is allowed, no path);
    ``default`` when unset.

    Raises ImproperlyConfigured naming the variable and the first bad entry.
    """
    origins = env_list(name, default, environ=environ)
    for origin in origins:
        parsed = urlparse(origin)
        if (
            parsed.scheme not in ("http", "https")
            or not parsed.netloc
            or parsed.path not in ("", "/")
            or parsed.query
            or parsed.fragment
            or parsed.username is not None
        ):
            raise ImproperlyConfigured(
                f"{name} must list origins such as https://bot.example.com "
                f"(scheme and host, no path), got {origin!r}"
            )
    return [origin.rstrip("/") for origin in origins]
