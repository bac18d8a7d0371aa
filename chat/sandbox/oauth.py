"""Discord's OAuth2 code flow, as the sandbox serves it, so "Log in with Discord" runs
against the sandbox in `make run` and in tests.

- ``GET /oauth2/authorize?client_id&redirect_uri&response_type=code&scope&state``: a consent
  page that names the application and the scopes and lets you pick one of the world's people
  (alice, bob, carol in the demo); picking one sends the browser to ``redirect_uri`` with
  ``code`` and the unchanged ``state``, cancelling sends ``error=access_denied``;
- ``POST /api/v10/oauth2/token``: ``authorization_code`` (the code once, within ten minutes,
  with the same ``redirect_uri``) and ``refresh_token`` grants, with the application's
  ``client_id`` and ``client_secret`` (form fields or HTTP Basic); errors as Discord's
  ``{"error": "invalid_grant"}``;
- ``POST /api/v10/oauth2/token/revoke``: the token (access or refresh) and its pair stop
  working;
- ``GET /api/v10/users/@me`` and ``/users/@me/guilds`` with ``Authorization: Bearer <token>``
  answer for the token's person (`Sandbox.user_guilds`: their guilds with ``permissions``).

The application's client id is its id (the bot's user id), as on Discord; its secret is
`OAuthGrants.client_secret`.
"""

from __future__ import annotations

import base64
import html
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode, urlsplit

from aiohttp import web

if TYPE_CHECKING:
    from chat.sandbox.state import Sandbox

CODE_LIFETIME = 600.0
ACCESS_LIFETIME = 604_800.0
"""Discord's access tokens last a week."""
SCOPES = frozenset({"identify", "guilds", "email", "bot", "applications.commands"})


class OAuthError(Exception):
    """A refused token request: HTTP ``status`` and Discord's ``error`` word."""

    def __init__(self, status: int, error: str, description: str) -> None:
        super().__init__(f"{status} {error}: {description}")
        self.status, self.error, self.description = status, error, description

    def body(self) -> dict[str, str]:
        return {"error": self.error, "error_description": self.description}


@dataclass
class _Code:
    user_id: int
    redirect_uri: str
    scopes: tuple[str, ...]
    expires_at: float


@dataclass
class _Grant:
    user_id: int
    scopes: tuple[str, ...]
    access_token: str
    refresh_token: str
    expires_at: float
    revoked: bool = False


class OAuthGrants:
    """The codes and tokens the sandbox has handed out, for one application."""

    def __init__(self, sandbox: Sandbox, *, clock: Callable[[], float]) -> None:
        self._sandbox = sandbox
        self._clock = clock
        self.client_secret = "sandbox-client-secret"
        self._codes: dict[str, _Code] = {}
        self._grants: list[_Grant] = []

    @property
    def client_id(self) -> str:
        return str(self._sandbox.bot_user_id)

    def people(self) -> list[dict[str, Any]]:
        """Who may log in on the consent page: every user who is not a bot."""
        return [u for u in self._sandbox.users() if not u["bot"]]

    def authorize(self, *, user_id: int, redirect_uri: str, scopes: tuple[str, ...]) -> str:
        """A one-use code for ``user_id`` (the consent page's answer)."""
        self._sandbox.user(user_id)
        code = secrets.token_urlsafe(24)
        self._codes[code] = _Code(user_id, redirect_uri, scopes, self._clock() + CODE_LIFETIME)
        return code

    def exchange(self, form: dict[str, str], authorization: str) -> dict[str, Any]:
        """The token endpoint: raises `OAuthError` as Discord refuses."""
        self._check_client(form, authorization)
        grant_type = form.get("grant_type", "")
        if grant_type == "authorization_code":
            code = self._codes.pop(form.get("code", ""), None)
            if code is None or code.expires_at < self._clock():
                raise OAuthError(400, "invalid_grant", 'Invalid "code" in request.')
            if form.get("redirect_uri", "") != code.redirect_uri:
                raise OAuthError(400, "invalid_grant", 'Invalid "redirect_uri" in request.')
            return self._issue(code.user_id, code.scopes)
        if grant_type == "refresh_token":
            grant = self._live(refresh_token=form.get("refresh_token", ""))
            if grant is None:
                raise OAuthError(400, "invalid_grant", "Invalid refresh token.")
            grant.revoked = True
            return self._issue(grant.user_id, grant.scopes)
        raise OAuthError(400, "unsupported_grant_type", f"Unsupported grant type {grant_type!r}.")

    def revoke(self, form: dict[str, str], authorization: str) -> None:
        """``/oauth2/token/revoke``: the token given (either of a pair) stops working."""
        self._check_client(form, authorization)
        token = form.get("token", "")
        for grant in self._grants:
            if token in (grant.access_token, grant.refresh_token):
                grant.revoked = True

    def revoke_user(self, user_id: int) -> int:
        """Revoke every token of ``user_id`` (they deauthorised the application)."""
        live = [g for g in self._grants if g.user_id == user_id and not g.revoked]
        for grant in live:
            grant.revoked = True
        return len(live)

    def expire_user(self, user_id: int) -> None:
        """Let every access token of ``user_id`` expire now (refresh tokens still work)."""
        for grant in self._grants:
            if grant.user_id == user_id:
                grant.expires_at = self._clock() - 1

    def user_of(self, access_token: str) -> int | None:
        """The person a live access token belongs to; None for an unknown, revoked or expired
        one."""
        for grant in self._grants:
            if grant.access_token == access_token:
                alive = not grant.revoked and grant.expires_at > self._clock()
                return grant.user_id if alive else None
        return None

    def _live(self, *, refresh_token: str) -> _Grant | None:
        return next(
            (g for g in self._grants if g.refresh_token == refresh_token and not g.revoked), None
        )

    def _issue(self, user_id: int, scopes: tuple[str, ...]) -> dict[str, Any]:
        grant = _Grant(
            user_id=user_id,
            scopes=scopes,
            access_token=secrets.token_urlsafe(24),
            refresh_token=secrets.token_urlsafe(24),
            expires_at=self._clock() + ACCESS_LIFETIME,
        )
        self._grants.append(grant)
        return {
            "access_token": grant.access_token,
            "token_type": "Bearer",
            "expires_in": int(ACCESS_LIFETIME),
            "refresh_token": grant.refresh_token,
            "scope": " ".join(scopes),
        }

    def _check_client(self, form: dict[str, str], authorization: str) -> None:
        client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
        if authorization.startswith("Basic "):
            try:
                decoded = base64.b64decode(authorization[6:]).decode()
            except (ValueError, UnicodeDecodeError):
                decoded = ""
            client_id, _, secret = decoded.partition(":")
        if client_id != self.client_id or not secrets.compare_digest(secret, self.client_secret):
            raise OAuthError(401, "invalid_client", "Invalid client credentials.")


def authorize_routes(sandbox: Sandbox) -> web.RouteTableDef:
    """The consent page at ``/oauth2/authorize`` (GET shows it, POST answers it)."""
    routes = web.RouteTableDef()
    grants = sandbox.oauth

    def _request(query: Any) -> tuple[str, tuple[str, ...], str] | web.Response:
        if query.get("client_id") != grants.client_id:
            return _page("Unknown application", "<p>No application has this client id.</p>", 400)
        if query.get("response_type", "code") != "code":
            return _page("Unsupported", "<p>Only <code>response_type=code</code>.</p>", 400)
        redirect_uri = query.get("redirect_uri", "")
        if urlsplit(redirect_uri).scheme not in ("http", "https"):
            return _page(
                "Invalid redirect", "<p>Give an http(s) <code>redirect_uri</code>.</p>", 400
            )
        scopes = tuple(query.get("scope", "").split())
        if "identify" not in scopes or not set(scopes) <= SCOPES:
            return _page(
                "Invalid scope", f"<p>Scopes asked: {html.escape(' '.join(scopes))}.</p>", 400
            )
        return redirect_uri, scopes, query.get("state", "")

    @routes.get("/oauth2/authorize")
    async def consent(request: web.Request) -> web.Response:
        asked = _request(request.query)
        if isinstance(asked, web.Response):
            return asked
        redirect_uri, scopes, state = asked
        app_name = html.escape(sandbox.application()["name"])
        hidden = "".join(
            f'<input type="hidden" name="{k}" value="{html.escape(v)}">'
            for k, v in (
                ("client_id", grants.client_id),
                ("redirect_uri", redirect_uri),
                ("scope", " ".join(scopes)),
                ("state", state),
                ("response_type", "code"),
            )
        )
        people = "".join(
            f'<button type="submit" name="user_id" value="{p["id"]}">'
            f"Log in as {html.escape(p['username'])}</button> "
            for p in grants.people()
        )
        body = (
            f"<p><strong>{app_name}</strong> wants to: "
            f"{html.escape(', '.join(sorted(scopes)))}.</p>"
            f"<p>Redirect: <code>{html.escape(redirect_uri)}</code></p>"
            f'<form method="post">{hidden}<p>{people}</p>'
            '<p><button type="submit" name="cancel" value="1">Cancel</button></p></form>'
        )
        return _page("Authorize (Discord sandbox)", body, 200)

    @routes.post("/oauth2/authorize")
    async def answer(request: web.Request) -> web.Response:
        form = await request.post()
        asked = _request(form)
        if isinstance(asked, web.Response):
            return asked
        redirect_uri, scopes, state = asked
        if form.get("cancel"):
            params = {"error": "access_denied", "error_description": "The user cancelled."}
        else:
            raw = str(form.get("user_id", ""))
            if not raw.isdigit() or int(raw) not in {int(p["id"]) for p in grants.people()}:
                return _page("Unknown user", "<p>Pick one of the people listed.</p>", 400)
            code = grants.authorize(user_id=int(raw), redirect_uri=redirect_uri, scopes=scopes)
            params = {"code": code}
        if state:
            params["state"] = state
        separator = "&" if "?" in redirect_uri else "?"
        raise web.HTTPFound(f"{redirect_uri}{separator}{urlencode(params)}")

    return routes


def _page(title: str, body: str, status: int) -> web.Response:
    text = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"</head><body><h1>{html.escape(title)}</h1>{body}</body></html>"
    )
    return web.Response(text=text, content_type="text/html", status=status)
