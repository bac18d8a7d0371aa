"""`configure_discord_endpoints` points discord.py's REST and gateway at another server."""

from __future__ import annotations

from collections.abc import Iterator

import discord.gateway
import discord.http
import pytest
import yarl

from chat.gateway.endpoints import (
    DISCORD_API_BASE,
    DISCORD_GATEWAY_URL,
    configure_discord_endpoints,
)


@pytest.fixture(autouse=True)
def restore_discord() -> Iterator[None]:
    yield
    configure_discord_endpoints(api_base=DISCORD_API_BASE, gateway_url=None)


def test_rest_and_gateway_point_at_the_given_server() -> None:
    configure_discord_endpoints(
        api_base="http://127.0.0.1:8765/api/v10/", gateway_url="ws://127.0.0.1:8765/gateway"
    )

    route = discord.http.Route("GET", "/channels/{channel_id}", channel_id=1)
    assert route.url == "http://127.0.0.1:8765/api/v10/channels/1"
    assert (
        yarl.URL("ws://127.0.0.1:8765/gateway") == discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY
    )


def test_no_gateway_url_means_discords_own() -> None:
    configure_discord_endpoints(api_base="http://127.0.0.1:1/api/v10", gateway_url="ws://x/")
    configure_discord_endpoints(api_base=DISCORD_API_BASE, gateway_url=None)

    assert discord.http.Route.BASE == DISCORD_API_BASE
    assert str(discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY) == DISCORD_GATEWAY_URL


@pytest.mark.parametrize(
    ("api_base", "gateway_url", "named"),
    [
        ("ws://127.0.0.1/api/v10", None, "api_base"),
        ("127.0.0.1:8765", None, "api_base"),
        ("http://127.0.0.1/api/v10", "http://127.0.0.1/gateway", "gateway_url"),
    ],
)
def test_a_url_with_the_wrong_scheme_is_refused_by_name(
    api_base: str, gateway_url: str | None, named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        configure_discord_endpoints(api_base=api_base, gateway_url=gateway_url)
    assert discord.http.Route.BASE == DISCORD_API_BASE
