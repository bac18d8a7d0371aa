"""A deterministic moderation service in OpenAI's ``POST /moderations`` shape, for ``make run``
and the tests: the demo model serves it (`chat.llm.fake_server`, ``/v1/moderations``) and so does
the sandbox (`chat.sandbox.server`, ``/moderation/v1/moderations``).

The rule: a text falls into a category when it holds the marker ``flag:<category>`` (any case),
e.g. ``flag:violence`` or ``flag:sexual/minors``; that category is then marked with a score of
`FLAGGED_SCORE`, every other one scores `CLEAN_SCORE`, and ``flagged`` is true when any is
marked. Ordinary text is never flagged. (The demo model quotes what it was asked, so
``sandboxsay "tomori, say flag:violence"`` shows a withheld reply.)
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from typing import Any

from aiohttp import web

from chat.pipeline.moderation import CATEGORIES

MARKER = re.compile(r"flag:([a-z/-]+)", re.IGNORECASE)
FLAGGED_SCORE = 0.93
CLEAN_SCORE = 0.0004


def moderation_result(text: str) -> dict[str, Any]:
    """The answer's ``results`` entry for ``text`` under the module's rule."""
    marked = {m.lower() for m in MARKER.findall(text)} & set(CATEGORIES)
    return {
        "flagged": bool(marked),
        "categories": {c: c in marked for c in CATEGORIES},
        "category_scores": {c: FLAGGED_SCORE if c in marked else CLEAN_SCORE for c in CATEGORIES},
        "category_applied_input_types": {c: ["text"] for c in CATEGORIES},
    }


class FakeModeration:
    """Answers moderation requests by the module's rule, each after ``latency_s`` seconds.

    While ``failure_status`` is set, every request is answered with that HTTP status instead
    (with ``Retry-After: retry_after`` when given). Every text asked is kept in ``inputs``, in
    order of arrival."""

    def __init__(self, *, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        self.failure_status: int | None = None
        self.retry_after: str | None = None
        self.inputs: list[str] = []
        self._ids = itertools.count(1)

    async def handle(self, request: web.Request) -> web.Response:
        """``POST …/moderations``: ``{"model", "input"}`` (a string or a list of strings)."""
        try:
            body = json.loads(await request.text())
        except json.JSONDecodeError:
            body = None
        texts = body.get("input") if isinstance(body, dict) else None
        if isinstance(texts, str):
            texts = [texts]
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return _error(400, "input must be a string or a list of strings")
        self.inputs.extend(texts)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if self.failure_status is not None:
            headers = {"Retry-After": self.retry_after} if self.retry_after else {}
            return _error(self.failure_status, "fake moderation failure", headers)
        return web.json_response(
            {
                "id": f"modr-fake-{next(self._ids)}",
                "model": body.get("model") or "omni-moderation-latest",
                "results": [moderation_result(text) for text in texts],
            }
        )


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    error = {"error": {"message": message, "type": "fake_moderation", "code": status}}
    return web.json_response(error, status=status, headers=headers)
