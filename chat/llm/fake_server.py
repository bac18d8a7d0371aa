"""A local OpenAI-compatible server for tests and the demo: scripted answers and injected faults.

Speaks ``POST /v1/chat/completions`` (plain JSON, or SSE ``data: …`` chunks ending with
``data: [DONE]`` when ``stream`` is true), ``POST /v1/completions`` (a text-completion model:
``prompt`` in, ``choices[0].text`` out, the answer cut at the first of the request's ``stop``
strings as a server does; the default answer quotes the prompt's last dialogue line),
``POST /v1/embeddings`` (deterministic vectors of hashed words,
`embeddings.HashingEmbeddings`'), ``POST /v1/moderations`` (a deterministic moderation service,
`fake_moderation.FakeModeration`: ``moderation``) and ``GET /v1/models``. Every request is
recorded in ``requests``. Each chat request takes the next item of the script, a queue of:

- ``Reply``: a text and/or tool calls (usage counts may be fixed, else they are estimated; a
  ``cost`` is reported in the usage when given, as OpenRouter reports one);
- ``Fault``: an HTTP error (500, 429 with ``Retry-After``, 401, …), a timeout (the server sleeps
  past the client's limit), a malformed JSON body, a stream cut off before ``[DONE]``, an empty
  answer, or a reasoning-only answer.

A streamed answer goes out a word at a time; with a ``StreamPace`` (the server's, or a
``Reply``'s own) it goes out at that pace — the first word after ``first_token_s``, then
``words_per_s`` — as a model writes (the demo model streams at a human pace). A client that
hangs up before the end (a cancelled call) is recorded in ``abandoned``.

With the script empty, a ``responder`` (when given) chooses the answer from the request body
(benchmarks script a planner policy this way); without one, the default rule answers "I am the
fake model <model>. You said: <the last user message>"; the introduction is a constructor
argument (the demo says it is the demo model). Usage is always reported, cached prompt tokens
included: the estimate counts the prefix a request shares with the previous one as cached, as a
provider's prompt cache would; ``reported_usage`` lists every usage it reported.

A ``guard`` (when given) reads every chat request body as it arrives; what it returns (a list of
findings) is kept in ``guard_findings``. ``raw_discord_identifiers`` is the guard the end-to-end
suite runs: no text part of a request may hold a raw snowflake or a Discord CDN URL.

In-process (ephemeral port)::

    async with FakeLLMServer(script=[Fault(FaultKind.HTTP_ERROR, status=500)]) as server:
        client = OpenAICompatibleClient(base_url=server.base_url)

From a shell: ``python -m chat.llm.fake_server --port 8400`` (then
``LLM_BASE_URL=http://127.0.0.1:8400/v1``).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import re
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from chat.llm.embeddings import hashed_vector
from chat.llm.fake_answers import ChatAnswer, TextAnswer, arguments_text
from chat.llm.fake_moderation import FakeModeration


class FaultKind(StrEnum):
    HTTP_ERROR = "http_error"  # answer with ``status`` (and ``Retry-After`` when given)
    TIMEOUT = "timeout"  # sleep ``delay`` seconds, then answer normally
    MALFORMED_JSON = "malformed_json"  # a 200 whose body (or first chunk) is not JSON
    CUT_STREAM = "cut_stream"  # send part of the answer, then drop the connection
    EMPTY_ANSWER = "empty_answer"  # a well-formed answer with no text
    REASONING_ONLY = "reasoning_only"  # a well-formed answer holding only a <think> block


@dataclass(frozen=True)
class StreamPace:
    """How fast a streamed answer is written: the first word after ``first_token_s`` seconds,
    then ``words_per_s`` words a second (each word is one chunk: one token, for the tests)."""

    first_token_s: float = 0.0
    words_per_s: float = 0.0

    def pause_before(self, index: int) -> float:
        """Seconds to wait before chunk ``index`` (0: the first word)."""
        if index == 0:
            return self.first_token_s
        return 1 / self.words_per_s if self.words_per_s > 0 else 0.0


@dataclass(frozen=True)
class Fault:
    """An injected failure. ``CUT_STREAM`` sends the first half of ``text`` (the default
    answer when empty), at ``pace``, then drops the connection."""

    kind: FaultKind
    status: int = 500
    retry_after: str | None = None
    delay: float = 30.0
    text: str = ""
    pace: StreamPace | None = None


@dataclass(frozen=True)
class ScriptedToolCall:
    name: str
    arguments: str | dict[str, Any] = "{}"
    """A dict is sent as its JSON text; a string is sent as is (so it may be malformed)."""


@dataclass(frozen=True)
class Reply:
    """One scripted answer. Usage counts left ``None`` are estimated from the request."""

    text: str = ""
    tool_calls: tuple[ScriptedToolCall, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    pace: StreamPace | None = None
    """How fast this answer is streamed; None: the server's pace."""
    cost: float | None = None
    """The call's cost reported in its usage (``usage.cost``, as OpenRouter reports it); None:
    no cost reported."""

    @classmethod
    def calling(cls, name: str, arguments: str | dict[str, Any] = "{}") -> Reply:
        """An answer that is a single tool call."""
        return cls(tool_calls=(ScriptedToolCall(name, arguments),))


ScriptItem = Reply | Fault

# A raw Discord snowflake: a run of 17–20 digits (or longer, which holds one).
_SNOWFLAKE = re.compile(r"[0-9]{17,}")
# A Discord CDN link (the real hosts, or any host's ``/attachments/<channel>/<attachment>/``
# path, which is how the sandbox serves uploads).
_CDN_URL = re.compile(
    r"(?:cdn\.discordapp\.com|media\.discordapp\.net|/attachments/[0-9]+/[0-9]+/)",
    re.IGNORECASE,
)


def request_text_parts(body: Any) -> Iterator[tuple[str, str]]:
    """Every text a chat request hands the model, as ``(where, text)``: each message's string
    content or ``text`` parts (``messages[3] (tool)``), whatever its role. Image parts, tool
    schemas and the model's own tool-call arguments are not text parts."""
    if not isinstance(body, dict):
        yield "body", str(body)
        return
    for index, message in enumerate(body.get("messages") or []):
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        where = f"messages[{index}] ({message.get('role')})"
        if isinstance(content, str):
            yield where, content
        elif isinstance(content, list):
            for part_index, part in enumerate(content):
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    yield f"{where} part {part_index}", part["text"]
    if isinstance(body.get("prompt"), str):
        yield "prompt", body["prompt"]


def raw_discord_identifiers(body: Any) -> list[str]:
    """The guard DESIGN §3 asks for ("never raw snowflakes"): one finding per text part of
    ``body`` that holds a run of 17–20 digits or a Discord CDN URL, naming where and quoting
    around the match; ``[]`` when the request is clean."""
    findings = []
    for where, text in request_text_parts(body):
        for pattern in (_SNOWFLAKE, _CDN_URL):
            match = pattern.search(text)
            if match is not None:
                start, end = max(0, match.start() - 60), match.end() + 60
                findings.append(f"{where}: …{text[start:end]}…")
    return findings


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    """The parsed JSON body; the raw text when it was not JSON; ``None`` without a body."""


class FakeLLMServer:
    """The fake server; see the module docstring. ``base_url`` is set once started."""

    def __init__(
        self,
        *,
        script: Iterable[ScriptItem] = (),
        models: Sequence[str] = ("fake-model",),
        host: str = "127.0.0.1",
        port: int = 0,
        introduction: str = "I am the fake model {model}.",
        responder: Callable[[dict[str, Any]], ScriptItem] | None = None,
        pace: StreamPace = StreamPace(),
        guard: Callable[[Any], list[str]] | None = None,
        moderation_latency_s: float = 0.0,
    ) -> None:
        self.requests: list[RecordedRequest] = []
        self.moderation = FakeModeration(latency_s=moderation_latency_s)
        """The moderation service at ``/v1/moderations`` (its latency, failures and the texts
        it was asked)."""
        self.abandoned: list[int] = []
        """Indices (in ``chat_bodies``) of streamed answers whose client hung up first."""
        self.word_times: dict[int, list[float]] = {}
        """When each word of a streamed answer was sent (``time.monotonic``), by the index of
        its request in ``chat_bodies`` (the benchmarks time the model's tokens with it)."""
        self.pace = pace
        self.embedding_delay = 0.0
        """Seconds each embedding request waits before it is answered (a slow endpoint)."""
        self._guard = guard
        self.guard_findings: list[str] = []
        self.reported_usage: list[dict[str, Any]] = []
        """The usage of every chat and text completion answered with its usage (a whole
        answer, or a stream that asked for it), in order: what a client could count."""
        self._responder = responder
        self._introduction = introduction
        self.base_url = ""
        self._script: deque[ScriptItem] = deque(script)
        self._models = tuple(models)
        self._host = host
        self._port = port
        self._previous_prompt = ""
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.app = web.Application()
        self.app.router.add_post("/v1/chat/completions", self._chat_completions)
        self.app.router.add_post("/v1/completions", self._text_completions)
        self.app.router.add_get("/v1/models", self._list_models)
        self.app.router.add_post("/v1/embeddings", self._embeddings)
        self.app.router.add_post("/v1/moderations", self._moderations)

    def enqueue(self, *items: ScriptItem) -> None:
        """Append answers to the script."""
        self._script.extend(items)

    @property
    def chat_bodies(self) -> list[Any]:
        """The bodies of the chat completion requests received, in order."""
        return [r.body for r in self.requests if r.path == "/v1/chat/completions"]

    @property
    def completion_bodies(self) -> list[Any]:
        """The bodies of the text completion requests received, in order."""
        return [r.body for r in self.requests if r.path == "/v1/completions"]

    async def __aenter__(self) -> Self:
        """Start serving on ``host:port`` (port 0: an ephemeral one) and set ``base_url``."""
        self._runner = web.AppRunner(self.app, handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.base_url = f"http://{host}:{port}/v1"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _list_models(self, request: web.Request) -> web.Response:
        self._record(request, None)
        models = [{"id": name, "object": "model", "owned_by": "fake"} for name in self._models]
        return web.json_response({"object": "list", "data": models})

    @property
    def embedding_bodies(self) -> list[Any]:
        """The bodies of the embedding requests received, in order."""
        return [r.body for r in self.requests if r.path == "/v1/embeddings"]

    async def _embeddings(self, request: web.Request) -> web.Response:
        """``POST /v1/embeddings``: `HashingEmbeddings`' vectors (texts sharing words point
        the same way), one per input, in the OpenAI response shape."""
        try:
            body = json.loads(await request.text())
        except json.JSONDecodeError:
            body = None
        self._record(request, body)
        if self.embedding_delay:
            await asyncio.sleep(self.embedding_delay)
        texts = body.get("input") if isinstance(body, dict) else None
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return _error_response(400, "input must be a string or a list of strings")
        data = [
            {"object": "embedding", "index": n, "embedding": hashed_vector(text)}
            for n, text in enumerate(texts)
        ]
        usage = {"prompt_tokens": sum(len(t.split()) for t in texts)}
        usage["total_tokens"] = usage["prompt_tokens"]
        return web.json_response(
            {"object": "list", "data": data, "model": body.get("model"), "usage": usage}
        )

    @property
    def moderation_bodies(self) -> list[Any]:
        """The bodies of the moderation requests received, in order."""
        return [r.body for r in self.requests if r.path == "/v1/moderations"]

    async def _moderations(self, request: web.Request) -> web.Response:
        """``POST /v1/moderations``: recorded, then answered by ``moderation``."""
        await self._received(request, "moderation")
        return await self.moderation.handle(request)

    async def _received(self, request: web.Request, label: str) -> Any:
        """Read and record a request's body (JSON, or the raw text when it is not), and run
        the guard over it; findings are named ``<label> <number>``."""
        raw = await request.text()
        try:
            body = json.loads(raw)
        except json.JSONDecodeError:
            body = raw
        self._record(request, body)
        if self._guard is not None:
            number = sum(r.path == request.path for r in self.requests)
            self.guard_findings.extend(f"{label} {number}: {f}" for f in self._guard(body))
        return body

    def _next_item(self, body: dict[str, Any], default: Callable[[], ScriptItem]) -> ScriptItem:
        """The script's next item, else the responder's, else ``default()``."""
        if self._script:
            return self._script.popleft()
        if self._responder is not None:
            return self._responder(body)
        return default()

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = await self._received(request, "request")
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return _error_response(400, "the body must be a JSON object with a messages list")
        item = self._next_item(body, lambda: self._default_reply(body))
        if isinstance(item, Fault):
            return await self._fault(request, body, item)
        return await self._answer(request, body, item)

    async def _text_completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/completions``: the script's next item (tool calls are not sent: a
        text-completion model has none), the responder's, or the default answer quoting the
        prompt; faults as for chat, a cut stream sent as a malformed body."""
        body = await self._received(request, "completion")
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
            return _error_response(400, "the body must be a JSON object with a prompt string")
        item = self._next_item(body, lambda: self._default_text_reply(body))
        if isinstance(item, Fault):
            match item.kind:
                case FaultKind.HTTP_ERROR:
                    headers = {"Retry-After": item.retry_after} if item.retry_after else {}
                    return _error_response(item.status, f"fake fault {item.status}", headers)
                case FaultKind.TIMEOUT:
                    await asyncio.sleep(item.delay)
                    item = self._default_text_reply(body)
                case FaultKind.EMPTY_ANSWER:
                    item = Reply("")
                case FaultKind.REASONING_ONLY:
                    item = Reply("<think>The user wants an answer. Let me think.</think>")
                case _:
                    return web.Response(text='{"choices": [', content_type="application/json")
        text = _cut_at_stop(item.text, body.get("stop"))
        answer = TextAnswer(
            id=f"cmpl-fake-{next(self._ids)}",
            model=str(body.get("model", "")),
            text=text,
            usage=self._usage(body, Reply(text)),
        )
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if include_usage or not body.get("stream"):
            self.reported_usage.append(answer.usage)
        if not body.get("stream"):
            return web.json_response(answer.response())
        events = [*answer.chunks(include_usage), "[DONE]"]
        return await _send_events(request, events, item.pace or self.pace, answer.words)

    def _default_text_reply(self, body: dict[str, Any]) -> Reply:
        quote = _last_prompt_line(body["prompt"])[:200]
        introduction = self._introduction.format(model=body.get("model"))
        return Reply(f"{introduction} You said: {quote}")

    def _record(self, request: web.Request, body: Any) -> None:
        self.requests.append(
            RecordedRequest(request.method, request.path, dict(request.headers), body)
        )

    def _default_reply(self, body: dict[str, Any]) -> Reply:
        quote = _last_user_text(body["messages"])[:200]
        introduction = self._introduction.format(model=body.get("model"))
        return Reply(f"{introduction} You said: {quote}")

    async def _fault(
        self, request: web.Request, body: dict[str, Any], fault: Fault
    ) -> web.StreamResponse:
        match fault.kind:
            case FaultKind.HTTP_ERROR:
                headers = {"Retry-After": fault.retry_after} if fault.retry_after else {}
                return _error_response(fault.status, f"fake fault {fault.status}", headers)
            case FaultKind.TIMEOUT:
                await asyncio.sleep(fault.delay)
                return await self._answer(request, body, self._default_reply(body))
            case FaultKind.MALFORMED_JSON:
                if body.get("stream"):
                    return await _send_events(request, ['{"choices": [{"delta": '])
                return web.Response(text='{"choices": [', content_type="application/json")
            case FaultKind.CUT_STREAM:
                return await self._cut_off(request, body, fault)
            case FaultKind.EMPTY_ANSWER:
                return await self._answer(request, body, Reply(""))
            case FaultKind.REASONING_ONLY:
                reasoning = Reply("<think>The user wants an answer. Let me think.</think>")
                return await self._answer(request, body, reasoning)

    async def _answer(
        self, request: web.Request, body: dict[str, Any], reply: Reply
    ) -> web.StreamResponse:
        answer = ChatAnswer(
            id=f"chatcmpl-fake-{next(self._ids)}",
            model=str(body.get("model", "")),
            reply=reply,
            usage=self._usage(body, reply),
        )
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        if include_usage or not body.get("stream"):
            self.reported_usage.append(answer.usage)
        if not body.get("stream"):
            return web.json_response(answer.response())
        events = [*answer.chunks(include_usage), "[DONE]"]
        return await self._stream(request, events, reply.pace or self.pace, answer.words)

    async def _stream(
        self, request: web.Request, events: Sequence[str], pace: StreamPace, words: int
    ) -> web.StreamResponse:
        """`_send_events` with its ``words`` word events at ``pace``; a client that hangs up
        before the last event is recorded in ``abandoned``."""
        index = len(self.chat_bodies) - 1
        sent_at = self.word_times.setdefault(index, [])
        try:
            return await _send_events(request, events, pace, words, sent_at)
        except (ConnectionResetError, asyncio.CancelledError):
            self.abandoned.append(index)
            raise

    async def _cut_off(
        self, request: web.Request, body: dict[str, Any], fault: Fault
    ) -> web.StreamResponse:
        """Send the first half of an answer, then drop the connection (no ``[DONE]``)."""
        reply = Reply(fault.text) if fault.text else self._default_reply(body)
        answer = ChatAnswer("chatcmpl-cut", str(body.get("model", "")), reply, {})
        response = web.StreamResponse(status=200)
        if body.get("stream"):
            response.content_type = "text/event-stream"
            chunks = list(answer.chunks(include_usage=False))
            await response.prepare(request)
            pace = fault.pace or self.pace
            for index, chunk in enumerate(chunks[: len(chunks) // 2]):
                if index and (pause := pace.pause_before(index - 1)):
                    await asyncio.sleep(pause)
                await response.write(f"data: {chunk}\n\n".encode())
            assert request.transport is not None
            request.transport.close()
            return response
        full = json.dumps(answer.response())
        response.content_type = "application/json"
        response.content_length = len(full)
        payload = full[: len(full) // 2]
        await response.prepare(request)
        await response.write(payload.encode())
        assert request.transport is not None
        request.transport.close()
        return response

    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        """Reported usage: the reply's fixed counts, else estimates (4 characters a token; the
        prefix shared with the previous request counts as cached). Remembers this prompt."""
        prompt = (
            body["prompt"]
            if isinstance(body.get("prompt"), str)
            else json.dumps(body["messages"], ensure_ascii=False)
        )
        shared = _shared_prefix_length(self._previous_prompt, prompt)
        self._previous_prompt = prompt
        output = reply.text + "".join(arguments_text(call) for call in reply.tool_calls)
        prompt_tokens = _first_set(reply.prompt_tokens, len(prompt) // 4)
        completion_tokens = _first_set(reply.completion_tokens, len(output) // 4)
        usage: dict[str, Any] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {
                "cached_tokens": _first_set(reply.cached_prompt_tokens, shared // 4)
            },
        }
        if reply.cost is not None:
            usage["cost"] = reply.cost
        return usage


async def _send_events(
    request: web.Request,
    events: Sequence[str],
    pace: StreamPace = StreamPace(),
    words: int = 0,
    sent_at: list[float] | None = None,
) -> web.StreamResponse:
    """Send ``events`` as server-sent events (``data: …`` and a blank line each); with a
    ``pace``, the ``words`` events after the first (the role) wait their turn, and when each
    went is appended to ``sent_at``."""
    response = web.StreamResponse(status=200, headers={"Cache-Control": "no-cache"})
    response.content_type = "text/event-stream"
    await response.prepare(request)
    for index, event in enumerate(events):
        if 1 <= index <= words and (pause := pace.pause_before(index - 1)):
            await asyncio.sleep(pause)
        await response.write(f"data: {event}\n\n".encode())
        if sent_at is not None and 1 <= index <= words:
            sent_at.append(time.monotonic())
    await response.write_eof()
    return response


def _error_response(
    status: int, message: str, headers: dict[str, str] | None = None
) -> web.Response:
    error = {"error": {"message": message, "type": "fake_fault", "code": status}}
    return web.json_response(error, status=status, headers=headers)


def _last_user_text(messages: list[Any]) -> str:
    """The text of the last ``user`` message (text parts joined) that is not a ``[System: …]``
    note or directive, so the answer quotes what the person said; ``""`` when there is none."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            text = str(content or "")
            if not text.startswith("[System:"):
                return text
    return ""


_TEMPLATE_MARKS = re.compile(r"<\|[^|>]*\|>|\[/?INST\]|</?s>|^###[^\n]*:", re.MULTILINE)


def _last_prompt_line(prompt: str) -> str:
    """The prompt's last dialogue line before the persona's closing label (instruct template
    marks removed); ``""`` when there is none."""
    lines = [line.strip() for line in _TEMPLATE_MARKS.sub("\n", prompt).splitlines()]
    lines = [line for line in lines if line]
    return lines[-2] if len(lines) >= 2 else ""


def _cut_at_stop(text: str, stop: object) -> str:
    """``text`` up to the first of the ``stop`` strings (a string or a list), as a server stops
    generating there."""
    stops = [stop] if isinstance(stop, str) else stop if isinstance(stop, list) else []
    cut = len(text)
    for item in stops:
        if isinstance(item, str) and item and (found := text.find(item)) != -1:
            cut = min(cut, found)
    return text[:cut]


def _shared_prefix_length(first: str, second: str) -> int:
    """How many leading characters ``first`` and ``second`` have in common."""
    pairs = zip(first, second, strict=False)
    return next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(first), len(second)))


def _first_set(value: int | None, estimate: int) -> int:
    return estimate if value is None else value


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m chat.llm.fake_server [--host H] [--port N] [--model NAME ...]``."""
    parser = argparse.ArgumentParser(description="A fake OpenAI-compatible model server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8400)
    parser.add_argument("--model", action="append", dest="models", help="listed by /v1/models")
    args = parser.parse_args(argv)
    server = FakeLLMServer(models=args.models or ("fake-model",))
    print(f"LLM_BASE_URL=http://{args.host}:{args.port}/v1", flush=True)
    web.run_app(server.app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
