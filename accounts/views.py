"""``/accounts/discord/login/`` and its callback: django-allauth's OAuth2 views over
`accounts.adapter.DashboardDiscordAdapter`.

The login view answers 404 while Discord login is not configured (``DISCORD_CLIENT_ID`` and
``DISCORD_CLIENT_SECRET``). The callback runs in one transaction that is rolled back unless the
person ends up logged in, so a refused or failed login leaves no account, token or right
behind.
"""

from __future__ import annotations

from typing import Any

from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from django.conf import settings
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse

from accounts.adapter import DashboardDiscordAdapter


class _Configured:
    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.DISCORD_LOGIN_ENABLED:
            raise Http404("Log in with Discord is not configured")
        return super().dispatch(request, *args, **kwargs)  # type: ignore[misc]


class DiscordLoginView(_Configured, OAuth2LoginView):
    """A POST sends the browser to Discord's authorize page (a GET shows a button to do so)."""


class DiscordCallbackView(_Configured, OAuth2CallbackView):
    """Where Discord sends the browser back: checks the state, exchanges the code, reads the
    person and their guilds, then logs them in (or says why not)."""

    def dispatch(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        with transaction.atomic():
            response = super().dispatch(request, *args, **kwargs)
            if not (response.status_code in (301, 302) and request.user.is_authenticated):
                transaction.set_rollback(True)
        return response


discord_login = DiscordLoginView.adapter_view(DashboardDiscordAdapter)
discord_callback = DiscordCallbackView.adapter_view(DashboardDiscordAdapter)
