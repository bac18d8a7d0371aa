"""The moderation service a reply piece is checked against before it reaches Discord.

One protocol (`ModerationClient`) and its implementation for OpenAI's ``POST {base}/moderations``
shape (`OpenAIModerationClient`): OpenAI itself, or any service speaking it (a local Llama Guard
behind an OpenAI-compatible shim; the sandbox and the demo model serve a deterministic one,
`chat.llm.fake_moderation`). Which of the answer's categories may pass is the product's policy
(`chat.pipeline.moderation`), not the client's.

The client retries what may pass (timeouts, dropped connections, 5xx, 429 with its
``Retry-After``) within its `RetryPolicy`, then raises `ModerationUnavailable`; what the product
does then is the client's ``on_error`` (``MODERATION_ON_ERROR``: withhold, or let the piece
through). Nothing here needs Django.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

import httpx
from pydantic import BaseModel, Field, ValidationError

from chat.llm.attempts import RetryPolicy
from chat.llm.base import ErrorKind, LLMError
from chat.llm.openai_compat import as_llm_errors, status_error
from chat.llm.tls import tls_context

DEFAULT_MODERATION_MODEL = "omni-moderation-latest"
MODERATION_RETRY = RetryPolicy(
    attempts_per_model=3, backoff_base=0.25, backoff_cap=1.0, retry_after_cap=2.0
)
"""Three attempts, a quarter second then half a second apart (a ``Retry-After`` is honoured up
to two seconds): a piece waits for its check, so the service gets seconds, not minutes."""
MODERATION_TIMEOUT_S = 5.0


class ModerationOnError(StrEnum):
    """What a piece becomes when the service cannot answer (``MODERATION_ON_ERROR``)."""

    WITHHOLD = "withhold"
    ALLOW = "allow"


@dataclass(frozen=True)
class ModerationAnswer:
    """The service's answer for one text: the categories it marked (``categories``), every
    category's score (``scores``, 0..1), and its overall ``flagged``."""

    categories: frozenset[str]
    scores: Mapping[str, float]
    flagged: bool


class ModerationUnavailable(Exception):
    """The service gave no answer after its retries (the message says what failed last)."""


class ModerationClient(Protocol):
    """A moderation service: ``classify`` one text; ``model`` is recorded with each check and
    ``on_error`` says what a piece becomes when the service fails."""

    model: str
    on_error: ModerationOnError

    async def classify(self, text: str) -> ModerationAnswer:
        """The service's answer for ``text``; raises `ModerationUnavailable`."""
        ...


class _Result(BaseModel):
    flagged: bool = False
    categories: dict[str, bool | None] = {}
    category_scores: dict[str, float | None] = {}


class _Answer(BaseModel):
    results: list[_Result] = Field(min_length=1)


Sleeper = Callable[[float], Awaitable[None]]


class OpenAIModerationClient:
    """`ModerationClient` for ``POST {base_url}/moderations`` (OpenAI's request and answer
    shape: ``{"model", "input"}`` in, ``results[0]`` with ``flagged``, ``categories`` and
    ``category_scores`` out), with ``api_key`` as a bearer token when given.

    Keeps one pooled HTTP connection, opened at the first check in the running event loop; close
    it with `aclose` (a client that never checked holds nothing)."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str = "",
        model: str = DEFAULT_MODERATION_MODEL,
        on_error: ModerationOnError = ModerationOnError.WITHHOLD,
        policy: RetryPolicy = MODERATION_RETRY,
        timeout_s: float = MODERATION_TIMEOUT_S,
        sleep: Sleeper = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.on_error = on_error
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._policy = policy
        self._timeout_s = timeout_s
        self._sleep = sleep
        self._jitter = jitter
        self._http: httpx.AsyncClient | None = None

    async def classify(self, text: str) -> ModerationAnswer:
        """The service's answer for ``text``, retried within the policy; raises
        `ModerationUnavailable` when no attempt answered (a 4xx other than 429 is not retried:
        the key or the model name is wrong and will stay wrong)."""
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._ask(text)
            except LLMError as error:
                if error.permanent or attempt >= self._policy.attempts_per_model:
                    raise ModerationUnavailable(
                        f"the moderation service failed after {attempt} attempt"
                        f"{'s' if attempt > 1 else ''}: {error}"
                    ) from error
                jitter = self._jitter()
                await self._sleep(
                    self._policy.pause_before_retry(error, retry_number=attempt, jitter=jitter)
                )

    async def _ask(self, text: str) -> ModerationAnswer:
        """One request; every failure is an ``LLMError`` (transient or permanent)."""
        if self._http is None:
            self._http = httpx.AsyncClient(
                headers=self._headers, timeout=self._timeout_s, verify=tls_context()
            )
        with as_llm_errors():
            response = await self._http.post(
                f"{self.base_url}/moderations", json={"model": self.model, "input": text}
            )
        if not response.is_success:
            raise status_error(response.status_code, response.text, response.headers)
        try:
            result = _Answer.model_validate_json(response.content).results[0]
        except ValidationError as error:
            raise LLMError(
                f"unreadable answer: {response.text[:120]!r}",
                kind=ErrorKind.MALFORMED,
                permanent=False,
            ) from error
        return ModerationAnswer(
            categories=frozenset(c for c, marked in result.categories.items() if marked),
            scores={c: float(s) for c, s in result.category_scores.items() if s is not None},
            flagged=result.flagged,
        )

    async def aclose(self) -> None:
        """Close the pooled connection (it opens again at the next check)."""
        if self._http is not None:
            await self._http.aclose()
            self._http = None
