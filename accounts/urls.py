from __future__ import annotations

from django.urls import path

from accounts import views

urlpatterns = [
    path("accounts/discord/login/", views.discord_login, name="discord_login"),
    path("accounts/discord/login/callback/", views.discord_callback, name="discord_callback"),
]
