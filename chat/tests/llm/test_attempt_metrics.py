"""Every HTTP call to a model is counted once by model and outcome, timed, and its reported
tokens added by kind (`chat.metrics`, from the attempt record)."""

from __future__ import annotations

from prometheus_client import REGISTRY

from chat.llm.attempts import AttemptRunner
from chat.llm.base import ModelSpec
from chat.llm.fake_server import FakeLLMServer, Fault, FaultKind, Reply
from chat.tests.llm.conftest import RecordingRender

MODEL = ModelSpec("metrics-test-model")


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_each_call_is_counted_by_outcome_with_the_reported_tokens(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    fake_server.enqueue(
        Fault(FaultKind.HTTP_ERROR, status=503),
        Reply("Hi!", prompt_tokens=90, completion_tokens=3, cached_prompt_tokens=64),
    )
    labels = {"model": MODEL.name}
    calls_before = value("personabot_model_request_seconds_count", **labels)

    completion = await runner.complete_turn(models=[MODEL], render=render, persona_name="Tomori")

    assert completion.reply_text == "Hi!"
    assert value("personabot_model_requests_total", outcome="ok", **labels) == 1
    assert value("personabot_model_requests_total", outcome="server_error", **labels) == 1
    assert value("personabot_model_request_seconds_count", **labels) - calls_before == 2
    assert value("personabot_model_tokens_total", kind="prompt", **labels) == 90
    assert value("personabot_model_tokens_total", kind="cached_prompt", **labels) == 64
    assert value("personabot_model_tokens_total", kind="completion", **labels) == 3
