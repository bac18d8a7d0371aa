"""``LLMClient`` for any OpenAI-compatible endpoint, over httpx: Chat Completions
(``POST /chat/completions``) and, for text-completion models, Completions
(``POST /completions``: KoboldCpp, llama.cpp's server, vLLM, text-generation-webui).

Ollama, llama.cpp, vLLM, OpenRouter and OpenAI all speak this API. One call is one HTTP request:
no retries here (``chat.llm.attempts`` owns them). Every failure becomes ``LLMError``:

- HTTP 429 → ``rate_limited`` (transient, with ``Retry-After`` in seconds when given);
- HTTP 5xx, 408, 409 → ``server_error`` (transient); any other non-2xx → ``client_error``
  (permanent: the key, the model name or the request is wrong and will stay wrong);
- connect/read/total timeouts → ``timeout``; refused or dropped connections → ``connection``;
- a body that is not the expected JSON, or a stream that ends without ``data: [DONE]`` →
  ``malformed_response`` (transient: usually a proxy or server hiccup).

Provider JSON is validated with pydantic models that ignore unknown fields, so additions to the
API never break parsing while a missing ``choices`` list does.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import math
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from pydantic import BaseModel, Field, ValidationError

from chat.llm.base import (
    Completion,
    ErrorKind,
    LLMError,
    ModelRequest,
    TextCompletionRequest,
    ToolCall,
    ToolCallStarted,
    Usage,
)
from chat.llm.tls import tls_context

ERROR_TEXT_LIMIT = 500
"""Longest provider error message kept on an ``LLMError`` (it ends up on the turn record)."""


@dataclass(frozen=True)
class Timeouts:
    """Bounds on one call, in seconds.

    ``read`` is the longest silence between two received bytes (for a stream: between chunks);
    ``total`` bounds the whole call, so a stream that trickles forever still ends.
    """

    connect: float = 5.0
    read: float = 60.0
    total: float = 180.0


class OpenAICompatibleClient:
    """Sends ``ChatRequest``s to ``{base_url}/chat/completions`` and ``TextCompletionRequest``s
    to ``{base_url}/completions``; see the module docstring.

    Holds one pooled ``httpx.AsyncClient`` bound to the running event loop: use it as an async
    context manager (or call ``aclose``) and do not share it across event loops.
    """

    def __init__(self, *, base_url: str, api_key: str = "", timeouts: Timeouts = Timeouts()):
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeouts = timeouts
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(timeouts.read, connect=timeouts.connect),
            verify=tls_context(),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def list_models(self) -> frozenset[str]:
        """The ids ``GET {base_url}/models`` lists (OpenAI's ``{"data": [{"id": …}]}``).
        Raises ``LLMError`` when the endpoint fails or answers something else."""
        with as_llm_errors():
            async with asyncio.timeout(self._timeouts.total):
                response = await self._http.get("models")
        if response.status_code >= 400:
            raise status_error(response.status_code, response.text, response.headers)
        return _validate(_ModelList, response.content).ids

    async def complete(self, request: ModelRequest) -> Completion:
        """Send ``request`` once and return the assembled completion (``stream``'s last item).

        Raises ``LLMError`` for every failure (see the module docstring), nothing else.
        """
        return await _completion_of(self.stream(request))

    async def stream(
        self, request: ModelRequest
    ) -> AsyncGenerator[str | ToolCallStarted | Completion, None]:
        """Send ``request`` once and yield its text as it arrives (and ``ToolCallStarted``
        once, at the first tool-call delta), then the assembled ``Completion`` last (a request
        that does not ask for a stream gives its whole text and calls at once). Raises
        ``LLMError`` for every failure (see the module docstring); the total time limit counts
        from the request, and never while the caller holds a yielded piece.
        Closing the iterator early cancels the call: the connection is closed, so the
        provider stops generating.
        """
        deadline = asyncio.get_running_loop().time() + self._timeouts.total
        text_request = isinstance(request, TextCompletionRequest)
        path = "completions" if text_request else "chat/completions"
        with as_llm_errors():
            async with contextlib.AsyncExitStack() as open_response:
                async with asyncio.timeout_at(deadline):
                    response = await open_response.enter_async_context(
                        self._http.stream("POST", path, json=request.body())
                    )
                    if not response.is_success:
                        await response.aread()
                        raise status_error(response.status_code, response.text, response.headers)
                    body = None if request.stream else await response.aread()
                if body is not None:
                    completion = (
                        parse_text_completion(body) if text_request else parse_completion(body)
                    )
                    if completion.tool_calls:
                        yield ToolCallStarted()  # known at once: the text is a tool round's
                    if completion.text:
                        yield completion.text
                    yield completion
                    return
                assembly = _TextStreamAssembly() if text_request else _StreamAssembly()
                pieces = assembled_stream(response.aiter_lines(), assembly)
                async with contextlib.aclosing(pieces):
                    while True:
                        async with asyncio.timeout_at(deadline):
                            piece = await anext(pieces, None)
                        if piece is None:
                            return
                        yield piece


@contextlib.contextmanager
def as_llm_errors() -> Iterator[None]:
    """Turn timeouts and transport failures into ``LLMError`` (transient)."""
    try:
        yield
    except (TimeoutError, httpx.TimeoutException) as error:
        raise LLMError(
            f"no complete answer within the time limit ({type(error).__name__})",
            kind=ErrorKind.TIMEOUT,
            permanent=False,
        ) from error
    except httpx.TransportError as error:
        raise LLMError(
            f"{type(error).__name__}: {error}"[:ERROR_TEXT_LIMIT],
            kind=ErrorKind.CONNECTION,
            permanent=False,
        ) from error


def status_error(status: int, body: str, headers: httpx.Headers) -> LLMError:
    """The ``LLMError`` for a non-2xx response (classification in the module docstring)."""
    message = _provider_error_message(body)
    if status == 429:
        retry_after = parse_retry_after(headers.get("Retry-After"), now=datetime.now(UTC))
        return LLMError(
            message,
            kind=ErrorKind.RATE_LIMITED,
            permanent=False,
            status=status,
            retry_after=retry_after,
        )
    if status >= 500 or status in (408, 409):
        return LLMError(message, kind=ErrorKind.SERVER_ERROR, permanent=False, status=status)
    return LLMError(message, kind=ErrorKind.CLIENT_ERROR, permanent=True, status=status)


def _provider_error_message(body: str) -> str:
    """``error.message`` from an OpenAI-style error body, else the body text, shortened."""
    try:
        error = _ErrorBody.model_validate_json(body).error
    except ValidationError:
        return body.strip()[:ERROR_TEXT_LIMIT] or "no error message"
    message = error if isinstance(error, str) else error.message
    return message[:ERROR_TEXT_LIMIT]


def parse_retry_after(value: str | None, *, now: datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP date.

    Returns ``None`` when the header is absent or unreadable; a date in the past gives ``0.0``.
    The value is not capped here (the retry policy caps it).
    """
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - now).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


def parse_completion(body: bytes) -> Completion:
    """Read a non-streaming Chat Completions response body. Raises ``LLMError`` (malformed)."""
    response = _validate(_Response, body)
    choice = response.choices[0]
    return Completion(
        text=choice.message.content or "",
        tool_calls=tuple(
            ToolCall(
                id=call.id or f"call_{number}",
                name=call.function.name,
                arguments=call.function.arguments,
            )
            for number, call in enumerate(choice.message.tool_calls or ())
        ),
        finish_reason=choice.finish_reason,
        usage=_usage(response.usage),
    )


async def read_completion_stream(lines: AsyncIterator[str]) -> Completion:
    """Assemble a streamed Chat Completions response (SSE lines) into one ``Completion``
    (`assembled_stream`'s last item).

    Text deltas are concatenated; tool-call deltas are joined by their ``index``; the usage chunk
    (sent when ``stream_options.include_usage`` was asked for) is kept. Raises ``LLMError``
    (malformed) for an unreadable chunk, and (server error) for an ``error`` chunk; a stream that
    ends without ``data: [DONE]`` was cut short and raises ``LLMError`` (malformed).
    """
    return await _completion_of(assembled_stream(lines, _StreamAssembly()))


async def _completion_of(
    pieces: AsyncGenerator[str | ToolCallStarted | Completion, None],
) -> Completion:
    """The ``Completion`` an answer's pieces end with (its text pieces are in it). Raises
    ``LLMError`` (malformed) when they end without one."""
    async with contextlib.aclosing(pieces):
        async for piece in pieces:
            if isinstance(piece, Completion):
                return piece
    raise LLMError(
        "the answer ended without a completion", kind=ErrorKind.MALFORMED, permanent=False
    )


async def assembled_stream(
    lines: AsyncIterator[str], assembly: _StreamAssembly | _TextStreamAssembly
) -> AsyncGenerator[str | ToolCallStarted | Completion, None]:
    """Read a streamed response (SSE lines) into ``assembly``: yield each chunk's text as it
    comes (``ToolCallStarted`` once, at the first tool-call delta), then the ``Completion`` at
    ``data: [DONE]``. Raises ``LLMError`` as `read_completion_stream` says."""
    async for data in iter_sse_data(lines):
        if data.strip() == "[DONE]":
            yield assembly.completion()
            return
        calling = assembly.calling
        text = assembly.add_data(data)
        if text:
            yield text
        if assembly.calling and not calling:
            yield ToolCallStarted()
    raise LLMError(
        "the stream ended before data: [DONE]", kind=ErrorKind.MALFORMED, permanent=False
    )


def parse_text_completion(body: bytes) -> Completion:
    """Read a non-streaming Completions response body (``choices[0].text``). Raises
    ``LLMError`` (malformed)."""
    response = _validate(_TextResponse, body)
    choice = response.choices[0]
    return Completion(
        text=choice.text or "", finish_reason=choice.finish_reason, usage=_usage(response.usage)
    )


async def iter_sse_data(lines: AsyncIterator[str]) -> AsyncIterator[str]:
    """Yield the ``data`` of each server-sent event, given the response's lines.

    Several ``data:`` lines of one event are joined with newlines; comments (``:``) and other
    fields (``event``, ``id``, ``retry``) are ignored. An event not followed by a blank line
    before the end of the body is still yielded.
    """
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
            continue
        name, _, value = line.partition(":")
        if name == "data":
            data.append(value.removeprefix(" "))
    if data:
        yield "\n".join(data)


@dataclass
class _ToolCallParts:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _StreamAssembly:
    text: list[str] = field(default_factory=list)
    calls: dict[int, _ToolCallParts] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    @property
    def calling(self) -> bool:
        """Whether the answer has begun calling a tool."""
        return bool(self.calls)

    def add_data(self, data: str) -> str:
        """Take one event's data in; returns the text it added (``""``: none)."""
        return self.add(_validate(_Chunk, data))

    def add(self, chunk: _Chunk) -> str:
        """Take one chunk in; returns the text it added (``""``: none)."""
        _refuse_error_chunk(chunk.error)
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        added = ""
        for choice in chunk.choices[:1]:
            added = choice.delta.content or ""
            self.text.append(added)
            self.finish_reason = choice.finish_reason or self.finish_reason
            for delta in choice.delta.tool_calls or ():
                self._add_tool_call_delta(delta)
        return added

    def _add_tool_call_delta(self, delta: _ToolCallDelta) -> None:
        parts = self.calls.setdefault(delta.index, _ToolCallParts())
        parts.id = delta.id or parts.id
        if delta.function is not None:
            parts.name += delta.function.name or ""
            parts.arguments.append(delta.function.arguments or "")

    def completion(self) -> Completion:
        return Completion(
            text="".join(self.text),
            tool_calls=tuple(
                ToolCall(
                    id=parts.id or f"call_{index}",
                    name=parts.name,
                    arguments="".join(parts.arguments),
                )
                for index, parts in sorted(self.calls.items())
            ),
            finish_reason=self.finish_reason,
            usage=self.usage,
        )


def _refuse_error_chunk(error: Any) -> None:
    """Raise ``LLMError`` (a transient server error) for a chunk reporting the provider's
    error mid-stream; ``None``: no error."""
    if error is not None:
        raise LLMError(
            f"the provider reported an error mid-stream: {error}"[:ERROR_TEXT_LIMIT],
            kind=ErrorKind.SERVER_ERROR,
            permanent=False,
        )


@dataclass
class _TextStreamAssembly:
    """A streamed Completions answer: each chunk's ``choices[0].text``, in order."""

    text: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)

    calling = False  # a Completions answer calls no tools

    def add_data(self, data: str) -> str:
        """Take one event's data in; returns the text it added (``""``: none)."""
        chunk = _validate(_TextChunk, data)
        _refuse_error_chunk(chunk.error)
        if chunk.usage is not None:
            self.usage = _usage(chunk.usage)
        added = ""
        for choice in chunk.choices[:1]:
            added = choice.text or ""
            self.text.append(added)
            self.finish_reason = choice.finish_reason or self.finish_reason
        return added

    def completion(self) -> Completion:
        return Completion(
            text="".join(self.text), finish_reason=self.finish_reason, usage=self.usage
        )


# --- Provider JSON ----------------------------------------------------------------------------

_Model = TypeVar("_Model", bound=BaseModel)


def _validate(model: type[_Model], data: str | bytes) -> _Model:
    try:
        return model.model_validate_json(data)
    except ValidationError as error:
        snippet = data[:120].decode(errors="replace") if isinstance(data, bytes) else data[:120]
        raise LLMError(
            f"unreadable response ({error.error_count()} problems): {snippet!r}",
            kind=ErrorKind.MALFORMED,
            permanent=False,
        ) from error


def _usage(usage: _Usage | None) -> Usage:
    if usage is None:
        return Usage()
    details = usage.prompt_tokens_details
    cost = usage.cost
    return Usage(
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_prompt_tokens=details.cached_tokens if details is not None else None,
        cost=Decimal(str(cost)) if cost is not None and math.isfinite(cost) and cost >= 0 else None,
    )


class _PromptTokensDetails(BaseModel):
    cached_tokens: int | None = None


class _Usage(BaseModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: _PromptTokensDetails | None = None
    cost: float | None = None
    """The call's cost in US dollars (OpenRouter's credits), when the provider reports it."""


class _Function(BaseModel):
    name: str
    arguments: str = ""


class _ToolCall(BaseModel):
    id: str | None = None
    function: _Function


class _Message(BaseModel):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(BaseModel):
    message: _Message
    finish_reason: str | None = None


class _Response(BaseModel):
    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


class _FunctionDelta(BaseModel):
    name: str | None = None
    arguments: str | None = None


class _ToolCallDelta(BaseModel):
    index: int = 0
    id: str | None = None
    function: _FunctionDelta | None = None


class _Delta(BaseModel):
    content: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _ChunkChoice(BaseModel):
    delta: _Delta = Field(default_factory=_Delta)
    finish_reason: str | None = None


class _Chunk(BaseModel):
    choices: list[_ChunkChoice] = Field(default_factory=list)
    usage: _Usage | None = None
    error: Any = None


class _TextChoice(BaseModel):
    text: str | None = None
    finish_reason: str | None = None


class _TextResponse(BaseModel):
    choices: list[_TextChoice] = Field(min_length=1)
    usage: _Usage | None = None


class _TextChunk(BaseModel):
    choices: list[_TextChoice] = Field(default_factory=list)
    usage: _Usage | None = None
    error: Any = None


class _ListedModel(BaseModel):
    id: str


class _ModelList(BaseModel):
    data: list[_ListedModel]

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(model.id for model in self.data)


class _ErrorDetail(BaseModel):
    message: str


class _ErrorBody(BaseModel):
    error: _ErrorDetail | str
