"""A persona reply given as the model writes it (`chat.llm.attempts.AttemptRunner.stream_turn`,
steps 6 and 7 of that module's docstring)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from chat.llm.base import LLMError
from chat.llm.metering import Refusal, SpendRefused

if TYPE_CHECKING:
    from chat.llm.tools import ToolBox
    from chat.llm.turn_completion import TurnCompletion


@dataclass(frozen=True)
class Restart:
    """The text given so far is void: its attempt failed before any of it was delivered, and
    the next attempt starts the reply over."""

    error: str


class Conversation(Protocol):
    """One turn's exchange with the model (`chat.llm.attempts`' attempt loop): what a stream
    reads its pieces from and records its turn with."""

    def converse(
        self, toolbox: ToolBox | None, delivered: Callable[[], bool]
    ) -> AsyncGenerator[str | Restart, None]:
        """The reply's text pieces and ``Restart``s, in order; raises `LLMError` when every
        model failed."""
        ...

    def warn(self, warning: str) -> None:
        """Keep ``warning`` among the turn's warnings."""
        ...

    def result(self, *, reply_text: str, error: LLMError | None = None) -> TurnCompletion:
        """The turn's record: every attempt, the usage, ``reply_text`` and ``error``."""
        ...


class ReplyStream:
    """One persona reply as the model writes it (`AttemptRunner.stream_turn`).

    Iterate it for the reply's text pieces (``str``, in order; joined and stripped they are
    the reply) and ``Restart``s; then ``result()`` is the turn's record, as ``complete_turn``
    returns it (``reply_text`` is the text given, ``error`` set when the model failed,
    ``refusal`` when a limit refused the first call). Stop early with ``stop``: the model call
    is cancelled.
    """

    def __init__(
        self, exchange: Conversation, toolbox: ToolBox | None, delivered: Callable[[], bool]
    ) -> None:
        self._exchange = exchange
        self._error: LLMError | None = None
        self._refusal: Refusal | None = None
        self._given: list[str] = []
        self._iterator = self._iterate(exchange.converse(toolbox, delivered))

    def __aiter__(self) -> AsyncIterator[str | Restart]:
        return self._iterator

    async def _iterate(
        self, events: AsyncGenerator[str | Restart, None]
    ) -> AsyncGenerator[str | Restart, None]:
        async with contextlib.aclosing(events):
            try:
                async for event in events:
                    if isinstance(event, Restart):
                        self._given.clear()
                    else:
                        self._given.append(event)
                    yield event
            except LLMError as error:
                self._error = error
            except SpendRefused as refused:
                self._refusal = refused.refusal

    async def stop(self, reason: str) -> None:
        """Cancel the model call; the reply ends with the text given so far (``reason`` is
        kept among the turn's warnings)."""
        await self._iterator.aclose()
        self._exchange.warn(reason)

    def result(self) -> TurnCompletion:
        """The turn's record so far (whole once the iteration has ended)."""
        text = "".join(self._given).strip()
        return self._exchange.result(reply_text=text, error=self._error, refusal=self._refusal)
