"""The moderation client against the fake moderation service over real HTTP: answers, retries
within the policy, and a failure once they are used up."""

from __future__ import annotations

import pytest

from chat.llm.attempts import RetryPolicy
from chat.llm.fake_moderation import FLAGGED_SCORE
from chat.llm.fake_server import FakeLLMServer
from chat.llm.moderation import (
    ModerationUnavailable,
    OpenAIModerationClient,
)
from chat.pipeline.moderation import CATEGORIES
from chat.tests.llm.conftest import RecordingSleep

POLICY = RetryPolicy(attempts_per_model=3, backoff_base=0.1, backoff_cap=0.4, retry_after_cap=2.0)


@pytest.fixture
async def server():
    async with FakeLLMServer() as server:
        yield server


def client_for(server: FakeLLMServer, sleep: RecordingSleep, **kw) -> OpenAIModerationClient:
    return OpenAIModerationClient(
        base_url=server.base_url,
        api_key="key",
        policy=POLICY,
        sleep=sleep,
        jitter=lambda: 0.0,
        **kw,
    )


async def test_a_clean_text_is_marked_in_no_category(server):
    client = client_for(server, RecordingSleep())
    answer = await client.classify("a quiet poem about rain")
    await client.aclose()

    assert not answer.flagged and answer.categories == frozenset()
    assert set(answer.scores) == set(CATEGORIES)
    [request] = [r for r in server.requests if r.path == "/v1/moderations"]
    assert request.body == {"model": "omni-moderation-latest", "input": "a quiet poem about rain"}
    assert request.headers["Authorization"] == "Bearer key"


async def test_a_marked_text_names_its_categories_and_their_scores(server):
    client = client_for(server, RecordingSleep(), model="text-moderation-stable")
    answer = await client.classify("flag:violence and flag:sexual/minors, then flag:nonsense")
    await client.aclose()

    assert answer.flagged
    assert answer.categories == {"violence", "sexual/minors"}
    assert answer.scores["violence"] == FLAGGED_SCORE
    assert answer.scores["sexual"] < 0.01
    assert server.requests[-1].body["model"] == "text-moderation-stable"


async def test_a_failing_service_is_retried_then_unavailable(server):
    server.moderation.failure_status = 503
    sleep = RecordingSleep()
    client = client_for(server, sleep)
    with pytest.raises(ModerationUnavailable, match=r"after 3 attempts: server_error \(HTTP 503\)"):
        await client.classify("hello")
    await client.aclose()

    assert len(server.moderation.inputs) == 3
    assert sleep.pauses == [0.05, 0.1]  # backoff without jitter: half of 0.1, then of 0.2


async def test_a_rate_limited_service_is_retried_after_its_retry_after(server):
    server.moderation.failure_status = 429
    server.moderation.retry_after = "1.5"
    sleep = RecordingSleep()
    client = client_for(server, sleep)
    with pytest.raises(ModerationUnavailable):
        await client.classify("hello")
    await client.aclose()

    assert sleep.pauses == [1.5, 1.5]


async def test_a_refused_key_is_not_retried(server):
    server.moderation.failure_status = 401
    sleep = RecordingSleep()
    client = client_for(server, sleep)
    with pytest.raises(ModerationUnavailable, match="after 1 attempt:"):
        await client.classify("hello")
    await client.aclose()

    assert len(server.moderation.inputs) == 1 and sleep.pauses == []


async def test_a_slow_service_times_out(server):
    server.moderation.latency_s = 2.0
    client = client_for(server, RecordingSleep(), timeout_s=0.2)
    with pytest.raises(ModerationUnavailable, match="no complete answer within the time limit"):
        await client.classify("hello")
    await client.aclose()


async def test_nothing_answering_is_unavailable():
    client = OpenAIModerationClient(
        base_url="http://127.0.0.1:9/v1", policy=POLICY, sleep=RecordingSleep()
    )
    with pytest.raises(ModerationUnavailable, match="ConnectError"):
        await client.classify("hello")
    await client.aclose()
