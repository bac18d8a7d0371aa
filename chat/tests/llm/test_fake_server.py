"""The fake server's own contract: models list, default answer, request log."""

from __future__ import annotations

import httpx

from chat.llm.fake_server import FakeLLMServer


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
