"""Retries, fallback models, per-attempt rendering and reply clean-up, over real HTTP."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from chat.llm.attempts import AttemptRunner, RetryPolicy
from chat.llm.base import ErrorKind, LLMError, ModelSpec
from chat.llm.fake_server import FakeLLMServer, Fault, FaultKind, Reply
from chat.tests.llm.conftest import RecordingRender, RecordingSleep

PRIMARY = ModelSpec("primary-model", supports_prefill=True)
BACKUP = ModelSpec("backup-model", supports_vision=True)
DEFAULT_ANSWER = "I am the fake model primary-model. You said: Ann: what is in the file?"


def server_error(status: int = 500) -> Fault:
    return Fault(FaultKind.HTTP_ERROR, status=status)


async def test_rate_limit_waits_as_long_as_retry_after_says_then_answers(
    fake_server: FakeLLMServer,
    runner: AttemptRunner,
    render: RecordingRender,
    sleep: RecordingSleep,
) -> None:
    fake_server.enqueue(Fault(FaultKind.HTTP_ERROR, status=429, retry_after="7"))

    completion = await runner.complete_turn(models=[PRIMARY], render=render, persona_name="Tomori")

    assert completion.reply_text == DEFAULT_ANSWER
    assert sleep.pauses == [7.0]
    limited, answered = completion.attempts
    assert (limited.outcome, limited.status, limited.retry_after, limited.wait_s) == (
        "rate_limited",
        429,
        7.0,
        7.0,
    )
    assert answered.outcome == "ok"


async def test_retry_after_as_an_http_date_is_honoured(
    fake_server: FakeLLMServer,
    runner: AttemptRunner,
    render: RecordingRender,
    sleep: RecordingSleep,
) -> None:
    when = datetime.now(UTC) + timedelta(seconds=20)
    fake_server.enqueue(
        Fault(FaultKind.HTTP_ERROR, status=429, retry_after=format_datetime(when, usegmt=True))
    )

    await runner.complete_turn(models=[PRIMARY], render=render, persona_name="Tomori")

    [pause] = sleep.pauses
    assert 17.0 <= pause <= 20.0


async def test_retry_after_longer_than_the_cap_waits_only_the_cap(
    fake_server: FakeLLMServer,
    runner: AttemptRunner,
    render: RecordingRender,
    sleep: RecordingSleep,
) -> None:
    fake_server.enqueue(Fault(FaultKind.HTTP_ERROR, status=429, retry_after="3600"))

    await runner.complete_turn(models=[PRIMARY], render=render, persona_name="Tomori")

    assert sleep.pauses == [RetryPolicy().retry_after_cap]


async def test_two_server_errors_then_success_give_one_answer_after_three_attempts(
    fake_server: FakeLLMServer,
    runner: AttemptRunner,
    render: RecordingRender,
    sleep: RecordingSleep,
) -> None:
    fake_server.enqueue(server_error(500), server_error(502))

    completion = await runner.complete_turn(models=[PRIMARY], render=render, persona_name="Tomori")

    assert completion.reply_text == DEFAULT_ANSWER
    assert completion.error is None
    assert [a.outcome for a in completion.attempts] == ["server_error", "server_error", "ok"]
    assert [a.status for a in completion.attempts] == [500, 502, None]
    # Backoff 0.01 × 2^n with the jitter fixed at the middle of its range (0.75 of the ceiling).
    assert sleep.pauses == pytest.approx([0.0075, 0.015])


def test_backoff_doubles_up_to_its_cap_with_jitter_in_the_upper_half() -> None:
    policy = RetryPolicy(backoff_base=1.0, backoff_cap=5.0)
    error = LLMError("down", kind=ErrorKind.SERVER_ERROR, permanent=False, status=500)

    lowest = [policy.pause_before_retry(error, retry_number=n, jitter=0.0) for n in (1, 2, 3, 4)]
    highest = [policy.pause_before_retry(error, retry_number=n, jitter=1.0) for n in (1, 2, 3, 4)]

    assert lowest == [0.5, 1.0, 2.0, 2.5]
    assert highest == [1.0, 2.0, 4.0, 5.0]


@pytest.mark.parametrize(
    ("transient", "outcome"),
    [
        (Fault(FaultKind.TIMEOUT, delay=5.0), "timeout"),
        (Fault(FaultKind.MALFORMED_JSON), "malformed_response"),
        (Fault(FaultKind.CUT_STREAM), "connection"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_timeouts_and_broken_answers_are_retried(
    fake_server: FakeLLMServer,
    runner: AttemptRunner,
    render: RecordingRender,
    transient: Fault,
    outcome: str,
    stream: bool,
) -> None:
    fake_server.enqueue(transient)
    streaming = AttemptRunner(
        runner.client, policy=runner.policy, stream=stream, sleep=runner.sleep
    )

    completion = await streaming.complete_turn(
        models=[PRIMARY], render=render, persona_name="Tomori"
    )

    assert completion.reply_text == DEFAULT_ANSWER
    assert [a.outcome for a in completion.attempts] == [outcome, "ok"]


async def test_permanent_401_is_not_retried_and_falls_to_the_fallback_model(
    fake_server: FakeLLMServer,
    runner: AttemptRunner,
    render: RecordingRender,
    sleep: RecordingSleep,
) -> None:
    fake_server.enqueue(server_error(401))

    completion = await runner.complete_turn(
        models=[PRIMARY, BACKUP], render=render, persona_name="Tomori"
    )

    assert [body["model"] for body in fake_server.chat_bodies] == ["primary-model", "backup-model"]
    assert sleep.pauses == []
    assert completion.reply_text.startswith("I am the fake model backup-model.")
    assert [(a.model, a.outcome) for a in completion.attempts] == [
        ("primary-model", "client_error"),
        ("backup-model", "ok"),
    ]
    assert any("fell back to backup-model" in warning for warning in completion.warnings)


async def test_each_attempt_is_rendered_for_the_model_it_asks(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    fake_server.enqueue(server_error(404))

    await runner.complete_turn(models=[PRIMARY, BACKUP], render=render, persona_name="Tomori")

    assert [plan.model for plan in render.plans] == [PRIMARY, BACKUP]


async def test_a_model_whose_attempts_run_out_gives_way_to_the_next(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    fake_server.enqueue(server_error(), server_error(), server_error())

    completion = await runner.complete_turn(
        models=[PRIMARY, BACKUP], render=render, persona_name="Tomori"
    )

    assert [a.model for a in completion.attempts] == ["primary-model"] * 3 + ["backup-model"]
    assert completion.error is None


async def test_when_every_model_fails_the_turn_carries_the_error_instead_of_raising(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    fake_server.enqueue(server_error(401), server_error(403))

    completion = await runner.complete_turn(
        models=[PRIMARY, BACKUP], render=render, persona_name="Tomori"
    )

    assert completion.reply_text == ""
    assert completion.error is not None
    assert (completion.error.kind, completion.error.status) == (ErrorKind.CLIENT_ERROR, 403)
    assert completion.request == fake_server.chat_bodies[-1]


@pytest.mark.parametrize("fault", [FaultKind.EMPTY_ANSWER, FaultKind.REASONING_ONLY])
async def test_empty_answer_is_retried_once_with_one_more_batch_dropped(
    fake_server: FakeLLMServer,
    runner: AttemptRunner,
    render: RecordingRender,
    sleep: RecordingSleep,
    fault: FaultKind,
) -> None:
    fake_server.enqueue(Fault(fault))

    completion = await runner.complete_turn(models=[PRIMARY], render=render, persona_name="Tomori")

    assert [plan.shorten_batches for plan in render.plans] == [0, 1]
    assert [a.outcome for a in completion.attempts] == ["empty_answer", "ok"]
    assert completion.reply_text == DEFAULT_ANSWER
    assert sleep.pauses == []


async def test_second_empty_answer_moves_on_to_the_fallback_keeping_the_shorter_history(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    fake_server.enqueue(Fault(FaultKind.EMPTY_ANSWER), Fault(FaultKind.REASONING_ONLY))

    completion = await runner.complete_turn(
        models=[PRIMARY, BACKUP], render=render, persona_name="Tomori"
    )

    assert [(plan.model.name, plan.shorten_batches) for plan in render.plans] == [
        ("primary-model", 0),
        ("primary-model", 1),
        ("backup-model", 1),
    ]
    assert completion.reply_text.startswith("I am the fake model backup-model.")


@pytest.mark.parametrize(
    ("answer", "reply"),
    [
        ("<think>Ann wants a greeting.</think>Tomori: Hello, Ann!", "Hello, Ann!"),
        ("tomori:   <think>hm</think> Hello, Ann!", "Hello, Ann!"),
        ("Ann: Hello?", "Ann: Hello?"),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
async def test_reasoning_and_the_personas_own_name_label_are_removed(
    fake_server: FakeLLMServer,
    runner: AttemptRunner,
    render: RecordingRender,
    answer: str,
    reply: str,
    stream: bool,
) -> None:
    fake_server.enqueue(Reply(answer))
    streaming = AttemptRunner(runner.client, stream=stream)

    completion = await streaming.complete_turn(
        models=[PRIMARY], render=render, persona_name="Tomori"
    )

    assert completion.reply_text == reply


async def test_a_prefill_is_continued_and_its_label_removed(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    render.messages.append({"role": "assistant", "content": "Tomori: *yawns*"})
    fake_server.enqueue(Reply(" Morning, Ann."))

    completion = await runner.complete_turn(models=[PRIMARY], render=render, persona_name="Tomori")

    assert completion.reply_text == "*yawns* Morning, Ann."


async def test_the_final_attempts_exact_body_and_summed_usage_are_kept(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    fake_server.enqueue(
        Fault(FaultKind.EMPTY_ANSWER),
        Reply("Hi!", prompt_tokens=90, completion_tokens=3, cached_prompt_tokens=64),
    )

    completion = await runner.complete_turn(models=[PRIMARY], render=render, persona_name="Tomori")

    assert completion.request == fake_server.chat_bodies[-1]
    empty_attempt_usage = completion.attempts[0].usage
    assert completion.usage.prompt_tokens == empty_attempt_usage.prompt_tokens + 90
    assert completion.usage.completion_tokens == empty_attempt_usage.completion_tokens + 3
    assert completion.usage.cached_prompt_tokens == empty_attempt_usage.cached_prompt_tokens + 64
    assert completion.llm_ms >= sum(a.latency_ms for a in completion.attempts)


async def test_complete_turn_needs_a_model(runner: AttemptRunner, render: RecordingRender) -> None:
    with pytest.raises(ValueError, match="at least one model"):
        await runner.complete_turn(models=[], render=render, persona_name="Tomori")
