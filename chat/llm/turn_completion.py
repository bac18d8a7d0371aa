"""What a turn's model calls come back as (`chat.llm.attempts`): one ``AttemptRecord`` per HTTP
call and the turn's ``TurnCompletion``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chat.llm.base import LLMError, Usage
from chat.llm.metering import CallCharge, Refusal


@dataclass(frozen=True)
class AttemptRecord:
    """One model call, as moderators see it on the turn.

    ``tool_round`` counts the tool rounds before this call (0 for the first); ``outcome`` is
    ``"ok"`` or the ``ErrorKind``; ``retry_after`` is the provider's header value and ``wait_s``
    the pause actually taken before the next attempt; ``charge`` what the call was counted as
    (its kind and cost; None: nothing was counted, it failed before any answer).
    """

    model: str
    tool_round: int
    shorten_batches: int
    latency_ms: float
    outcome: str
    error: str = ""
    status: int | None = None
    retry_after: float | None = None
    wait_s: float = 0.0
    usage: Usage = field(default_factory=Usage)
    charge: CallCharge | None = None

    def as_json(self) -> dict[str, Any]:
        charged = self.charge.as_json() if self.charge is not None else {}
        return {
            **charged,
            "model": self.model,
            "tool_round": self.tool_round,
            "shorten_batches": self.shorten_batches,
            "latency_ms": round(self.latency_ms, 1),
            "outcome": self.outcome,
            "error": self.error,
            "status": self.status,
            "retry_after": self.retry_after,
            "wait_s": round(self.wait_s, 3),
            "usage": self.usage.as_json(),
        }


@dataclass(frozen=True)
class TurnCompletion:
    """The result of ``complete_turn``.

    ``reply_text`` is what the persona says (empty when ``error`` is set); ``usage`` sums every
    model call of the turn, tools' own calls included; ``request`` is the exact body of the final
    attempt; ``llm_ms`` is the wall time of the whole exchange, pauses and tools included;
    ``tool_calls`` are the calls the tools made themselves (the vision model's);
    ``refusal`` is set when a limit refused the turn's first call (then no model was asked);
    ``meter_ms`` is the part of ``llm_ms`` spent reserving and settling the calls against the
    budgets (waits for calls in flight included).
    """

    reply_text: str
    attempts: tuple[AttemptRecord, ...]
    usage: Usage
    request: dict[str, Any]
    llm_ms: float
    warnings: tuple[str, ...] = ()
    error: LLMError | None = None
    tool_calls: tuple[AttemptRecord, ...] = ()
    refusal: Refusal | None = None
    meter_ms: float = 0.0
