"""Every model call passes the turn's meter: reserved just before it is sent (as a reply, a tool
round or a vision call; only the turn's first may be refused), settled once it ended with what
the provider reported; a refused first call sends nothing. OpenRouter-style costs are read and
asked for."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal

import pytest

from chat.llm.attempts import AttemptRunner
from chat.llm.base import ChatRequest, Completion, ModelRequest, ModelSpec, Usage
from chat.llm.fake_server import FakeLLMServer, Fault, FaultKind, Reply, ScriptedToolCall
from chat.llm.metering import CallCharge, Refusal, SpendRefused
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.llm.tools import VisionModel
from chat.pipeline.spend import CallKind, TokenUsage
from chat.tests.llm.conftest import RecordingRender
from chat.tests.llm.test_tools import full_toolbox

MODEL = ModelSpec("primary-model")


@dataclass
class RecordingMeter:
    """A meter that records what it was asked, refuses a first call when told to, and charges
    each call its reported prompt tokens at a dollar per million."""

    refuse: str | None = None
    reserved: list[tuple[str, CallKind, bool]] = field(default_factory=list)
    settled: list[tuple[CallKind, Usage | None, str]] = field(default_factory=list)

    async def reserve(self, request: ModelRequest, *, kind: CallKind, admitted: bool) -> object:
        self.reserved.append((request.model.name, kind, admitted))
        if self.refuse and not admitted:
            raise SpendRefused(Refusal(self.refuse))
        return kind

    async def settle(
        self, ticket: object, *, completion: Completion | None, received: str
    ) -> CallCharge | None:
        assert isinstance(ticket, CallKind)
        self.settled.append((ticket, completion.usage if completion else None, received))
        if completion is None and not received:
            return None
        prompt = completion.usage.prompt_tokens or 0 if completion else 0
        return CallCharge(ticket, TokenUsage(prompt), Decimal(prompt) / 1_000_000)


async def test_each_attempt_is_reserved_then_settled_and_its_charge_recorded(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    meter = RecordingMeter()
    fake_server.enqueue(Fault(FaultKind.HTTP_ERROR, status=500), Reply("Hi.", prompt_tokens=300))

    completion = await runner.complete_turn(
        models=[MODEL], render=render, persona_name="Tomori", meter=meter
    )

    assert meter.reserved == [
        ("primary-model", CallKind.REPLY, False),
        ("primary-model", CallKind.REPLY, True),  # a retry of a turn let in: never refused
    ]
    failed, answered = completion.attempts
    assert failed.charge is None  # nothing came back: nothing counted
    assert answered.charge.usd == Decimal("0.0003")
    assert answered.as_json()["kind"] == "reply" and answered.as_json()["usd"] == "0.0003"


async def test_a_refused_first_call_sends_nothing_and_the_turn_says_why(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    meter = RecordingMeter(refuse="the guild's budget of 10 tokens a day is spent")

    completion = await runner.complete_turn(
        models=[MODEL], render=render, persona_name="Tomori", meter=meter
    )
    stream = runner.stream_turn(models=[MODEL], render=render, persona_name="Tomori", meter=meter)
    pieces = [piece async for piece in stream]

    assert completion.refusal.reason == "the guild's budget of 10 tokens a day is spent"
    assert completion.attempts == () and completion.error is None
    assert pieces == [] and stream.result().refusal == completion.refusal
    assert fake_server.chat_bodies == []


async def test_tool_rounds_and_the_vision_model_are_counted_as_their_kinds(
    fake_server: FakeLLMServer, runner: AttemptRunner, render: RecordingRender
) -> None:
    meter = RecordingMeter()
    vision = VisionModel(runner.client, ModelSpec("vision-model", supports_vision=True))
    arguments = {"media_id": "media_2", "question": "Which animal?"}
    fake_server.enqueue(
        Reply(tool_calls=(ScriptedToolCall("analyze_image", arguments),), prompt_tokens=80),
        Reply("A cat.", prompt_tokens=50),
        Reply("It's a cat!", prompt_tokens=120),
    )
    completion = await runner.complete_turn(
        models=[MODEL],
        render=render,
        persona_name="Tomori",
        toolbox=full_toolbox(vision=vision, meter=meter),
        meter=meter,
    )

    assert [(name, kind) for name, kind, _ in meter.reserved] == [
        ("primary-model", CallKind.REPLY),
        ("vision-model", CallKind.VISION),
        ("primary-model", CallKind.TOOL),
    ]
    assert [admitted for _, _, admitted in meter.reserved] == [False, True, True]
    [vision_call] = completion.tool_calls
    assert (vision_call.model, vision_call.charge.kind) == ("vision-model", CallKind.VISION)
    assert vision_call.charge.usd == Decimal("0.00005")
    assert [a.charge.kind for a in completion.attempts] == [CallKind.REPLY, CallKind.TOOL]


async def test_a_reported_cost_is_read_and_asked_for_where_the_provider_takes_the_key(
    fake_server: FakeLLMServer,
) -> None:
    fake_server.enqueue(Reply("Hi.", prompt_tokens=10, completion_tokens=2, cost=0.000125))
    asking = ModelSpec("openai/gpt-4o-mini", asks_cost=True)

    async with OpenAICompatibleClient(base_url=fake_server.base_url) as client:
        completion = await client.complete(
            ChatRequest(model=asking, messages=[{"role": "user", "content": "hi"}])
        )

    assert completion.usage.cost == Decimal("0.000125")
    assert fake_server.chat_bodies[0]["usage"] == {"include": True}
    assert "usage" not in ChatRequest(model=MODEL, messages=[]).body()


@pytest.mark.parametrize(
    ("base_url", "asks"),
    [
        ("https://openrouter.ai/api/v1", True),
        ("https://eu.openrouter.ai/api/v1", True),
        ("https://api.openai.com/v1", False),
        ("http://127.0.0.1:11434/v1", False),
        ("https://notopenrouter.ai/v1", False),
    ],
)
def test_only_an_endpoint_that_reports_costs_is_asked_for_them(base_url: str, asks: bool) -> None:
    from chat.selectors.model_specs import endpoint_reports_cost

    assert endpoint_reports_cost(base_url=base_url) is asks


def test_a_usage_with_a_cost_keeps_it_on_the_record() -> None:
    usage = Usage(prompt_tokens=1, completion_tokens=1, cost=Decimal("0.5"))
    assert (usage + Usage(prompt_tokens=2, cost=Decimal("0.25"))).cost == Decimal("0.75")
    assert json.loads(json.dumps(usage.as_json()))["cost"] == "0.5"
    assert "cost" not in Usage(prompt_tokens=1).as_json()
