"""The end-to-end harness: the sandbox's demo world, the fake model and the real worker (the
discord.py client, scheduler, pipeline, model access), in one process, built as ``runbot``
builds the worker. The end-to-end tests and the benchmarks that measure what a person gets
start it the same way (`demo_world`, `World.start_worker`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

from asgiref.sync import sync_to_async

from chat.gateway.client import PersonaBotClient
from chat.gateway.proxies import ProxyResolver
from chat.llm.attempts import AttemptRunner, RetryPolicy
from chat.llm.base import ModelSpec
from chat.llm.fake_server import FakeLLMServer
from chat.llm.moderation import ModerationOnError, OpenAIModerationClient
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.llm.tools import VisionModel
from chat.llm.video_transcripts import VideoTranscriptService
from chat.runtime import TurnCapabilities, turn_capabilities_from_settings
from chat.sandbox.demo import DEMO_BOT_ID, DEMO_CHANNEL_IDS, DEMO_USER_IDS, demo_sandbox
from chat.sandbox.gateway import GatewaySettings
from chat.sandbox.server import SandboxServer
from chat.worker import WorkerConfig, build_client
from personas.services import config_import

DEMO_CONFIG = Path(__file__).resolve().parent / "demo_config.json"
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
    capabilities: TurnCapabilities | None = None
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
        moderation: ModerationOnError | None = None,
    ) -> PersonaBotClient:
        """Start the worker in this process; with ``vision_model`` it has a vision model (on
        the fake model server) behind ``analyze_image``, as ``LLM_VISION_MODEL`` gives one;
        with ``proxies`` it asks the sandbox's proxy-system API, as ``PLURALKIT_API_BASE``
        makes it; with ``stream`` its model requests stream, as the product's do; with
        ``shared_limits`` it paces IDENTIFYs and REST requests through Redis, as ``runbot``
        does; ``lease_seconds`` is how often it settles turns left by a previous holder; with
        ``videos`` it asks the sandbox's transcript service, as ``YOUTUBE_TRANSCRIPT_URL`` makes
        it; with ``moderation`` it checks reply pieces against the fake model server's
        moderation service, as ``MODERATION_BASE_URL`` makes it (``moderation`` is what
        ``MODERATION_ON_ERROR`` says). Its other capabilities come from the settings, as
        ``runbot``'s do."""
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
        if moderation is not None:
            if capabilities.moderation is not None:
                await capabilities.moderation.aclose()
            checks = OpenAIModerationClient(
                base_url=self.llm.base_url,
                on_error=moderation,
                policy=RetryPolicy(attempts_per_model=2, backoff_base=0.01, backoff_cap=0.05),
            )
            capabilities = dataclasses.replace(capabilities, moderation=checks)
        self.capabilities = capabilities
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
            if self.capabilities is not None:
                await self.capabilities.aclose()
                self.capabilities = None

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


@contextlib.asynccontextmanager
async def demo_world(
    *,
    llm: FakeLLMServer | None = None,
    gateway: GatewaySettings | None = None,
    clock: SandboxClock | None = None,
) -> AsyncIterator[World]:
    """The demo configuration imported, the sandbox's demo world served (heartbeats every
    0.5 s unless ``gateway`` says otherwise) and the fake model ``llm`` (a plain one by
    default); the worker is started by `World.start_worker` and stopped on exit."""
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    clock = clock or SandboxClock()
    async with (
        SandboxServer(
            demo_sandbox(clock=clock), gateway=gateway or GatewaySettings(heartbeat_interval_ms=500)
        ) as sandbox,
        llm or FakeLLMServer() as model,
    ):
        world = World(sandbox=sandbox, llm=model, clock=clock)
        try:
            yield world
        finally:
            await world.stop_worker()
