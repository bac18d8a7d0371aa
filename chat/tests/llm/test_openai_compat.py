"""The OpenAI-compatible client against the fake server over real HTTP on 127.0.0.1."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from chat.llm.base import ChatRequest, ErrorKind, LLMError, ModelSpec
from chat.llm.fake_server import FakeLLMServer, Fault, FaultKind, Reply, ScriptedToolCall
from chat.llm.openai_compat import (
    OpenAICompatibleClient,
    iter_sse_data,
    parse_retry_after,
    read_completion_stream,
)
from chat.tests.llm.conftest import TEST_TIMEOUTS

MODEL = ModelSpec("fake-model", temperature=0.3, max_output_tokens=64, stop=("\nAnn:",))
HELLO = [{"role": "user", "content": "Ann: hello"}]


def request(*, stream: bool) -> ChatRequest:
    return ChatRequest(model=MODEL, messages=HELLO, stream=stream)


@pytest.mark.parametrize("stream", [False, True])
async def test_answer_carries_text_and_usage_with_cached_tokens(
    fake_server: FakeLLMServer, client: OpenAICompatibleClient, stream: bool
) -> None:
    fake_server.enqueue(
        Reply("Hello, Ann!", prompt_tokens=40, completion_tokens=5, cached_prompt_tokens=32)
    )

    completion = await client.complete(request(stream=stream))

    assert completion.text == "Hello, Ann!"
    assert completion.finish_reason == "stop"
    assert completion.usage.prompt_tokens == 40
    assert completion.usage.completion_tokens == 5
    assert completion.usage.cached_prompt_tokens == 32


async def test_streaming_request_asks_for_usage_and_sends_persona_settings(
    fake_server: FakeLLMServer, client: OpenAICompatibleClient
) -> None:
    await client.complete(request(stream=True))

    [recorded] = fake_server.requests
    assert recorded.headers["Authorization"] == "Bearer test-key"
    assert recorded.body == {
        "model": "fake-model",
        "messages": HELLO,
        "temperature": 0.3,
        "max_tokens": 64,
        "stop": ["\nAnn:"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@pytest.mark.parametrize("stream", [False, True])
async def test_tool_calls_are_assembled_with_their_arguments(
    fake_server: FakeLLMServer, client: OpenAICompatibleClient, stream: bool
) -> None:
    fake_server.enqueue(
        Reply(
            tool_calls=(
                ScriptedToolCall("read_file", {"media_id": "media_3"}),
                ScriptedToolCall("reveal_message_metadata", {"ref": "ref_12"}),
            )
        )
    )

    completion = await client.complete(request(stream=stream))

    assert completion.finish_reason == "tool_calls"
    assert [(call.name, call.arguments) for call in completion.tool_calls] == [
        ("read_file", '{"media_id": "media_3"}'),
        ("reveal_message_metadata", '{"ref": "ref_12"}'),
    ]
    assert len({call.id for call in completion.tool_calls}) == 2


@pytest.mark.parametrize(
    ("fault", "kind", "permanent", "status"),
    [
        (Fault(FaultKind.HTTP_ERROR, status=500), ErrorKind.SERVER_ERROR, False, 500),
        (Fault(FaultKind.HTTP_ERROR, status=503), ErrorKind.SERVER_ERROR, False, 503),
        (Fault(FaultKind.HTTP_ERROR, status=429), ErrorKind.RATE_LIMITED, False, 429),
        (Fault(FaultKind.HTTP_ERROR, status=400), ErrorKind.CLIENT_ERROR, True, 400),
        (Fault(FaultKind.HTTP_ERROR, status=401), ErrorKind.CLIENT_ERROR, True, 401),
        (Fault(FaultKind.HTTP_ERROR, status=403), ErrorKind.CLIENT_ERROR, True, 403),
        (Fault(FaultKind.HTTP_ERROR, status=404), ErrorKind.CLIENT_ERROR, True, 404),
        (Fault(FaultKind.TIMEOUT, delay=5.0), ErrorKind.TIMEOUT, False, None),
        (Fault(FaultKind.MALFORMED_JSON), ErrorKind.MALFORMED, False, None),
        (Fault(FaultKind.CUT_STREAM), ErrorKind.CONNECTION, False, None),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_every_failure_is_one_clean_llm_error(
    fake_server: FakeLLMServer,
    client: OpenAICompatibleClient,
    fault: Fault,
    kind: ErrorKind,
    permanent: bool,
    status: int | None,
    stream: bool,
) -> None:
    fake_server.enqueue(fault)

    with pytest.raises(LLMError) as raised:
        await client.complete(request(stream=stream))

    assert (raised.value.kind, raised.value.permanent, raised.value.status) == (
        kind,
        permanent,
        status,
    )


async def test_rate_limit_error_carries_retry_after_seconds(
    fake_server: FakeLLMServer, client: OpenAICompatibleClient
) -> None:
    fake_server.enqueue(Fault(FaultKind.HTTP_ERROR, status=429, retry_after="7"))

    with pytest.raises(LLMError) as raised:
        await client.complete(request(stream=False))

    assert raised.value.retry_after == 7.0
    assert "fake fault 429" in str(raised.value)


async def test_refused_connection_is_a_transient_connection_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base_url = f"http://127.0.0.1:{port}/v1"

    async with OpenAICompatibleClient(base_url=base_url, timeouts=TEST_TIMEOUTS) as client:
        with pytest.raises(LLMError) as raised:
            await client.complete(request(stream=False))

    assert raised.value.kind is ErrorKind.CONNECTION
    assert not raised.value.permanent


async def lines_of(text: str) -> AsyncIterator[str]:
    for line in text.split("\n"):
        yield line


async def test_stream_that_ends_without_done_is_malformed() -> None:
    body = 'data: {"choices": [{"delta": {"content": "Hel"}}]}\n\n'

    with pytest.raises(LLMError) as raised:
        await read_completion_stream(lines_of(body))

    assert raised.value.kind is ErrorKind.MALFORMED


async def test_error_chunk_in_a_stream_is_a_transient_server_error() -> None:
    body = 'data: {"error": {"message": "overloaded"}}\n\ndata: [DONE]\n\n'

    with pytest.raises(LLMError) as raised:
        await read_completion_stream(lines_of(body))

    assert raised.value.kind is ErrorKind.SERVER_ERROR
    assert not raised.value.permanent


async def test_sse_events_join_data_lines_and_skip_comments_and_other_fields() -> None:
    body = ": keep-alive\n\nevent: message\nid: 1\ndata: first\ndata:second\n\ndata: [DONE]"

    events = [data async for data in iter_sse_data(lines_of(body))]

    assert events == ["first\nsecond", "[DONE]"]


NOW = datetime(2026, 7, 11, 12, 0, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("header", "seconds"),
    [
        (None, None),
        ("", None),
        ("5", 5.0),
        (" 1.5 ", 1.5),
        ("-3", 0.0),
        ("nan", None),
        ("Sat, 11 Jul 2026 12:00:20 GMT", 20.0),
        ("Sat, 11 Jul 2026 11:59:00 GMT", 0.0),
        ("in a while", None),
    ],
)
def test_retry_after_reads_seconds_or_an_http_date(
    header: str | None, seconds: float | None
) -> None:
    assert parse_retry_after(header, now=NOW) == seconds
