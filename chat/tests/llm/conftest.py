"""A fake model server on 127.0.0.1, a real client to it, and a runner that never really sleeps."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field

import pytest

from chat.llm.attempts import AttemptPlan, AttemptRunner, RetryPolicy
from chat.llm.base import Message
from chat.llm.fake_server import FakeLLMServer
from chat.llm.openai_compat import OpenAICompatibleClient, Timeouts

TEST_TIMEOUTS = Timeouts(connect=1.0, read=1.0, total=3.0)
"""Short enough that a ``TIMEOUT`` fault (which sleeps for 5 s) trips them quickly, and long enough
that a loaded machine's pause before the fake server's first byte is not read as a timeout."""


@dataclass
class RecordingSleep:
    """Stands in for ``asyncio.sleep``: records each pause and returns at once."""

    pauses: list[float] = field(default_factory=list)

    async def __call__(self, seconds: float) -> None:
        self.pauses.append(seconds)


@dataclass
class RecordingRender:
    """A ``render`` that returns fixed messages and remembers every plan it was given."""

    messages: list[Message] = field(
        default_factory=lambda: [
            {"role": "system", "content": "You are Tomori."},
            {"role": "user", "content": "Ann: what is in the file?"},
        ]
    )
    plans: list[AttemptPlan] = field(default_factory=list)

    def __call__(self, plan: AttemptPlan) -> list[Message]:
        self.plans.append(plan)
        return list(self.messages)


@dataclass
class FakeShortTermMemory:
    """A ``ShortTermMemoryWriter`` that keeps what it was asked to write."""

    summaries: list[str] = field(default_factory=list)
    categories: list[Mapping[str, str]] = field(default_factory=list)

    async def write(self, *, summary: str, categories: Mapping[str, str]) -> None:
        self.summaries.append(summary)
        self.categories.append(dict(categories))


@pytest.fixture
async def fake_server() -> AsyncIterator[FakeLLMServer]:
    async with FakeLLMServer() as server:
        yield server


@pytest.fixture
async def client(fake_server: FakeLLMServer) -> AsyncIterator[OpenAICompatibleClient]:
    async with OpenAICompatibleClient(
        base_url=fake_server.base_url, api_key="test-key", timeouts=TEST_TIMEOUTS
    ) as client:
        yield client


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def render() -> RecordingRender:
    return RecordingRender()


@pytest.fixture
def runner(client: OpenAICompatibleClient, sleep: RecordingSleep) -> AttemptRunner:
    return AttemptRunner(
        client,
        policy=RetryPolicy(attempts_per_model=3, backoff_base=0.01, backoff_cap=0.04),
        sleep=sleep,
        jitter=lambda: 0.5,
    )
