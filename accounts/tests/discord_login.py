"""Logging in with Discord through a running sandbox's OAuth2 pages, as a browser would, with
Django's test client on the dashboard's side."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
from asgiref.sync import sync_to_async
from django.http import HttpResponse
from django.test import Client

from chat.sandbox.server import SandboxServer


def discord_login_settings(settings: Any, server: SandboxServer) -> None:
    """Point Log in with Discord (and every Discord call) at ``server``."""
    grants = server.sandbox.oauth
    settings.DISCORD_API_BASE = server.api_base
    settings.DISCORD_OAUTH_AUTHORIZE_URL = server.oauth_authorize_url
    settings.DISCORD_CLIENT_ID = grants.client_id
    settings.DISCORD_CLIENT_SECRET = grants.client_secret
    settings.DISCORD_LOGIN_ENABLED = True
    settings.SOCIALACCOUNT_PROVIDERS = {
        "discord": {
            **settings.SOCIALACCOUNT_PROVIDERS["discord"],
            "APPS": [{"client_id": grants.client_id, "secret": grants.client_secret}],
        }
    }


async def login_start(client: Client, **form: str) -> str:
    """Press "Log in with Discord": the authorize URL the dashboard sends the browser to."""
    response = await sync_to_async(client.post)("/accounts/discord/login/", form)
    assert response.status_code == 302, response.content[:500]
    return response["Location"]


async def consent(authorize_url: str, user_id: int | None, **changed: str) -> str:
    """Answer the sandbox's consent page as ``user_id`` (None: cancel), with any of the
    request's parameters ``changed``; returns where the sandbox sends the browser back."""
    parts = urlsplit(authorize_url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()} | changed
    async with httpx.AsyncClient() as http:
        page = await http.get(f"{parts.scheme}://{parts.netloc}{parts.path}", params=query)
        assert page.status_code == 200, page.text
        answer = {"user_id": str(user_id)} if user_id is not None else {"cancel": "1"}
        reply = await http.post(
            f"{parts.scheme}://{parts.netloc}{parts.path}", data={**query, **answer}
        )
    assert reply.status_code == 302, reply.text
    return reply.headers["location"]


async def callback(client: Client, back_url: str) -> HttpResponse:
    """Follow the sandbox's redirect back to the dashboard's callback."""
    parts = urlsplit(back_url)
    return await sync_to_async(client.get)(f"{parts.path}?{parts.query}")


async def discord_login(client: Client, user_id: int | None, **form: str) -> HttpResponse:
    """The whole round trip: start, consent as ``user_id``, come back; the callback's answer."""
    return await callback(client, await consent(await login_start(client, **form), user_id))
