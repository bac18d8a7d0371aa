"""The worker's composition root reads the model endpoint when asked for, not at import, and
records only the gateway latencies it knows."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from pytest_django.fixtures import Settings

from chat.gateway.client import PersonaBotClient
from chat.llm.base import ChatRequest, ModelSpec
from chat.llm.fake_server import FakeLLMServer
from chat.runtime import (
    llm_client_from_settings,
    vision_client_from_settings,
    vision_model_from_settings,
)
from chat.services.turn_request import TurnCaches
from chat.worker import WorkerConfig, known_latencies, proxy_resolver_from_settings


async def test_client_uses_the_base_url_and_key_configured_at_call_time(settings: Settings) -> None:
    async with FakeLLMServer() as fake_server:
        settings.LLM_BASE_URL = fake_server.base_url
        settings.LLM_API_KEY = "key-from-settings"

        async with llm_client_from_settings() as client:
            request = ChatRequest(ModelSpec("m"), [{"role": "user", "content": "hi"}])
            completion = await client.complete(request)

    assert completion.text == "I am the fake model m. You said: hi"
    assert fake_server.requests[0].headers["Authorization"] == "Bearer key-from-settings"


def test_an_empty_base_url_is_named_in_the_error(settings: Settings) -> None:
    settings.LLM_BASE_URL = ""

    with pytest.raises(ImproperlyConfigured, match="LLM_BASE_URL"):
        llm_client_from_settings()


@pytest.mark.parametrize(
    ("guild_id", "expected"),
    [(None, True), (0b101 << 22, False), (0b110 << 22, True), (0b100 << 22, True)],
)
def test_a_worker_owns_the_guilds_of_its_shards(guild_id, expected) -> None:
    config = WorkerConfig(
        token="t", api_base="http://x", gateway_url=None, shard_ids=[0, 2], shard_count=4
    )
    assert config.on_my_shards(guild_id) is expected


async def test_no_vision_model_and_no_proxy_system_unless_configured(settings: Settings) -> None:
    settings.LLM_BASE_URL = "http://127.0.0.1:9/v1"
    settings.LLM_VISION_MODEL = ""
    settings.LLM_VISION_BASE_URL = "http://127.0.0.1:9/v1"
    settings.PLURALKIT_API_BASE = ""

    assert vision_client_from_settings() is None
    async with llm_client_from_settings() as shared:
        assert vision_model_from_settings(shared) is None
    assert proxy_resolver_from_settings() is None


async def test_the_vision_model_shares_the_endpoint_unless_it_has_its_own(
    settings: Settings,
) -> None:
    settings.LLM_BASE_URL = "http://127.0.0.1:9/v1"
    settings.LLM_VISION_MODEL = "llava:13b"
    settings.LLM_VISION_BASE_URL = ""
    assert vision_client_from_settings() is None
    async with llm_client_from_settings() as shared:
        vision = vision_model_from_settings(shared)
        assert vision is not None and vision.client is shared
        assert (vision.model.name, vision.model.supports_vision) == ("llava:13b", True)

    async with FakeLLMServer() as vision_server:
        settings.LLM_VISION_BASE_URL = vision_server.base_url
        own = vision_client_from_settings()
        assert own is not None
        async with own:
            vision = vision_model_from_settings(own)
            request = ChatRequest(model=vision.model, messages=[{"role": "user", "content": "?"}])
            await vision.client.complete(request)
        assert [body["model"] for body in vision_server.chat_bodies] == ["llava:13b"]


async def test_a_client_remembers_the_speakers_of_as_many_messages_as_it_is_sized_for() -> None:
    client = PersonaBotClient(window_channels=2, recent_messages=3)  # never connected

    for message_id in range(1, 5):
        client.adapter.recent.put(message_id, "Tomori")

    assert len(client.adapter.recent) == 3
    assert client.adapter.recent.get(1) is None
    assert client.adapter.recent.get(4) == "Tomori"


def test_warm_contexts_beyond_the_configured_number_are_dropped_oldest_first() -> None:
    caches = TurnCaches(warm_contexts=2)
    contexts = [object(), object(), object()]

    for channel_id, context in enumerate(contexts):
        caches.remember_context(channel_id, 1, context)

    assert caches.warm_contexts() == {(1, 1): contexts[1], (2, 1): contexts[2]}


def test_only_known_latencies_are_recorded() -> None:
    # NaN: no heartbeat acknowledged yet; infinity: no heartbeat running (reconnecting).
    reported = [(0, 0.042), (1, float("nan")), (2, float("inf"))]

    assert known_latencies(reported) == {0: 0.042}


def test_the_startup_heap_is_out_of_the_collectors_reach():
    # In a process of its own: freezing is for a worker's entry point, never a test process.
    script = (
        "import gc, django; django.setup()\n"
        "import chat.worker\n"
        "before = len(gc.get_objects())\n"
        "chat.worker.freeze_startup_heap()\n"
        "print(before, gc.get_freeze_count(), len(gc.get_objects()))\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "botproject.settings_test"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
    )
    before, frozen, scanned = map(int, result.stdout.split())
    assert frozen > before * 0.9  # the imported product is frozen...
    assert scanned < before * 0.05  # ...and a full collection scans almost nothing of it
