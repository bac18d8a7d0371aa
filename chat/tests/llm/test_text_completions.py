"""Text-completion models over real HTTP to the fake server: ``POST /v1/completions``, plain
and streamed, stop strings, errors, and fallbacks that mix both kinds of model."""

from __future__ import annotations

import pytest

from chat.llm.attempts import AttemptPlan, AttemptRunner, RetryPolicy
from chat.llm.base import ChatRequest, LLMError, ModelApi, ModelSpec, TextCompletionRequest
from chat.llm.fake_server import FakeLLMServer, Fault, FaultKind, Reply
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.pipeline.instruct import BUILTIN_TEMPLATES, InstructPrompt

TEXT_MODEL = ModelSpec(
    "local-llama", api=ModelApi.COMPLETIONS, instruct=BUILTIN_TEMPLATES["llama3"]
)
CHAT_MODEL = ModelSpec("chat-model")


@pytest.mark.parametrize("stream", [False, True])
async def test_a_text_request_is_a_completions_call_cut_at_the_stop_string(
    fake_server: FakeLLMServer, stream: bool
) -> None:
    fake_server.enqueue(Reply("Sure, the lamp is lit.\nBob: and then Bob speaks"))
    request = TextCompletionRequest(
        model=TEXT_MODEL, prompt="Bob: is it lit?\nTomori:", stop=("\nBob:",), stream=stream
    )
    async with OpenAICompatibleClient(base_url=fake_server.base_url) as client:
        completion = await client.complete(request)

    assert completion.text == "Sure, the lamp is lit."
    [body] = fake_server.completion_bodies
    assert body["prompt"] == "Bob: is it lit?\nTomori:"
    assert body["stop"] == ["\nBob:"] and body["stream"] is stream
    assert completion.usage.prompt_tokens is not None


async def test_streaming_gives_the_text_as_it_comes(fake_server: FakeLLMServer) -> None:
    fake_server.enqueue(Reply("one two three"))
    request = TextCompletionRequest(model=TEXT_MODEL, prompt="x", stream=True)
    async with OpenAICompatibleClient(base_url=fake_server.base_url) as client:
        pieces = [item async for item in client.stream(request)]
    assert "".join(p for p in pieces if isinstance(p, str)) == "one two three"
    assert pieces[-1].text == "one two three"


async def test_an_error_status_is_an_llm_error(fake_server: FakeLLMServer) -> None:
    fake_server.enqueue(Fault(FaultKind.HTTP_ERROR, status=401))
    async with OpenAICompatibleClient(base_url=fake_server.base_url) as client:
        with pytest.raises(LLMError) as error:
            await client.complete(TextCompletionRequest(model=TEXT_MODEL, prompt="x"))
    assert error.value.permanent and error.value.status == 401


def _render(plan: AttemptPlan):
    if plan.model.api is ModelApi.COMPLETIONS:
        return InstructPrompt(text="<prompt>Tomori: Well,", stop=("\nBob:",), prefill="Well,")
    return [{"role": "user", "content": "Bob: hi"}]


@pytest.mark.parametrize("stream", [False, True])
async def test_fallbacks_mix_chat_and_text_completion_models(
    fake_server: FakeLLMServer, stream: bool
) -> None:
    fake_server.enqueue(Fault(FaultKind.HTTP_ERROR, status=404), Reply(" the lamp is lit."))
    async with OpenAICompatibleClient(base_url=fake_server.base_url) as client:
        runner = AttemptRunner(client=client, policy=RetryPolicy(backoff_base=0.01), stream=stream)
        completion = await runner.complete_turn(
            models=[CHAT_MODEL, TEXT_MODEL], render=_render, persona_name="Tomori"
        )

    assert completion.error is None
    assert completion.reply_text == "Well, the lamp is lit."
    assert [r.path for r in fake_server.requests] == ["/v1/chat/completions", "/v1/completions"]
    assert completion.request["prompt"] == "<prompt>Tomori: Well,"


async def test_messages_for_a_text_model_are_written_in_its_template(
    fake_server: FakeLLMServer,
) -> None:
    async with OpenAICompatibleClient(base_url=fake_server.base_url) as client:
        runner = AttemptRunner(client=client, stream=False)
        await runner.complete_turn(
            models=[TEXT_MODEL],
            render=lambda plan: [
                {"role": "system", "content": "Answer in JSON."},
                {"role": "user", "content": "What now?"},
            ],
            persona_name="Tomori",
        )
    [body] = fake_server.completion_bodies
    assert body["prompt"] == (
        "<|start_header_id|>system<|end_header_id|>\n\nAnswer in JSON.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nWhat now?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    assert "<|eot_id|>" in body["stop"]


def test_a_chat_request_body_is_unchanged() -> None:
    assert "prompt" not in ChatRequest(model=CHAT_MODEL, messages=[]).body()
