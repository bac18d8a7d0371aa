"""django-allauth's Discord provider, pointed at ``DISCORD_OAUTH_AUTHORIZE_URL`` and
``DISCORD_API_BASE`` and held to this dashboard's rules.

- The code flow asks for ``identify guilds`` with a ``state`` allauth keeps in the session and
  drops once used, so a forged or replayed ``state`` matches nothing.
- After the code exchange the person and their guilds are read (`accounts.discord_api`); any
  failure there (401, 429, 5xx, no answer) ends the login on a page saying so.
- A Discord user is only ever their own dashboard person: never connected to an existing
  account (no ``connect`` process, no e-mail asked for or matched, no username matched), and a
  staff account never logs in through Discord.
- A person with no right in any configured guild is not logged in, and no account is made.
- The person's rights are written in the same transaction as their account (the callback runs
  in one, `accounts.views.discord_callback`), so a refused login leaves nothing behind.
"""

from __future__ import annotations

from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialLogin
from allauth.socialaccount.providers.base import AuthProcess, ProviderException
from allauth.socialaccount.providers.discord.provider import DiscordProvider
from allauth.socialaccount.providers.discord.views import DiscordOAuth2Adapter
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.discord_api import (
    DiscordOAuthError,
    api_url,
    code_exchange,
    current_user,
    current_user_guilds,
    guild_roles,
)
from accounts.models import GuildRole, RightSource
from accounts.services import guild_rights_replace
from personas.models import GuildConfig

SCOPES = ["identify", "guilds"]


class DiscordLoginFailed(ProviderException):
    """Discord did not answer a call of the login as expected (`DiscordOAuthError` inside)."""

    def __init__(self, error: DiscordOAuthError) -> None:
        self.error = error
        super().__init__(str(error))


class DashboardDiscordAdapter(DiscordOAuth2Adapter):
    """allauth's Discord adapter, with Discord's URLs from the settings; reads the person's
    guilds too, before anything is saved."""

    @property
    def authorize_url(self) -> str:  # type: ignore[override]
        return settings.DISCORD_OAUTH_AUTHORIZE_URL

    @property
    def access_token_url(self) -> str:  # type: ignore[override]
        return api_url("/oauth2/token")

    @property
    def profile_url(self) -> str:  # type: ignore[override]
        return api_url("/users/@me")

    def get_access_token_data(
        self, request: HttpRequest, app: Any, client: Any, pkce_code_verifier: Any = None
    ) -> dict[str, Any]:
        """The code exchange, with Discord's refusals told apart (`code_exchange`)."""
        from allauth.socialaccount.adapter import get_adapter

        with get_adapter().get_requests_session() as session:
            try:
                data = code_exchange(
                    code=request.GET.get("code", ""),
                    redirect_uri=client.callback_url,
                    client_id=client.consumer_key,
                    client_secret=client.consumer_secret,
                    session=session,
                )
            except DiscordOAuthError as error:
                raise DiscordLoginFailed(error) from None
        self.did_fetch_access_token = True
        return data

    def complete_login(self, request: HttpRequest, app: Any, token: Any, **kwargs: Any):
        from allauth.socialaccount.adapter import get_adapter

        with get_adapter().get_requests_session() as session:
            try:
                person = current_user(access_token=token.token, session=session)
                guilds = current_user_guilds(access_token=token.token, session=session)
            except DiscordOAuthError as error:
                raise DiscordLoginFailed(error) from None
        login = self.get_provider().sociallogin_from_response(request, person)
        login.discord_roles = guild_roles(guilds)  # type: ignore[attr-defined]
        return login


class DashboardDiscordProvider(DiscordProvider):
    """The Discord provider with `DashboardDiscordAdapter`, the scopes ``identify guilds``, and
    no e-mail taken from Discord."""

    oauth2_adapter_class = DashboardDiscordAdapter

    def get_default_scope(self) -> list[str]:
        return list(SCOPES)

    def extract_common_fields(self, data: dict[str, Any]) -> dict[str, Any]:
        return {"username": f"discord-{data['id']}", "first_name": _shown_name(data)[:150]}

    def extract_email_addresses(self, data: dict[str, Any]) -> list:
        return []


def _shown_name(data: dict[str, Any]) -> str:
    return str(data.get("global_name") or data.get("username") or data["id"])


class DashboardSocialAdapter(DefaultSocialAccountAdapter):
    """The dashboard's rules for a Discord login (see the module's docstring)."""

    def pre_social_login(self, request: HttpRequest, sociallogin: SocialLogin) -> None:
        if sociallogin.state.get("process", AuthProcess.LOGIN) != AuthProcess.LOGIN:
            raise _refused(
                request,
                "Discord logs you in as yourself only: it cannot be connected to another "
                "dashboard account.",
            )
        user = sociallogin.user if sociallogin.is_existing else None
        if user is not None and (user.is_staff or user.is_superuser or not user.is_active):
            raise _refused(
                request,
                "This Discord account belongs to a dashboard account that cannot log in with "
                "Discord. Staff accounts log in with their username and password.",
            )
        roles = _configured_roles(sociallogin)
        if not roles:
            raise _refused(
                request,
                "Your Discord account has neither Manage Server nor Manage Messages in any "
                "server this bot is configured for, so there is nothing here for you to see.",
            )
        if user is not None:
            guild_rights_replace(user=user, roles=roles, source=RightSource.LOGIN)

    def populate_user(self, request: HttpRequest, sociallogin: SocialLogin, data: dict) -> Any:
        user = super().populate_user(request, sociallogin, data)
        user.email = ""
        user.is_staff = user.is_superuser = False
        return user

    def save_user(self, request: HttpRequest, sociallogin: SocialLogin, form: Any = None) -> Any:
        user = super().save_user(request, sociallogin, form)
        guild_rights_replace(
            user=user, roles=_configured_roles(sociallogin), source=RightSource.LOGIN
        )
        return user

    def is_open_for_signup(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        return True

    def on_authentication_error(
        self,
        request: HttpRequest,
        provider: Any,
        error: Any = None,
        exception: Exception | None = None,
        extra_context: dict | None = None,
    ) -> None:
        raise ImmediateHttpResponse(login_failed(request, *_failure(error, exception)))


def _configured_roles(sociallogin: SocialLogin) -> dict[int, tuple[GuildRole, int]]:
    roles: dict[int, tuple[GuildRole, int]] = getattr(sociallogin, "discord_roles", {})
    configured = set(
        GuildConfig.objects.filter(guild_id__in=list(roles)).values_list("guild_id", flat=True)
    )
    return {guild_id: roles[guild_id] for guild_id in configured}


def _failure(error: Any, exception: Exception | None) -> tuple[str, int]:
    """The sentence and status of the page for a failed login."""
    if str(error) == "cancelled":
        return "You cancelled the login on Discord; nothing was changed.", 400
    if isinstance(exception, DiscordLoginFailed):
        status = exception.error.status
        if exception.error.call == "oauth2/token" and status == 400:
            return str(exception.error), 400
        return str(exception.error), 503 if status == 429 or status is None else 502
    if isinstance(exception, OAuth2Error):
        return (
            "Discord refused the login code: it was used already, has expired, or was made "
            "for another redirect URL. Start again.",
            400,
        )
    if exception is not None:
        return f"Discord could not be reached ({type(exception).__name__}); try again.", 502
    return (
        "This login did not start here or was already used (its state does not match this "
        "browser's). Start again.",
        400,
    )


def login_failed(request: HttpRequest, reason: str, status: int) -> HttpResponse:
    """The page a failed or refused Discord login ends on: why, and a way back."""
    return render(request, "accounts/login_failed.html", {"reason": reason}, status=status)


def _refused(request: HttpRequest, reason: str) -> ImmediateHttpResponse:
    return ImmediateHttpResponse(login_failed(request, reason, 403))


class DashboardAccountAdapter(DefaultAccountAdapter):
    """allauth's account side: its only message is the dashboard's own, on login."""

    def add_message(
        self,
        request: HttpRequest,
        level: int,
        message_template: str | None = None,
        message_context: dict | None = None,
        extra_tags: str = "",
        message: str | None = None,
    ) -> None:
        if message_template and message_template.endswith("logged_in.txt"):
            user = (message_context or {}).get("user") or request.user
            name = getattr(user, "first_name", "") or user.get_username()
            messages.success(request, f"Logged in with Discord as {name}.")
