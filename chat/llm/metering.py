"""The one point every model call passes before it is sent and after it answered: a
`CallMeter`. Before, it reserves the call's upper bound against the budgets that pay for it
(or refuses: `SpendRefused`); after, it settles with the tokens the provider reported (else the
tokenizer's count, marked estimated) and says what the call cost (`CallCharge`).

The attempt runner (`chat.llm.attempts`) and the vision tools (`chat.llm.tools`) call it; the
implementation that counts in the database and checks the limits is
`chat.services.spend.SpendMeter`. `UNMETERED` counts nothing and refuses nothing. Nothing here
needs Django.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Protocol

from chat.llm.base import Completion, ModelRequest
from chat.pipeline.spend import CallKind, CostSource, TokenUsage


@dataclass(frozen=True)
class Refusal:
    """Why a limit said no before a model was called: ``reason`` as the turn record and the
    why page give it, which limit (``limit``: ``budget`` or ``user_turns``) and when the budget
    that said no renews (None: unknown, or not a budget)."""

    reason: str
    renews_at: dt.datetime | None = None
    limit: str = "budget"


class SpendRefused(Exception):
    """A limit said no before a model was called (`Refusal`)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.reason)
        self.refusal = refusal


@dataclass(frozen=True)
class CallCharge:
    """What one call was counted as: its kind, its tokens (``tokens.estimated`` when the
    provider reported none) and its cost (``usd`` None: unknown, no price and no reported
    cost)."""

    kind: CallKind
    tokens: TokenUsage
    usd: Decimal | None
    source: CostSource | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "usd": str(self.usd) if self.usd is not None else None,
            "cost_source": str(self.source) if self.source is not None else None,
            "estimated": self.tokens.estimated,
        }


class CallMeter(Protocol):
    """Counts the model calls of one turn (or one planner step, one memory task).

    ``reserve`` is awaited just before a call is sent: ``admitted`` says the turn's first call
    was let in already (a retry, a fallback, a tool round or a tool's own call), and such a
    call is never refused. Returns a ticket for ``settle``; raises `SpendRefused`.

    ``settle`` is awaited once the call ended, however it ended: ``completion`` is what the
    provider answered (None: nothing whole came back), ``received`` the text it had written so
    far. Returns the call's charge, or None when nothing was counted (it failed before any
    answer: the reservation is released).
    """

    async def reserve(self, request: ModelRequest, *, kind: CallKind, admitted: bool) -> object: ...

    async def settle(
        self, ticket: object, *, completion: Completion | None, received: str
    ) -> CallCharge | None: ...


class _Unmetered:
    """A meter that counts nothing and refuses nothing."""

    async def reserve(self, request: ModelRequest, *, kind: CallKind, admitted: bool) -> object:
        return None

    async def settle(
        self, ticket: object, *, completion: Completion | None, received: str
    ) -> CallCharge | None:
        return None


UNMETERED: CallMeter = _Unmetered()
