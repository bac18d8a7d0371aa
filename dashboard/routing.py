"""Websocket routes served by daphne through ``botproject.asgi`` (behind session auth)."""

from __future__ import annotations

from django.urls import URLPattern

websocket_urlpatterns: list[URLPattern] = []
