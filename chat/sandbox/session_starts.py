"""Discord's session start limit, kept per bot token: how many IDENTIFYs a bot may still send
before the limit resets (`GET /gateway/bot`'s ``session_start_limit``).

Each IDENTIFY the gateway accepts uses one start; a RESUME uses none. The window opens at the
first start after a reset and lasts ``reset_seconds`` (Discord: a day); when it has passed,
``remaining`` is ``total`` again. Discord answers an IDENTIFY past the limit by resetting the
bot's token; the gateway refuses it instead (`chat.sandbox.gateway`), and tests set
``remaining`` directly to reach the limit without a thousand IDENTIFYs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class _Budget:
    remaining: int
    resets_at: float | None = None
    """The clock reading at which ``remaining`` goes back to ``total`` (None: no window open)."""


class SessionStarts:
    """The session starts of every bot token, on ``clock`` (seconds)."""

    def __init__(
        self,
        *,
        total: int,
        max_concurrency: int,
        clock: Callable[[], float],
        reset_seconds: float = 86_400.0,
    ) -> None:
        self.total = total
        self.max_concurrency = max_concurrency
        self.reset_seconds = reset_seconds
        self._clock = clock
        self._budgets: dict[str, _Budget] = {}

    def limit(self, token: str) -> dict[str, int]:
        """``session_start_limit`` as `GET /gateway/bot` reports it for ``token``:
        ``total``, ``remaining``, ``reset_after`` (ms until the reset; the full window while
        none is open) and ``max_concurrency``."""
        budget = self._budget(token)
        if budget.resets_at is None:
            reset_after = self.reset_seconds
        else:
            reset_after = max(budget.resets_at - self._clock(), 0.0)
        return {
            "total": self.total,
            "remaining": budget.remaining,
            "reset_after": int(reset_after * 1000),
            "max_concurrency": self.max_concurrency,
        }

    def use(self, token: str) -> bool:
        """Take one start for an IDENTIFY; False (nothing taken) when none is left."""
        budget = self._budget(token)
        if budget.remaining <= 0:
            return False
        budget.remaining -= 1
        if budget.resets_at is None:
            budget.resets_at = self._clock() + self.reset_seconds
        return True

    def set(self, token: str, *, remaining: int, reset_after: float | None = None) -> None:
        """Make ``remaining`` starts left for ``token`` (0..total), resetting in
        ``reset_after`` seconds (None: keep the open window, or open a full one)."""
        if not 0 <= remaining <= self.total:
            raise ValueError(f"remaining must be between 0 and {self.total}, not {remaining}")
        budget = self._budget(token)
        budget.remaining = remaining
        if reset_after is not None:
            budget.resets_at = self._clock() + reset_after
        elif budget.resets_at is None:
            budget.resets_at = self._clock() + self.reset_seconds

    def _budget(self, token: str) -> _Budget:
        budget = self._budgets.setdefault(token, _Budget(remaining=self.total))
        if budget.resets_at is not None and self._clock() >= budget.resets_at:
            budget.remaining, budget.resets_at = self.total, None
        return budget
