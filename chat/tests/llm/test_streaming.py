"""A reply given as the model writes it: settled text only, restarts, no retry once delivered,
and a stop that cancels the call; over real HTTP to the fake model server."""

from __future__ import annotations

import asyncio

from chat.llm.attempts import AttemptRunner
from chat.llm.base import ErrorKind, ModelSpec
from chat.llm.fake_server import (
    FakeLLMServer,
    Fault,
    FaultKind,
    Reply,
    ScriptedToolCall,
    StreamPace,
)
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.llm.streaming import ReplyStream, Restart
from chat.llm.tools import ToolBox
from chat.pipeline.tools import ToolName
from chat.tests.llm.conftest import RecordingRender
from chat.tests.llm.test_tools import FakeMessageMetadata

PRIMARY = ModelSpec("primary-model", supports_prefill=True)
BACKUP = ModelSpec("backup-model")
THREE_PARAGRAPHS = "Tomori: First part here.\n\nSecond part here.\n\nThird part."


async def drain(stream: ReplyStream) -> list[str | Restart]:
    return [event async for event in stream]


async def test_the_reply_arrives_in_pieces_without_its_label(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    fake_server.enqueue(Reply(THREE_PARAGRAPHS))

    stream = runner.stream_turn(models=[PRIMARY], render=render, persona_name="Tomori")
    events = await drain(stream)

    assert len(events) > 3 and all(isinstance(e, str) for e in events)
    assert "".join(events).strip() == "First part here.\n\nSecond part here.\n\nThird part."
    result = stream.result()
    assert result.reply_text == "First part here.\n\nSecond part here.\n\nThird part."
    assert result.error is None and [a.outcome for a in result.attempts] == ["ok"]


async def test_a_prefill_comes_first(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    render.messages.append({"role": "assistant", "content": "Tomori: *yawns*"})
    fake_server.enqueue(Reply(" Morning, Ann."))

    stream = runner.stream_turn(models=[PRIMARY], render=render, persona_name="Tomori")

    assert "".join(await drain(stream)).strip() == "*yawns* Morning, Ann."


async def test_a_failure_after_delivered_text_is_not_retried_and_keeps_the_text(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    fake_server.enqueue(Fault(FaultKind.CUT_STREAM, text=THREE_PARAGRAPHS), Reply("again"))

    stream = runner.stream_turn(
        models=[PRIMARY, BACKUP], render=render, persona_name="Tomori", delivered=lambda: True
    )
    events = await drain(stream)

    assert not any(isinstance(e, Restart) for e in events)
    result = stream.result()
    assert result.error is not None and result.error.kind is ErrorKind.CONNECTION
    assert result.reply_text == "First part here."  # the first half of the answer
    assert len(fake_server.chat_bodies) == 1  # no retry, no fallback


async def test_a_failure_before_anything_was_delivered_starts_over_on_the_fallback(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    failing = AttemptRunner(runner.client, policy=runner.policy.__class__(attempts_per_model=1))
    fake_server.enqueue(Fault(FaultKind.CUT_STREAM, text=THREE_PARAGRAPHS), Reply("Fresh start."))

    stream = failing.stream_turn(models=[PRIMARY, BACKUP], render=render, persona_name="Tomori")
    events = await drain(stream)

    restart = next(i for i, e in enumerate(events) if isinstance(e, Restart))
    assert "".join(events[restart + 1 :]).strip() == "Fresh start."
    assert stream.result().reply_text == "Fresh start."
    assert [body["model"] for body in fake_server.chat_bodies] == ["primary-model", "backup-model"]


async def test_stopping_cancels_the_model_call(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    fake_server.enqueue(Reply("word " * 200, pace=StreamPace(words_per_s=200)))

    stream = runner.stream_turn(models=[PRIMARY], render=render, persona_name="Tomori")
    async for _piece in stream:
        break
    await stream.stop("the reply reached its cap")

    await asyncio.wait_for(_until(lambda: fake_server.abandoned == [0]), 5)
    result = stream.result()
    assert result.reply_text == "word"
    assert [a.outcome for a in result.attempts] == ["stopped"]
    assert "the reply reached its cap" in result.warnings


def metadata_toolbox() -> ToolBox:
    return ToolBox(
        allowlist=(ToolName.REVEAL_MESSAGE_METADATA,), message_metadata=FakeMessageMetadata()
    )


async def test_tool_rounds_finish_before_the_reply_streams(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    fake_server.enqueue(
        Reply("Let me look.", tool_calls=(ScriptedToolCall("reveal_message_metadata"),)),
        Reply(THREE_PARAGRAPHS),
    )

    stream = runner.stream_turn(
        models=[PRIMARY], render=render, persona_name="Tomori", toolbox=metadata_toolbox()
    )
    events = await drain(stream)

    # The tool round's words were not delivered: they are void, and the reply is the answer
    # after the tool, given as it was written.
    restart = next(i for i, e in enumerate(events) if isinstance(e, Restart))
    after = events[restart + 1 :]
    assert len(after) > 3
    assert "".join(after).strip() == "First part here.\n\nSecond part here.\n\nThird part."
    assert stream.result().reply_text == "First part here.\n\nSecond part here.\n\nThird part."
    assert len(fake_server.chat_bodies) == 2


async def test_words_a_tool_round_delivered_stand_and_the_answer_follows_them(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    fake_server.enqueue(
        Reply("Let me look.", tool_calls=(ScriptedToolCall("reveal_message_metadata"),)),
        Reply("Found it."),
    )

    stream = runner.stream_turn(
        models=[PRIMARY],
        render=render,
        persona_name="Tomori",
        toolbox=metadata_toolbox(),
        delivered=lambda: True,
    )
    events = await drain(stream)

    assert not any(isinstance(e, Restart) for e in events)
    assert stream.result().reply_text == "Let me look.\n\nFound it."


async def _until(check) -> None:
    while not check():  # noqa: ASYNC110 - the fake server offers no event to wait on
        await asyncio.sleep(0.01)


async def test_the_demo_model_writes_paragraphs_at_a_human_pace(render: RecordingRender) -> None:
    from chat.management.commands.runsandbox import DEMO_MODEL_INTRODUCTION, DEMO_MODEL_PACE

    # The demo model's answer at ten times its pace: every pause the server makes is a tenth
    # as long, so the shape below, scaled back, is the demo's own.
    speedup = 10
    pace = StreamPace(
        first_token_s=DEMO_MODEL_PACE.first_token_s / speedup,
        words_per_s=DEMO_MODEL_PACE.words_per_s * speedup,
    )
    demo = FakeLLMServer(introduction=DEMO_MODEL_INTRODUCTION, pace=pace)
    async with demo, OpenAICompatibleClient(base_url=demo.base_url) as client:
        runner = AttemptRunner(client)
        started = asyncio.get_running_loop().time()
        arrivals = []
        stream = runner.stream_turn(models=[PRIMARY], render=render, persona_name="Tomori")
        async for _piece in stream:
            arrivals.append((asyncio.get_running_loop().time() - started) * speedup)

    assert arrivals[0] >= 0.8  # the first word, as a real model's first token
    assert arrivals[-1] - arrivals[0] > 2.0  # then about ten words a second
    assert stream.result().reply_text.count("\n\n") == 2  # three paragraphs to watch arrive
