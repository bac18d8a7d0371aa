from __future__ import annotations

from django.apps import AppConfig


class AccountsConfig(AppConfig):
    """People who log in with Discord, and the rights Discord gives them per guild."""

    name = "accounts"
    default_auto_field = "django.db.models.BigAutoField"
