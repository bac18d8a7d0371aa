"""One persona reply from a model: attempts, retries, fallback models and tool rounds.

``AttemptRunner.complete_turn`` is what every model call of the product goes through (persona turns
and the autonomous planner); `request_body` renders the same first request unsent, with no
client.
The steps:

1. Models are tried in order (the persona's model, then its fallbacks); a model is left for
   the next when it fails permanently, when its attempts are used up, or when it answers empty
   twice.
2. Every attempt asks ``render(plan)`` for its messages, so per-attempt decisions (prefill as a
   final ``assistant`` message or an instruction, images or a notice, how many old stride
   batches to drop) follow the model actually asked.
3. Transient failures (429, 5xx, timeouts, dropped connections, unreadable answers) are retried
   after a pause: the provider's ``Retry-After`` when given, else exponential backoff with
   jitter; both capped. Permanent failures (400, 401, 403, 404) are not retried.
4. An answer with no words once ``<think>`` blocks and the ``Name:`` label are removed is a
   failed attempt; it is retried once on the same model with one more stride batch dropped.
5. With a ``ToolBox``, tool calls are run and their results sent back, for at most
   ``MAX_TOOL_ROUNDS`` rounds; then one last call *without* tools makes the model answer with
   what it has, so a user who asked something always gets a reply.

Every HTTP call is recorded (``AttemptRecord``); nothing raises for a model failure: a turn
whose every model failed comes back with ``error`` set. Every call passes the turn's
``CallMeter`` (`chat.llm.metering`) just before it is sent and once it ended: a limit that
refuses the turn's first call ends the turn with ``refusal`` set and no model asked; the calls
after it (retries, fallbacks, tool rounds) are counted, never refused.

``AttemptRunner.stream_turn`` runs the same steps and gives the persona's words as the model
writes them (``ReplyStream``), for delivery as they come:

6. Text is given only once it is settled (`chat.llm.reply.settled_reply`: no reasoning, no
   ``Name:`` label, the prefill first). When the model starts calling a tool, the call is a
   tool round: its text stops there, and what it gave is void (``Restart``) unless already
   delivered; the persona's reply is the answer after the tools. (Models calling a tool rarely
   write first; holding every call that offers tools would stop streaming whenever a tool is
   offered, e.g. every turn while memory upkeep is due.)
7. An attempt that fails after giving text gives ``Restart`` (the text so far is void) and the
   next attempt or fallback model starts the reply over — unless the caller says some of it
   was delivered (``delivered``): then nothing is retried, and the stream ends with the error
   and the text given so far.

Both go through one attempt loop; they differ only in how an answer is read (``Read``): whole,
or as the model writes it. The loop is written out rather than handed to a retry library
because each retry is a product decision: it re-renders, may drop history or switch model, and
is recorded for moderators.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from chat import metrics
from chat.llm.base import (
    ChatRequest,
    Completion,
    ErrorKind,
    LLMClient,
    LLMError,
    Message,
    ModelApi,
    ModelRequest,
    ModelSpec,
    TextCompletionRequest,
    ToolCall,
    ToolCallStarted,
    Usage,
)
from chat.llm.metering import UNMETERED, CallCharge, CallMeter, Refusal, SpendRefused
from chat.llm.reply import settled_reply, strip_name_label, strip_reasoning
from chat.llm.streaming import ReplyStream, Restart
from chat.llm.tools import ToolBox, ToolName
from chat.llm.turn_completion import AttemptRecord, TurnCompletion
from chat.pipeline.instruct import InstructPrompt, instruct_prompt_from_messages
from chat.pipeline.spend import CallKind

MAX_TOOL_ROUNDS = 3
"""Rounds of tool calls per turn; the call after the last round offers no tools."""


@dataclass(frozen=True)
class AttemptPlan:
    """What one attempt's messages must be rendered for.

    ``model`` is the model asked (its vision and prefill support decide media and prefill);
    ``shorten_batches`` is how many extra stride batches of old history to drop (it grows by one
    after an empty answer and never shrinks within a turn); ``tools`` names the tools this
    attempt offers, so hints that name a tool appear only when it is offered.
    """

    model: ModelSpec
    shorten_batches: int = 0
    tools: tuple[ToolName, ...] = ()


Render = Callable[[AttemptPlan], list[Message] | InstructPrompt]
"""Builds one attempt's OpenAI messages. A final ``assistant`` message is a prefill: the model
continues it, tool exchanges are placed before it, and the reply starts with its text. For a
text-completion model (``plan.model.api``), the prompt in its instruct template instead
(messages given for such a model are written in its template); no tools: such a model cannot
call them, and a tool exchange of an earlier model is left out."""

Sleeper = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class RetryPolicy:
    """Bounds on retrying one model (all durations in seconds)."""

    attempts_per_model: int = 3
    backoff_base: float = 0.5
    backoff_cap: float = 8.0
    retry_after_cap: float = 30.0

    def pause_before_retry(self, error: LLMError, *, retry_number: int, jitter: float) -> float:
        """How long to wait after a transient ``error`` before retry ``retry_number`` (1-based).

        The provider's ``Retry-After`` is honoured up to ``retry_after_cap``; otherwise the pause
        is ``min(backoff_cap, backoff_base × 2^(retry_number − 1))``, of which the upper half is
        random (``jitter`` in [0, 1)) so that many workers do not retry in step.
        """
        if error.retry_after is not None:
            return min(error.retry_after, self.retry_after_cap)
        ceiling = min(self.backoff_cap, self.backoff_base * 2 ** (retry_number - 1))
        return ceiling * (1 + jitter) / 2


@dataclass(frozen=True)
class AttemptRunner:
    """Runs turns against one client; ``sleep`` and ``jitter`` are injectable for tests.

    ``stream`` is on by default: the client's read timeout then bounds the silence between
    chunks rather than the whole generation, so a slow local model is not cut off while it is
    still writing (the client's total timeout still bounds the call).
    """

    client: LLMClient
    policy: RetryPolicy = RetryPolicy()
    stream: bool = True
    sleep: Sleeper = asyncio.sleep
    jitter: Callable[[], float] = random.random

    async def complete_turn(
        self,
        *,
        models: Sequence[ModelSpec],
        render: Render,
        persona_name: str,
        toolbox: ToolBox | None = None,
        meter: CallMeter = UNMETERED,
        kind: CallKind = CallKind.REPLY,
    ) -> TurnCompletion:
        """Get one reply for a persona turn (steps in the module docstring).

        ``models`` is the persona's model followed by its fallbacks (at least one); ``meter``
        counts each call as ``kind`` (a tool round's as ``tool``) and may refuse the first.
        Returns a ``TurnCompletion``; raises only ``ValueError`` for an empty ``models`` and
        whatever ``render`` or the toolbox's dependencies raise unexpectedly.
        """
        if not models:
            raise ValueError("complete_turn needs at least one model")
        exchange = _Exchange(
            self,
            models=models,
            render=render,
            persona_name=persona_name,
            read=_whole,
            meter=meter,
            kind=kind,
        )
        reply = ""
        try:
            pieces = exchange.converse(toolbox, _never_delivered)
            async with contextlib.aclosing(pieces):
                async for piece in pieces:
                    reply = "" if isinstance(piece, Restart) else reply + piece
        except LLMError as error:
            return exchange.result(reply_text="", error=error)
        except SpendRefused as refused:
            return exchange.result(reply_text="", refusal=refused.refusal)
        return exchange.result(reply_text=reply)

    def stream_turn(
        self,
        *,
        models: Sequence[ModelSpec],
        render: Render,
        persona_name: str,
        toolbox: ToolBox | None = None,
        delivered: Callable[[], bool] = lambda: False,
        meter: CallMeter = UNMETERED,
    ) -> ReplyStream:
        """The reply of ``complete_turn``, given as the model writes it (module docstring,
        steps 6 and 7). ``delivered`` says whether any of the text given so far has been
        delivered; ``meter`` counts the calls as ``complete_turn``'s does. Raises
        ``ValueError`` for an empty ``models``."""
        if not models:
            raise ValueError("stream_turn needs at least one model")
        exchange = _Exchange(
            self,
            models=models,
            render=render,
            persona_name=persona_name,
            read=_as_written,
            meter=meter,
            kind=CallKind.REPLY,
        )
        return ReplyStream(exchange, toolbox, delivered)


def request_body(
    *, models: Sequence[ModelSpec], render: Render, toolbox: ToolBox | None, stream: bool
) -> dict[str, Any]:
    """The exact body `AttemptRunner.complete_turn` (with ``stream``) sends first for the same
    arguments, rendered without a client (a dry run, the dashboard's prompt preview). Raises
    ``ValueError`` for an empty ``models``."""
    if not models:
        raise ValueError("a request needs at least one model")
    _plan, request, _prefill_text = _model_request(models[0], render, [], toolbox, 0, stream=stream)
    return request.body()


def _model_request(
    model: ModelSpec,
    render: Render,
    transcript: list[Message],
    toolbox: ToolBox | None,
    shorten_batches: int,
    *,
    stream: bool,
) -> tuple[AttemptPlan, ModelRequest, str]:
    """One attempt's plan, its request (Chat Completions, or Completions for a
    text-completion model, which is offered no tools) and the prefill its reply starts
    with."""
    if model.api is ModelApi.COMPLETIONS:
        toolbox = None
    tools = toolbox.offered if toolbox is not None else ()
    plan = AttemptPlan(model=model, shorten_batches=shorten_batches, tools=tools)
    rendered = render(plan)
    if model.api is ModelApi.COMPLETIONS and not isinstance(rendered, InstructPrompt):
        rendered = instruct_prompt_from_messages(rendered, model.template())
    if isinstance(rendered, InstructPrompt):
        request = TextCompletionRequest(
            model=model, prompt=rendered.text, stop=rendered.stop, stream=stream
        )
        return plan, request, rendered.prefill
    messages = _with_transcript(rendered, transcript)
    chat = ChatRequest(
        model=model,
        messages=messages,
        tools=toolbox.definitions() if toolbox is not None else (),
        stream=stream,
    )
    return plan, chat, _prefill(messages)


Read = Callable[[LLMClient, ModelRequest], AsyncIterator[str | ToolCallStarted | Completion]]
"""How an exchange reads one request's answer: text pieces (and ``ToolCallStarted``) as they
come, then the ``Completion`` (``LLMClient.stream``'s shape)."""


async def _whole(
    client: LLMClient, request: ModelRequest
) -> AsyncIterator[str | ToolCallStarted | Completion]:
    """The answer at once (``complete_turn``): the completion, no text before it."""
    yield await client.complete(request)


def _as_written(
    client: LLMClient, request: ModelRequest
) -> AsyncIterator[str | ToolCallStarted | Completion]:
    """The answer as the model writes it (``stream_turn``)."""
    return client.stream(request)


def _never_delivered() -> bool:
    return False


@dataclass(frozen=True)
class _Answer:
    """A successful attempt: the reply to deliver, or tool calls to run."""

    reply: str
    text: str
    tool_calls: tuple[ToolCall, ...]


class _Exchange:
    """The mutable state of one ``complete_turn`` or ``stream_turn``: position in the model
    list, the shortening level, the records so far; ``read`` is how each answer is read."""

    def __init__(
        self,
        runner: AttemptRunner,
        *,
        models: Sequence[ModelSpec],
        render: Render,
        persona_name: str,
        read: Read,
        meter: CallMeter,
        kind: CallKind,
    ) -> None:
        self._runner = runner
        self._read = read
        self._meter = meter
        self._kind = kind
        self._admitted = False
        self._meter_s = 0.0
        self._tool_calls: list[AttemptRecord] = []
        self._models = models
        self._render = render
        self._persona_name = persona_name
        self._model_index = 0
        self._shorten_batches = 0
        self._started = time.perf_counter()
        self._tool_usage = Usage()
        self._request: dict[str, Any] = {}
        self._records: list[AttemptRecord] = []
        self._warnings: list[str] = []
        self._after_spoken_round = False

    async def converse(
        self, toolbox: ToolBox | None, delivered: Callable[[], bool]
    ) -> AsyncIterator[str | Restart]:
        """Call the model, run its tool calls, repeat; give the reply's text (all at once when
        the exchange reads whole answers). Raises ``LLMError`` when no model answered, or when
        one failed after some of its text was delivered."""
        transcript: list[Message] = []
        for round_number in range(MAX_TOOL_ROUNDS + 1):
            offered = toolbox if round_number < MAX_TOOL_ROUNDS else None
            if round_number == MAX_TOOL_ROUNDS:
                self.warn(
                    f"the model used all {MAX_TOOL_ROUNDS} tool rounds; it answered without tools"
                )
            answers: list[_Answer] = []
            pieces = self._call(round_number, transcript, offered, delivered)
            async with contextlib.aclosing(pieces):
                async for piece in pieces:
                    if isinstance(piece, _Answer):
                        answers.append(piece)
                    else:
                        yield piece
            [answer] = answers
            if not answer.tool_calls:
                return
            assert toolbox is not None  # tool calls are only accepted when tools were offered
            transcript += await self._exchange_tools(toolbox, answer)

    def warn(self, warning: str) -> None:
        self._warnings.append(warning)

    def _separated(self, text: str) -> str:
        """``text``, after a paragraph break when it is the first of an answer that follows
        a tool round whose words were delivered."""
        if self._after_spoken_round:
            self._after_spoken_round = False
            return "\n\n" + text
        return text

    def result(
        self, *, reply_text: str, error: LLMError | None = None, refusal: Refusal | None = None
    ) -> TurnCompletion:
        usage = sum((record.usage for record in self._records), self._tool_usage)
        return TurnCompletion(
            reply_text=reply_text,
            attempts=tuple(self._records),
            usage=usage,
            request=self._request,
            llm_ms=(time.perf_counter() - self._started) * 1000,
            warnings=tuple(self._warnings),
            error=error,
            tool_calls=tuple(self._tool_calls),
            refusal=refusal,
            meter_ms=self._meter_s * 1000,
        )

    async def _call(
        self,
        round_number: int,
        transcript: list[Message],
        toolbox: ToolBox | None,
        delivered: Callable[[], bool],
    ) -> AsyncIterator[str | Restart | _Answer]:
        """One model answer, trying the remaining models in order: the reply's text as it
        comes, then the ``_Answer``. Raises the last model's ``LLMError`` when none is left; no
        fallback model once some text was delivered: the error is raised."""
        while True:
            model = self._models[self._model_index]
            pieces = self._call_model(model, round_number, transcript, toolbox, delivered)
            try:
                async with contextlib.aclosing(pieces):
                    async for piece in pieces:
                        yield piece
                return
            except LLMError as error:
                if self._model_index + 1 == len(self._models) or delivered():
                    raise
                self._model_index += 1
                fallback = self._models[self._model_index].name
                self._warnings.append(f"{model.name} failed ({error}); fell back to {fallback}")

    async def _call_model(
        self,
        model: ModelSpec,
        round_number: int,
        transcript: list[Message],
        toolbox: ToolBox | None,
        delivered: Callable[[], bool],
    ) -> AsyncIterator[str | Restart | _Answer]:
        """One answer from ``model``, retrying within the policy (module docstring, steps 3, 4,
        6 and 7): its settled text as the exchange's ``read`` gives it, then the ``_Answer``.
        Raises ``LLMError`` when the model failed permanently, used up its attempts, answered
        empty twice, or failed after some of its text was delivered."""
        runner = self._runner
        empty_retried = False
        attempt_number = 0
        while True:
            attempt_number += 1
            plan, request, prefill = _model_request(
                model,
                self._render,
                transcript,
                toolbox,
                self._shorten_batches,
                stream=runner.stream,
            )
            self._request = request.body()
            kind = self._kind if round_number == 0 else CallKind.TOOL
            metering = time.perf_counter()
            try:
                ticket = await self._meter.reserve(request, kind=kind, admitted=self._admitted)
            finally:
                self._meter_s += time.perf_counter() - metering
            self._admitted = True
            started = time.perf_counter()
            completion: Completion | None = None
            raw, given, calling = "", "", False
            try:
                async with contextlib.aclosing(self._read(runner.client, request)) as chunks:
                    async for item in chunks:
                        if isinstance(item, Completion):
                            completion = item
                        elif isinstance(item, ToolCallStarted):
                            # A tool round: its text so far is no reply, unless delivered.
                            calling = True
                            if given and not delivered():
                                yield Restart("the model called a tool")
                                given = ""
                        elif not calling:
                            raw += item
                            settled = settled_reply(raw, name=self._persona_name, prefill=prefill)
                            if len(settled) > len(given):
                                yield self._separated(settled[len(given) :])
                                given = settled
                if completion is None:
                    raise LLMError(
                        "the stream gave no completion", kind=ErrorKind.MALFORMED, permanent=False
                    )
                answer = self._judge(completion, prefill, tools_offered=bool(plan.tools))
            except LLMError as error:
                charge = await self._settle(ticket, completion, raw)
                if given and delivered():
                    self._record(plan, round_number, started, completion, error, charge=charge)
                    raise
                pause = self._pause_after(error, attempt_number, empty_retried)
                self._record(
                    plan, round_number, started, completion, error, pause or 0.0, charge=charge
                )
                if given:
                    yield Restart(str(error))
                if pause is None:
                    raise
                if error.kind is ErrorKind.EMPTY_ANSWER:
                    empty_retried = True
                    self._shorten_batches += 1
                if pause:
                    await runner.sleep(pause)
                continue
            except BaseException:
                # Stopped by the caller (the reply cap, a cancelled turn): the call is recorded
                # and counted with what it wrote so far.
                charge = await asyncio.shield(self._settle(ticket, completion, raw))
                self._record(
                    plan, round_number, started, completion, outcome="stopped", charge=charge
                )
                raise
            charge = await self._settle(ticket, completion, raw)
            self._record(plan, round_number, started, completion, charge=charge)
            # The rest of the text, whole: what was held, and what the end settled.
            rest = answer.reply[len(given) :] if answer.reply.startswith(given) else ""
            if rest and not answer.tool_calls:
                yield self._separated(rest)
            # Words a tool round delivered stand; the answer after the tools starts a new
            # paragraph after them.
            self._after_spoken_round = bool(given) and bool(answer.tool_calls)
            yield answer
            return

    async def _settle(
        self, ticket: object, completion: Completion | None, received: str
    ) -> CallCharge | None:
        metering = time.perf_counter()
        try:
            return await self._meter.settle(ticket, completion=completion, received=received)
        finally:
            self._meter_s += time.perf_counter() - metering

    def _pause_after(
        self, error: LLMError, attempt_number: int, empty_retried: bool
    ) -> float | None:
        """Seconds to wait before retrying the same model, or ``None`` to give it up."""
        policy = self._runner.policy
        if error.permanent or attempt_number >= policy.attempts_per_model:
            return None
        if error.kind is ErrorKind.EMPTY_ANSWER:
            return None if empty_retried else 0.0
        return policy.pause_before_retry(
            error, retry_number=attempt_number, jitter=self._runner.jitter()
        )

    def _judge(self, completion: Completion, prefill: str, *, tools_offered: bool) -> _Answer:
        """Turn a completion into an answer. Tool calls count only when tools were offered.
        Raises ``LLMError`` (empty answer) when there are no calls and no words."""
        tool_calls = completion.tool_calls if tools_offered else ()
        text = strip_reasoning(completion.text)
        if not tool_calls and not strip_name_label(text, name=self._persona_name):
            raise LLMError(
                "the answer had no text besides reasoning",
                kind=ErrorKind.EMPTY_ANSWER,
                permanent=False,
            )
        reply = strip_name_label(prefill + text, name=self._persona_name)
        return _Answer(reply=reply, text=text, tool_calls=tool_calls)

    async def _exchange_tools(self, toolbox: ToolBox, answer: _Answer) -> list[Message]:
        """Run the answer's tool calls in order; return the assistant message that asked for
        them followed by one ``tool`` message per call."""
        exchange: list[Message] = [
            {
                "role": "assistant",
                "content": answer.text.strip() or None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in answer.tool_calls
                ],
            }
        ]
        results = await toolbox.run_round(answer.tool_calls)
        for call, result in zip(answer.tool_calls, results, strict=True):
            self._tool_usage += result.usage
            self._tool_calls += result.calls
            exchange.append({"role": "tool", "tool_call_id": call.id, "content": result.content})
        return exchange

    def _record(
        self,
        plan: AttemptPlan,
        round_number: int,
        started: float,
        completion: Completion | None,
        error: LLMError | None = None,
        wait_s: float = 0.0,
        *,
        outcome: str = "",
        charge: CallCharge | None = None,
    ) -> None:
        self._records.append(
            AttemptRecord(
                model=plan.model.name,
                tool_round=round_number,
                shorten_batches=plan.shorten_batches,
                latency_ms=(time.perf_counter() - started) * 1000,
                outcome=outcome or (str(error.kind) if error is not None else "ok"),
                error=error.message if error is not None else "",
                status=error.status if error is not None else None,
                retry_after=error.retry_after if error is not None else None,
                wait_s=wait_s,
                usage=completion.usage if completion is not None else Usage(),
                charge=charge,
            )
        )
        _count(self._records[-1])


def _count(record: AttemptRecord) -> None:
    """Count one HTTP call in the product's metrics (`chat.metrics`)."""
    metrics.model_call_counted(
        model=record.model,
        outcome=record.outcome,
        seconds=record.latency_ms / 1000,
        prompt_tokens=record.usage.prompt_tokens,
        cached_prompt_tokens=record.usage.cached_prompt_tokens,
        completion_tokens=record.usage.completion_tokens,
    )


def _with_transcript(messages: list[Message], transcript: list[Message]) -> list[Message]:
    """The rendered messages with the tool exchange so far, kept before a final prefill."""
    if transcript and messages and messages[-1].get("role") == "assistant":
        return [*messages[:-1], *transcript, messages[-1]]
    return [*messages, *transcript]


def _prefill(messages: list[Message]) -> str:
    """The text of a final ``assistant`` message (the prefill the model continued), else ``""``."""
    last = messages[-1] if messages else {}
    content = last.get("content")
    return content if last.get("role") == "assistant" and isinstance(content, str) else ""
