"""Websocket routes served by daphne through ``botproject.asgi`` (behind session auth)."""

from __future__ import annotations

from django.urls import URLPattern, path

from dashboard.consumers import ChannelConsumer, OverviewConsumer, PlaygroundConsumer

websocket_urlpatterns: list[URLPattern] = [
    path("ws/overview/", OverviewConsumer.as_asgi()),
    path("ws/channels/<int:channel_id>/", ChannelConsumer.as_asgi()),
    path("ws/playground/<int:channel_id>/", PlaygroundConsumer.as_asgi()),
]
