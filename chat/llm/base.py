"""The one protocol every caller of a model goes through, and the data it speaks.

``LLMClient.complete`` sends one request — Chat Completions (``ChatRequest``) or, for a
text-completion model, Completions (``TextCompletionRequest``) — and returns one ``Completion``
or raises ``LLMError``; nothing else escapes it. ``LLMClient.stream`` sends the same request
and yields the text as the model writes it. Retries, fallbacks and tool rounds are built on
top of it (``chat.llm.attempts``), so every caller reaches a model the same way. Nothing here
needs Django.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from typing import Any, Protocol, TypeVar

from chat.pipeline.instruct import BUILTIN_TEMPLATES, DEFAULT_TEMPLATE, InstructTemplate

Message = dict[str, Any]
"""One OpenAI Chat Completions message (``{"role": ..., "content": ...}`` and friends)."""


class ModelApi(StrEnum):
    """Which endpoint a model is asked through: ``chat`` (``POST /chat/completions``, messages)
    or ``completions`` (``POST /completions``, one prompt in an instruct template)."""

    CHAT = "chat"
    COMPLETIONS = "completions"


@dataclass(frozen=True)
class ModelSpec:
    """One model to try, with the persona's sampling settings.

    ``supports_vision`` and ``supports_prefill`` tell the per-attempt render whether media may go
    in as image parts and whether a prefill may end the request as an ``assistant`` message;
    ``merge_same_role`` whether adjacent messages of one role are merged (providers that need
    alternating roles). All default to the safe choice (a notice, an instruction, roles as they
    come); `chat.llm.capabilities` decides them from the model's name and the persona's settings.
    """

    name: str
    supports_vision: bool = False
    supports_prefill: bool = False
    merge_same_role: bool = False
    temperature: float = 0.7
    max_output_tokens: int = 512
    stop: tuple[str, ...] = ()
    api: ModelApi = ModelApi.CHAT
    instruct: InstructTemplate | None = None
    """For a ``completions`` model: the template its prompt is written in (None: ChatML)."""
    context_window: int | None = None
    """A fallback model's own context window (tokens); None: the persona's. A smaller one gets
    its own budget: the attempt's history is truncated to it (DESIGN §5, "Budget")."""
    asks_cost: bool = False
    """Ask the provider to report each call's cost (``"usage": {"include": true}``, which
    OpenRouter understands; other providers refuse unknown keys, so only there)."""

    def template(self) -> InstructTemplate:
        """The instruct template this model's prompt is written in."""
        return self.instruct or BUILTIN_TEMPLATES[DEFAULT_TEMPLATE]


@dataclass(frozen=True)
class TextCompletionRequest:
    """One Completions call (a text-completion model): the prompt and its stop strings.

    ``body()`` is the exact JSON sent to ``POST {base_url}/completions``; stop strings are the
    model's own followed by the prompt's (the next speakers' labels)."""

    model: ModelSpec
    prompt: str
    stop: tuple[str, ...] = ()
    stream: bool = False

    def body(self) -> dict[str, Any]:
        stop = list(dict.fromkeys((*self.model.stop, *self.stop)))
        body: dict[str, Any] = {
            "model": self.model.name,
            "prompt": self.prompt,
            "temperature": self.model.temperature,
            "max_tokens": self.model.max_output_tokens,
            "stream": self.stream,
        }
        if stop:
            body["stop"] = stop
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        if self.model.asks_cost:
            body["usage"] = {"include": True}
        return body


@dataclass(frozen=True)
class ChatRequest:
    """One Chat Completions call: a model, the messages, the tools offered, and the transport.

    ``tools`` are OpenAI function definitions (``chat.llm.tools`` owns them); empty means the
    request carries no ``tools`` key at all.
    """

    model: ModelSpec
    messages: Sequence[Message]
    tools: Sequence[dict[str, Any]] = ()
    stream: bool = False

    def body(self) -> dict[str, Any]:
        """The exact JSON body sent to ``POST {base_url}/chat/completions``.

        ``max_tokens`` (not ``max_completion_tokens``) because every OpenAI-compatible server
        this product targets (Ollama, llama.cpp, vLLM, OpenRouter, OpenAI) accepts it. A
        streaming request asks for a final usage chunk (``stream_options.include_usage``); a
        model that ``asks_cost`` asks for the call's cost too (``usage.include``).
        """
        body: dict[str, Any] = {
            "model": self.model.name,
            "messages": list(self.messages),
            "temperature": self.model.temperature,
            "max_tokens": self.model.max_output_tokens,
            "stream": self.stream,
        }
        if self.model.stop:
            body["stop"] = list(self.model.stop)
        if self.tools:
            body["tools"] = list(self.tools)
            body["tool_choice"] = "auto"
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        if self.model.asks_cost:
            body["usage"] = {"include": True}
        return body


@dataclass(frozen=True)
class Usage:
    """Token counts as the provider reported them; ``None`` means "not reported", not zero.
    ``cost`` is the call's cost in US dollars when the provider reports one (OpenRouter's
    ``usage.cost``)."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_prompt_tokens: int | None = None
    cost: Decimal | None = None

    def __add__(self, other: Usage) -> Usage:
        """Field-wise sum in which a missing count adds nothing (``None + None`` stays ``None``)."""
        return Usage(
            prompt_tokens=_add_counts(self.prompt_tokens, other.prompt_tokens),
            completion_tokens=_add_counts(self.completion_tokens, other.completion_tokens),
            cached_prompt_tokens=_add_counts(self.cached_prompt_tokens, other.cached_prompt_tokens),
            cost=_add_counts(self.cost, other.cost),
        )

    def as_json(self) -> dict[str, int | str | None]:
        counts: dict[str, int | str | None] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
        }
        if self.cost is not None:
            counts["cost"] = str(self.cost)
        return counts


_Count = TypeVar("_Count", int, Decimal)


def _add_counts(left: _Count | None, right: _Count | None) -> _Count | None:
    if left is None:
        return right
    if right is None:
        return left
    return left + right


@dataclass(frozen=True)
class ToolCall:
    """A function call the model asked for; ``arguments`` is the raw JSON text, unvalidated."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Completion:
    """What one successful call returned, before any clean-up of the text.

    ``text`` is the assistant content exactly as sent (it may hold ``<think>`` blocks or a name
    label); ``tool_calls`` is empty when the model answered in text.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)


@dataclass(frozen=True)
class ToolCallStarted:
    """In a stream: the model has begun calling a tool (its text so far, if any, belongs to a
    tool round, not to the reply)."""


class ErrorKind(StrEnum):
    """Why a call failed; recorded on the turn for moderators."""

    RATE_LIMITED = "rate_limited"  # HTTP 429
    SERVER_ERROR = "server_error"  # HTTP 5xx, 408, 409
    CLIENT_ERROR = "client_error"  # any other HTTP 4xx: the request itself is wrong
    TIMEOUT = "timeout"
    CONNECTION = "connection"  # refused, reset, or closed mid-response
    MALFORMED = "malformed_response"  # not JSON, not the expected shape, or a stream cut short
    EMPTY_ANSWER = "empty_answer"  # no text once reasoning is removed (judged by the caller)


class LLMError(Exception):
    """The only error a model call raises.

    ``permanent`` means retrying the same model cannot help (bad request, bad key, unknown model);
    the attempt runner then moves to the next fallback model. ``status`` is the HTTP status when
    there was one; ``retry_after`` is the provider's ``Retry-After`` in seconds, uncapped.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: ErrorKind,
        permanent: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.permanent = permanent
        self.status = status
        self.retry_after = retry_after

    def __str__(self) -> str:
        status = f" (HTTP {self.status})" if self.status is not None else ""
        return f"{self.kind}{status}: {self.message}"


ModelRequest = ChatRequest | TextCompletionRequest


class LLMClient(Protocol):
    """Sends one request (Chat Completions or Completions).

    Implementations raise ``LLMError`` for every failure (HTTP status, timeout, connection,
    unreadable body) and never retry: retry policy belongs to ``chat.llm.attempts``.
    """

    async def complete(self, request: ModelRequest) -> Completion: ...

    def stream(self, request: ModelRequest) -> AsyncIterator[str | ToolCallStarted | Completion]:
        """Send ``request`` once; yield its text as it arrives (and ``ToolCallStarted`` once,
        when the model begins calling a tool), then the whole ``Completion``. Raises
        ``LLMError`` as ``complete`` does; closing the iterator cancels the call."""
        ...
