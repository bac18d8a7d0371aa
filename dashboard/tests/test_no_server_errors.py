"""No dashboard URL answers 500, whatever its path ids and query values say.

Every URL pattern of the dashboard (and the login page) is requested with odd values in its
path parameters and in every query parameter a view reads: Unicode digits (``str.isdigit()``
accepts ``²``), numbers past any database column, empty, negative, text. As an anonymous
visitor, a moderator and an admin, each answer is a page, a redirect, a 400/403/404 — never a
server error (the test client raises the view's exception, so a 500 fails the test with it).
"""

from __future__ import annotations

import re
from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dashboard.ids import ID_MAX, parse_id

pytestmark = pytest.mark.django_db

GUILD = "1100000000000000001"
ODD = [
    "²",
    "٣",
    "１２",
    "",
    " ",
    "0",
    "-1",
    "+1",
    "1e3",
    "1.5",
    str(ID_MAX),
    str(ID_MAX + 1),
    "9" * 30,
    "9" * 5000,
    "0x10",
    "%00",
    "null",
    "json",
    "png",
    GUILD,
]
odd_values = st.one_of(
    st.sampled_from(ODD),
    st.integers(min_value=-(10**25), max_value=10**25).map(str),
    st.text(max_size=12),
)
QUERY_NAMES = (
    "persona",
    "as",
    "text",
    "format",
    "guild",
    "channel",
    "status",
    "reason",
    "since",
    "until",
    "page",
    "message",
    "avatar_url",
)
_PARAMETER = re.compile(r"<(?:\w+:)?(\w+)>")


def _routes(patterns=None, prefix: str = "") -> list[str]:
    """Every route under the dashboard and the login pages, e.g.
    ``guilds/<id:guild_id>/personas/<id:persona_id>/`` (Django's admin is its own)."""
    routes = []
    for entry in get_resolver().url_patterns if patterns is None else patterns:
        route = str(entry.pattern)
        if isinstance(entry, URLResolver):
            if route != "admin/":
                routes += _routes(entry.url_patterns, prefix + route)
        elif isinstance(entry, URLPattern) and "(?P<path>" not in route:  # not media files
            routes.append(prefix + route)
    return routes


ROUTES = _routes()


def _fill(route: str, values: dict[str, str]) -> str:
    return "/" + _PARAMETER.sub(lambda match: quote(values[match[1]], safe=""), route)


@pytest.fixture
def clients(guild, admin_client, moderator_client, settings) -> dict[str, Client]:
    # Nothing to reach: a view that would ask Discord or the sandbox is refused at once.
    settings.DISCORD_TOKEN = ""
    settings.DISCORD_API_BASE = "http://127.0.0.1:9/api/v10"
    return {"anonymous": Client(), "moderator": moderator_client, "admin": admin_client}


def test_every_dashboard_route_is_walked():
    assert len(ROUTES) >= 30
    assert "why/" in ROUTES and "turns/<int:turn_id>/" in ROUTES


@settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    route=st.sampled_from(ROUTES),
    who=st.sampled_from(["anonymous", "moderator", "admin"]),
    values=st.lists(odd_values, min_size=4, max_size=4),
    query=st.dictionaries(st.sampled_from(QUERY_NAMES), odd_values, max_size=5),
)
@example(route="why/", who="moderator", values=[""] * 4, query={"message": "²"})
@example(route="turns/", who="admin", values=[""] * 4, query={"guild": "9" * 5000})
@example(
    route="guilds/<int:guild_id>/personas/<int:persona_id>/",
    who="admin",
    values=[GUILD, str(ID_MAX + 1), "", ""],
    query={},
)
def test_odd_ids_and_query_values_never_answer_500(clients, route, who, values, query):
    names = _PARAMETER.findall(route)
    filled = _fill(route, dict(zip(names, values, strict=False)))

    response = clients[who].get(filled, query)

    assert response.status_code < 500, (filled, query, response.status_code)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("123", 123),
        (" 42 ", 42),
        (str(ID_MAX), ID_MAX),
        (str(ID_MAX + 1), None),
        ("²", None),
        ("٣", None),
        ("１２", None),
        ("-1", None),
        ("+1", None),
        ("", None),
        (None, None),
        ("9" * 5000, None),
    ],
)
def test_an_id_is_ascii_digits_within_a_bigint(text, expected):
    assert parse_id(text) == expected
