"""The fake server's own contract: models list, default answer, request log."""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path

import httpx
import pytest

from chat.llm.fake_server import FakeLLMServer, Reply, raw_discord_identifiers

PROJECT_ROOT = Path(__file__).resolve().parents[3]


async def test_models_are_listed(fake_server: FakeLLMServer) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{fake_server.base_url}/models")

    assert response.json()["data"] == [{"id": "fake-model", "object": "model", "owned_by": "fake"}]


async def test_default_answer_names_the_model_and_quotes_the_last_user_message(
    fake_server: FakeLLMServer,
) -> None:
    body = {
        "model": "any-model",
        "messages": [
            {"role": "user", "content": "Ann: first"},
            {"role": "assistant", "content": "Tomori: hi"},
            {"role": "user", "content": [{"type": "text", "text": "Ann: look"}]},
        ],
    }

    async with httpx.AsyncClient() as http:
        response = await http.post(f"{fake_server.base_url}/chat/completions", json=body)

    message = response.json()["choices"][0]["message"]
    assert message["content"] == "I am the fake model any-model. You said: Ann: look"
    assert fake_server.chat_bodies == [body]


async def test_repeated_prompt_prefix_is_reported_as_cached(fake_server: FakeLLMServer) -> None:
    body = {"model": "m", "messages": [{"role": "system", "content": "You are Tomori. " * 20}]}

    async with httpx.AsyncClient() as http:
        url = f"{fake_server.base_url}/chat/completions"
        first, second = [(await http.post(url, json=body)).json()["usage"] for _ in range(2)]

    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["prompt_tokens_details"]["cached_tokens"] == second["prompt_tokens"] > 0


async def test_a_body_without_messages_is_a_400(fake_server: FakeLLMServer) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.post(f"{fake_server.base_url}/chat/completions", content=b"hello")

    assert response.status_code == 400
    assert fake_server.requests[0].body == "hello"


async def test_runs_as_a_command_on_the_given_port() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-m", "chat.llm.fake_server", "--port", str(port)]
    process = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, cwd=PROJECT_ROOT
    )
    try:
        assert process.stdout is not None
        announced = await asyncio.wait_for(process.stdout.readline(), timeout=10)
        base_url = announced.decode().strip().removeprefix("LLM_BASE_URL=")
        models = await get_when_listening(f"{base_url}/models")
    finally:
        process.terminate()
        await process.wait()

    assert base_url == f"http://127.0.0.1:{port}/v1"
    assert models["data"][0]["id"] == "fake-model"


async def get_when_listening(url: str) -> dict:
    """GET ``url`` as JSON, retrying refused connections for up to five seconds."""
    async with httpx.AsyncClient() as http:
        for _ in range(100):
            try:
                return (await http.get(url)).json()
            except httpx.ConnectError:
                await asyncio.sleep(0.05)
    raise AssertionError(f"nothing listened on {url}")


async def test_a_responder_answers_from_the_request_once_the_script_is_empty() -> None:
    def responder(body: dict) -> Reply:
        return Reply(f"{len(body['messages'])} messages")

    async with (
        FakeLLMServer(script=[Reply("scripted")], responder=responder) as server,
        httpx.AsyncClient() as http,
    ):
        answers = []
        for count in (1, 2):
            body = {"model": "m", "messages": [{"role": "user", "content": "x"}] * count}
            response = await http.post(f"{server.base_url}/chat/completions", json=body)
            answers.append(response.json()["choices"][0]["message"]["content"])

    assert answers == ["scripted", "2 messages"]


@pytest.mark.parametrize(
    ("content", "found"),
    [
        ("Alice: hi ref_3", False),
        ("Alice: see 2026-12-01T15:30:26.123456+00:00", False),
        ("Alice: <@123456789012345678> hi", True),
        ("Alice: 12345678901234567890123", True),
        ("look: https://cdn.discordapp.com/attachments/1/2/a.png?ex=1", True),
        ("look: https://media.discordapp.net/x.png", True),
        ("look: http://127.0.0.1:5000/attachments/11/22/a.txt?ex=0&hm=1", True),
    ],
)
def test_the_request_guard_finds_raw_ids_and_cdn_urls_in_text_parts(content, found) -> None:
    as_string = {"messages": [{"role": "tool", "content": content}]}
    as_parts = {"messages": [{"role": "user", "content": [{"type": "text", "text": content}]}]}

    assert bool(raw_discord_identifiers(as_string)) is found
    assert bool(raw_discord_identifiers(as_parts)) is found


def test_the_request_guard_leaves_image_parts_and_tool_schemas_alone() -> None:
    url = "https://cdn.discordapp.com/attachments/123456789012345678/1/a.png"
    body = {
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}
        ],
        "tools": [{"type": "function", "function": {"name": "x", "description": url}}],
    }

    assert raw_discord_identifiers(body) == []


async def test_the_guard_records_what_it_found_per_request() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "Ann: 123456789012345678"}]}

    async with FakeLLMServer(guard=raw_discord_identifiers) as server, httpx.AsyncClient() as http:
        await http.post(f"{server.base_url}/chat/completions", json={"model": "m", "messages": []})
        await http.post(f"{server.base_url}/chat/completions", json=body)

    [finding] = server.guard_findings
    assert finding.startswith("request 2: messages[0] (user): …Ann: 123456789012345678")
