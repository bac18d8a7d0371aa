"""End-to-end fixtures: the harness's world (`chat.sandbox.harness`: the real worker against the
sandbox over websockets and the fake model server over HTTP), with every model request checked
for raw Discord ids."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from chat.llm.fake_server import FakeLLMServer, raw_discord_identifiers
from chat.sandbox.harness import (  # noqa: F401  (the tests import them from here)
    ALICE,
    AUTONOMOUS,
    BOB,
    DEMO_BOT_ID,
    DEMO_CONFIG,
    GENERAL,
    STOP_TIMEOUT,
    WAIT,
    SandboxClock,
    World,
    all_dispatches_acknowledged,
    demo_world,
    eventually,
)


def image_parts(body: dict) -> list[dict]:
    """The ``image_url`` parts of a Chat Completions request body, in order."""
    return [
        part
        for message in body["messages"]
        if isinstance(message["content"], list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


def prompt_text(body: dict) -> str:
    """Every text of a Chat Completions request body's messages, one per line."""
    texts = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            texts += [part["text"] for part in content if part.get("type") == "text"]
        else:
            texts.append(str(content))
    return "\n".join(texts)


@dataclass
class ModelRequestGuard:
    """What the fake model found in the requests it received."""

    findings: list[str]


@pytest.fixture(autouse=True)
def no_raw_ids_reach_the_model() -> Iterator[ModelRequestGuard]:
    """DESIGN §3 for every end-to-end test: the fake model checks each request it receives, and
    the test fails when any text part held a run of 17–20 digits (a raw snowflake) or a Discord
    CDN URL. Ids are ``ref_N``/``media_N``; people and channels are names."""
    guard = ModelRequestGuard(findings=[])
    yield guard
    if guard.findings:
        listed = "\n".join(guard.findings[:10])
        pytest.fail(f"raw Discord ids reached the model in {len(guard.findings)} places:\n{listed}")


@pytest.fixture
async def world(transactional_db, no_raw_ids_reach_the_model) -> AsyncIterator[World]:
    llm_server = FakeLLMServer(guard=raw_discord_identifiers)
    no_raw_ids_reach_the_model.findings = llm_server.guard_findings
    try:
        async with demo_world(llm=llm_server) as world:
            yield world
    finally:
        # The worker's database work ran on sync_to_async's thread: close its connection
        # there, so the test database can be dropped.
        await sync_to_async(connections.close_all)()
