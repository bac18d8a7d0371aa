"""End-to-end harness: the real worker (discord.py client, scheduler, pipeline, model access)
against the sandbox over websockets and the fake model server over HTTP, on PostgreSQL."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from chat.gateway.client import PersonaBotClient
from chat.gateway.proxies import ProxyResolver
from chat.llm.attempts import AttemptRunner, RetryPolicy
from chat.llm.base import ModelSpec
from chat.llm.fake_server import FakeLLMServer, raw_discord_identifiers
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.llm.tools import VisionModel
from chat.llm.video_transcripts import VideoTranscriptService
from chat.runtime import turn_capabilities_from_settings
from chat.sandbox import GatewaySettings, SandboxServer
from chat.sandbox.demo import DEMO_BOT_ID, DEMO_CHANNEL_IDS, DEMO_USER_IDS, demo_sandbox
from chat.worker import WorkerConfig, build_client
from personas.services import config_import

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "sandbox" / "demo_config.json"
GENERAL = DEMO_CHANNEL_IDS["general"]
AUTONOMOUS = DEMO_CHANNEL_IDS["autonomous"]
ALICE, BOB = DEMO_USER_IDS["alice"], DEMO_USER_IDS["bob"]
WAIT = 15.0
STOP_TIMEOUT = 20.0


async def eventually(check: Callable[[], object], *, within: float = WAIT) -> object:
    """Poll ``check`` (sync or async) until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {within} s: {check}")
        await asyncio.sleep(0.05)


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
class SandboxClock:
    """The sandbox's clock: real time shifted by ``offset`` seconds, so a test can post
    messages days apart. Only move it forward: snowflakes never decrease, so after a step
    back the sandbox keeps stamping the latest time it handed out."""

    offset: float = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@dataclass
class World:
    sandbox: SandboxServer
    llm: FakeLLMServer
    client: PersonaBotClient | None = None
    task: asyncio.Task | None = None
    proxies: ProxyResolver | None = None
    clock: SandboxClock = field(default_factory=SandboxClock)

    def bot_messages(self, channel_id: int) -> list[dict]:
        return [
            m
            for m in self.sandbox.sandbox.channel_messages(channel_id)
            if int(m["author"]["id"]) == DEMO_BOT_ID or m.get("webhook_id")
        ]

    def say(self, content: str, *, channel_id: int = GENERAL, author: int = ALICE, **kw) -> dict:
        return self.sandbox.sandbox.user_says(channel_id, author, content, **kw)

    async def start_worker(
        self,
        *,
        step_delay: float = 0.01,
        shard_ids: list[int] | None = None,
        shard_count: int | None = None,
        vision_model: str | None = None,
        proxies: bool = False,
        stream: bool = False,
        shared_limits: bool = False,
        lease_seconds: float = 15.0,
        videos: bool = False,
    ) -> PersonaBotClient:
        """Start the worker in this process; with ``vision_model`` it has a vision model (on
        the fake model server) behind ``analyze_image``, as ``LLM_VISION_MODEL`` gives one;
        with ``proxies`` it asks the sandbox's proxy-system API, as ``PLURALKIT_API_BASE``
        makes it; with ``stream`` its model requests stream, as the product's do; with
        ``shared_limits`` it paces IDENTIFYs and REST requests through Redis, as ``runbot``
        does; ``lease_seconds`` is how often it settles turns left by a previous holder; with
        ``videos`` it asks the sandbox's transcript service, as ``YOUTUBE_TRANSCRIPT_URL`` makes
        it. Its other capabilities come from the settings, as ``runbot``'s do."""
        config = WorkerConfig(
            token=self.sandbox.token,
            api_base=self.sandbox.api_base,
            gateway_url=self.sandbox.gateway_url,
            shard_ids=shard_ids,
            shard_count=shard_count,
            step_delay=step_delay,
            shared_limits=shared_limits,
            lease_seconds=lease_seconds,
        )
        llm_client = OpenAICompatibleClient(base_url=self.llm.base_url, api_key="test")
        runner = AttemptRunner(
            client=llm_client,
            policy=RetryPolicy(backoff_base=0.01, backoff_cap=0.05),
            stream=stream,
        )
        capabilities = turn_capabilities_from_settings(vision_client=llm_client)
        if vision_model is not None:
            vision = VisionModel(llm_client, ModelSpec(vision_model, supports_vision=True))
            capabilities = dataclasses.replace(capabilities, vision=vision)
        if videos:
            transcripts = VideoTranscriptService(self.sandbox.youtube_transcript_url)
            capabilities = dataclasses.replace(capabilities, videos=transcripts)
        if proxies:
            self.proxies = ProxyResolver(
                api_base=self.sandbox.pluralkit_api_base,
                requests_per_second=50,
                grace_seconds=0.2,
            )
        self.client = build_client(
            config,
            llm=llm_client,
            runner=runner,
            capabilities=capabilities,
            proxies=self.proxies,
        )
        self.task = asyncio.create_task(self.client.start(config.token))
        await eventually(lambda: self.client.scheduler is not None and self.client.is_ready())
        return self.client

    async def stop_worker(self) -> None:
        """Close the worker; a close that hangs fails the test with every task's stack."""
        try:
            async with asyncio.timeout(STOP_TIMEOUT):
                if self.client is not None:
                    await self.client.close()
                if self.task is not None:
                    await asyncio.gather(self.task, return_exceptions=True)
        except TimeoutError:
            stacks = io.StringIO()
            for task in asyncio.all_tasks():
                task.print_stack(file=stacks)
            raise AssertionError(f"the worker did not stop:\n{stacks.getvalue()}") from None
        finally:
            self.client = self.task = None
            if self.proxies is not None:
                await self.proxies.aclose()
                self.proxies = None

    async def settle(self) -> None:
        """Wait until the worker has stored every message it took in, has nothing queued and
        no channel loop runs."""
        await eventually(lambda: self.client.intake.idle)
        await asyncio.wait_for(self.client.scheduler.idle(), WAIT)

    async def drained(self) -> None:
        """Barrier for negative checks ("no second reply arrived"): every dispatch the sandbox
        has sent reached the worker (its heartbeats acknowledge the sandbox's sequence), every
        handler finished, the queue is consumed and no channel loop runs — repeated until the
        worker's own deliveries cause no further dispatch."""
        sent = all_dispatches_acknowledged(self.sandbox)
        while True:
            await eventually(lambda: sent() is not None, within=WAIT)
            sequences = sent()
            await self.client.handlers_settled()
            await self.settle()
            if sent() == sequences:
                return


def all_dispatches_acknowledged(sandbox: SandboxServer) -> Callable[[], tuple[int, ...] | None]:
    """A probe: the connected sessions' sequences once the bot acknowledged all of them (None
    while some dispatch has not been acknowledged yet)."""

    def probe() -> tuple[int, ...] | None:
        sessions = [s for s in sandbox.sessions() if s["connected"]]
        if not sessions or any(s["acked"] < s["seq"] for s in sessions):
            return None
        return tuple(s["seq"] for s in sessions)

    return probe


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
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    settings = GatewaySettings(heartbeat_interval_ms=500)
    llm_server = FakeLLMServer(guard=raw_discord_identifiers)
    no_raw_ids_reach_the_model.findings = llm_server.guard_findings
    clock = SandboxClock()
    async with (
        SandboxServer(demo_sandbox(clock=clock), gateway=settings) as sandbox,
        llm_server as llm,
    ):
        world = World(sandbox=sandbox, llm=llm, clock=clock)
        try:
            yield world
        finally:
            await world.stop_worker()
            # The worker's database work ran on sync_to_async's thread: close its connection
            # there, so the test database can be dropped.
            await sync_to_async(connections.close_all)()
