"""Template context for the login page."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest


def login_options(request: HttpRequest) -> dict[str, bool]:
    """``discord_login``: the login page offers "Log in with Discord"."""
    return {"discord_login": settings.DISCORD_LOGIN_ENABLED}
