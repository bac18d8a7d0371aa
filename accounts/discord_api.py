"""What the dashboard asks Discord's OAuth2 API on a person's behalf, with their token.

Three calls, all at ``DISCORD_API_BASE`` (so the sandbox can stand in for Discord): the person
(``GET /users/@me``), their guilds with their permissions in each (``GET /users/@me/guilds``),
and a new token for a stored refresh token (``POST /oauth2/token``). The login exchanges its
code through django-allauth; these run at login (after the exchange) and in Celery's refresh
(`accounts.services.rights_refresh`), never on a page's path.

Every failure is a `DiscordOAuthError` that says which call failed and how, in a sentence a
person can read.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings
from django.utils import timezone

from accounts.models import GuildRole
from accounts.roles import guild_role

TIMEOUT_SECONDS = 10.0
GUILDS_PAGE = 200
GUILDS_PAGES_MAX = 10
"""``users/@me/guilds`` answers at most 200 guilds a page; a person is in at most a few
hundred guilds, so ten pages are read at most."""


class DiscordOAuthError(Exception):
    """Discord did not answer a call as expected. ``status`` is its HTTP status (None: no
    answer at all), ``retry_after`` the seconds a 429 asked to wait."""

    def __init__(
        self, *, call: str, status: int | None, detail: str = "", retry_after: float | None = None
    ) -> None:
        self.call, self.status, self.detail, self.retry_after = call, status, detail, retry_after
        super().__init__(self.sentence())

    @property
    def revoked(self) -> bool:
        """The token (or the refresh token) no longer works: revoked, expired or invalid."""
        return self.status in (400, 401)

    def sentence(self) -> str:
        if self.status is None:
            return f"Discord could not be reached for {self.call} ({self.detail})."
        if self.status == 429:
            wait = f" Try again in {self.retry_after:g} s." if self.retry_after else ""
            return f"Discord is rate limiting {self.call} (429).{wait}"
        if self.call == "oauth2/token" and self.status == 400:
            return (
                "Discord refused the login code: it was used already, has expired, or was made "
                "for another redirect URL. Start again."
            )
        if self.status in (400, 401):
            return (
                f"Discord refused the token for {self.call} ({self.status}): it was revoked or "
                "has expired."
            )
        if self.status >= 500:
            return f"Discord failed to answer {self.call} ({self.status}); try again shortly."
        return f"Discord answered {self.call} with {self.status}: {self.detail}".rstrip(": ")


@dataclass(frozen=True)
class TokenGrant:
    """A fresh access token, the refresh token that comes with it, and when it expires."""

    access_token: str
    refresh_token: str
    expires_at: dt.datetime | None


def oauth_session() -> requests.Session:
    """An HTTP session whose every request gives up after `TIMEOUT_SECONDS`."""
    session = requests.Session()
    request = session.request

    def bounded(method: str, url: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", TIMEOUT_SECONDS)
        return request(method, url, **kwargs)

    session.request = bounded  # type: ignore[method-assign]
    return session


def api_url(path: str) -> str:
    return settings.DISCORD_API_BASE.rstrip("/") + path


def _answer(call: str, send: Any) -> Any:
    """The JSON body of ``send()``'s answer; `DiscordOAuthError` for any other outcome."""
    try:
        response = send()
    except requests.RequestException as error:
        raise DiscordOAuthError(call=call, status=None, detail=type(error).__name__) from None
    if response.status_code != 200:
        retry_after = None
        if response.status_code == 429:
            try:
                retry_after = float(response.headers.get("Retry-After", ""))
            except ValueError:
                retry_after = None
        detail = response.text[:200]
        raise DiscordOAuthError(
            call=call, status=response.status_code, detail=detail, retry_after=retry_after
        )
    try:
        return response.json()
    except ValueError:
        raise DiscordOAuthError(call=call, status=200, detail="the answer is not JSON") from None


def current_user(*, access_token: str, session: requests.Session) -> dict[str, Any]:
    """``GET /users/@me``: the person the token belongs to (``id``, ``username``, …)."""
    headers = {"Authorization": f"Bearer {access_token}"}
    body = _answer("users/@me", lambda: session.get(api_url("/users/@me"), headers=headers))
    if not isinstance(body, dict) or not str(body.get("id", "")).isdigit():
        raise DiscordOAuthError(call="users/@me", status=200, detail="no user id in the answer")
    return body


def current_user_guilds(*, access_token: str, session: requests.Session) -> list[dict[str, Any]]:
    """``GET /users/@me/guilds``, every page: the person's guilds with ``permissions`` (their
    guild-level bits, a string) and ``owner``."""
    headers = {"Authorization": f"Bearer {access_token}"}
    guilds: list[dict[str, Any]] = []
    after = "0"
    for _ in range(GUILDS_PAGES_MAX):
        params = {"limit": str(GUILDS_PAGE), "after": after}
        page = _answer(
            "users/@me/guilds",
            lambda params=params: session.get(
                api_url("/users/@me/guilds"), headers=headers, params=params
            ),
        )
        if not isinstance(page, list):
            raise DiscordOAuthError(call="users/@me/guilds", status=200, detail="not a list")
        guilds.extend(g for g in page if isinstance(g, dict) and str(g.get("id", "")).isdigit())
        if len(page) < GUILDS_PAGE:
            break
        after = str(max(int(g["id"]) for g in guilds))
    return guilds


def guild_roles(guilds: list[dict[str, Any]]) -> dict[int, tuple[GuildRole, int]]:
    """Per guild of ``users/@me/guilds``, the role its permissions give, with those bits;
    guilds that give none are left out."""
    roles: dict[int, tuple[GuildRole, int]] = {}
    for guild in guilds:
        try:
            permissions = int(guild.get("permissions") or 0)
        except (TypeError, ValueError):
            permissions = 0
        role = guild_role(permissions, owner=bool(guild.get("owner")))
        if role is not None:
            roles[int(guild["id"])] = (role, permissions)
    return roles


def code_exchange(
    *, code: str, redirect_uri: str, client_id: str, client_secret: str, session: requests.Session
) -> dict[str, Any]:
    """``POST /oauth2/token`` (``grant_type=authorization_code``): the token answer for the
    login's ``code``, which Discord gives only for the ``redirect_uri`` the code was made
    for."""
    data = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": redirect_uri,
        "client_id": client_id,
        "client_secret": client_secret,
    }
    body = _answer("oauth2/token", lambda: session.post(api_url("/oauth2/token"), data=data))
    if not isinstance(body, dict) or not body.get("access_token"):
        raise DiscordOAuthError(call="oauth2/token", status=200, detail="no access token")
    return body


def token_refresh(*, refresh_token: str, session: requests.Session) -> TokenGrant:
    """``POST /oauth2/token`` (``grant_type=refresh_token``) with the application's
    credentials: a new access token. `DiscordOAuthError` with ``revoked`` when Discord no
    longer honours the refresh token."""
    data = {
        "grant_type": "refresh_token",
        "refresh_token": refresh_token,
        "client_id": settings.DISCORD_CLIENT_ID,
        "client_secret": settings.DISCORD_CLIENT_SECRET,
    }
    body = _answer("oauth2/token", lambda: session.post(api_url("/oauth2/token"), data=data))
    if not isinstance(body, dict) or not body.get("access_token"):
        raise DiscordOAuthError(call="oauth2/token", status=200, detail="no access token")
    expires_in = body.get("expires_in")
    return TokenGrant(
        access_token=str(body["access_token"]),
        refresh_token=str(body.get("refresh_token") or refresh_token),
        expires_at=timezone.now() + dt.timedelta(seconds=int(expires_in))
        if isinstance(expires_in, int | float)
        else None,
    )
