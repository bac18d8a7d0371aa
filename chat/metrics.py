"""The product's Prometheus series (DESIGN §3b, "Metrics and health"), defined once.

Each series is counted at the one place its event happens (the turn lifecycle for turns, the
attempt runner for model calls, the intake for ingest, discord.py's HTTP session for REST
requests) and exported by each process's own endpoint: ``runbot``'s
(`chat.gateway.health`), the web process's ``/metrics`` (`dashboard.metrics`) and the Celery
worker's (`botproject.celery_metrics`). What a process does not do stays at zero there.

Names follow Prometheus's naming guide (``personabot_<what>_<unit>``, counters end in
``_total``, durations in seconds). No label takes an unbounded value: there is no guild,
channel, user or message label, so the number of series is the same at one guild and at
100,000 (``chat/tests/test_metrics.py`` fails on any such label). Every label's values are a
closed set; where the set is known here, each value is exported from the start at zero, so a
rate over it is defined before the first event.

This module imports ``prometheus_client`` only (no Django): the model client counts its calls
here too. The gauges that are read when scraped (the event queue, the unread pools, the shards)
are the worker's (`chat.gateway.health`).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

NAMESPACE = "personabot"

TURN_STATUSES = ("replied", "failed", "aborted", "withheld", "refused")
"""A turn's terminal statuses (`chat.services.turn_lifecycle.TRANSITIONS`)."""
MODEL_TOKEN_KINDS = ("prompt", "cached_prompt", "completion")
DISCORD_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
DISCORD_STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx", "error")
"""A REST answer's status class; ``error``: no answer (refused, reset, timed out)."""
RATE_LIMIT_SCOPES = ("user", "global", "shared", "unknown")
"""Discord's ``X-RateLimit-Scope`` of a 429 (``unknown``: the header was missing)."""
PLANNER_ACTIONS = ("read_unread_messages", "send_message", "react", "sleep", "continue", "none")
"""What an autonomous planner step decided (`chat.pipeline.planner`); ``none``: the model
failed or answered no valid action."""
MODERATION_VERDICTS = ("passed", "flagged", "error")
"""A checked reply piece: it passed, it was flagged (withheld), or the check failed."""
BUDGET_LIMITS = ("tokens_per_day", "usd_per_month", "user_turns")
"""The limits of a guild's ``limits`` that can refuse a model call."""

_TURN_BUCKETS = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 20.0, 30.0, 60.0, 120.0)
_MODEL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
_INGEST_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_RECALL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

# --- Turns (counted by chat.services.turn_lifecycle) -----------------------------------------

TURNS_STARTED = Counter(
    "turns_started",
    "Turns begun (a trigger, a planner's decision, a greeting).",
    namespace=NAMESPACE,
)
TURNS = Counter("turns", "Turns that ended, by terminal status.", ["status"], namespace=NAMESPACE)
FIRST_MESSAGE_SECONDS = Histogram(
    "first_message_seconds",
    "From the trigger message to the turn's first message on Discord.",
    namespace=NAMESPACE,
    buckets=_TURN_BUCKETS,
)
TURN_SECONDS = Histogram(
    "turn_seconds",
    "From the trigger message (a turn that answers none: from its start) to the turn's end.",
    namespace=NAMESPACE,
    buckets=_TURN_BUCKETS,
)

# --- Model calls (counted by chat.llm.attempts, one HTTP call each) ---------------------------

MODEL_REQUESTS = Counter(
    "model_requests",
    "HTTP calls to a model, by model and outcome (ok, stopped, or why it failed).",
    ["model", "outcome"],
    namespace=NAMESPACE,
)
MODEL_REQUEST_SECONDS = Histogram(
    "model_request_seconds",
    "How long one HTTP call to a model took, whatever its outcome.",
    ["model"],
    namespace=NAMESPACE,
    buckets=_MODEL_BUCKETS,
)
MODEL_TOKENS = Counter(
    "model_tokens",
    "Tokens the provider reported, by model and kind (prompt, cached_prompt, completion).",
    ["model", "kind"],
    namespace=NAMESPACE,
)
MODEL_COST = Counter(
    "model_cost_usd",
    "What model calls cost, in US dollars, at the operator's prices or the provider's own "
    "reported cost.",
    ["model"],
    namespace=NAMESPACE,
)

# --- Ingest and Discord -----------------------------------------------------------------------

INGEST_SECONDS = Histogram(
    "ingest_seconds",
    "From a message taken from the gateway to its batch committed in the unread pool.",
    namespace=NAMESPACE,
    buckets=_INGEST_BUCKETS,
)
DISCORD_REQUESTS = Counter(
    "discord_requests",
    "Discord REST requests (webhooks included), by method and status class.",
    ["method", "status"],
    namespace=NAMESPACE,
)
DISCORD_RATE_LIMITED = Counter(
    "discord_rate_limited",
    "Discord REST answers 429, by X-RateLimit-Scope.",
    ["scope"],
    namespace=NAMESPACE,
)

# --- Planner, memory, moderation, spend -------------------------------------------------------

PLANNER_STEPS = Counter(
    "planner_steps",
    "Autonomous planner steps, by the action decided.",
    ["action"],
    namespace=NAMESPACE,
)
MEMORY_RECALL_SECONDS = Histogram(
    "memory_recall_seconds",
    "How long a turn's long-term memory recall took (index, query embedding, ranking).",
    namespace=NAMESPACE,
    buckets=_RECALL_BUCKETS,
)
MODERATION_VERDICTS_TOTAL = Counter(
    "moderation_verdicts",
    "Reply pieces checked by the moderation model, by verdict.",
    ["verdict"],
    namespace=NAMESPACE,
)
BUDGET_REFUSALS = Counter(
    "budget_refusals",
    "Model calls refused because a guild's limit was reached, by limit.",
    ["limit"],
    namespace=NAMESPACE,
)
BUDGET_USED_RATIO = Gauge(
    "budget_used_ratio",
    "The largest share of its budget any guild has used in the current period (0-1), by limit.",
    ["limit"],
    namespace=NAMESPACE,
    multiprocess_mode="mostrecent",
)

# --- Celery (counted by botproject.celery_metrics) ---------------------------------------------

CELERY_TASKS = Counter(
    "celery_tasks",
    "Celery tasks that ran, by task and outcome (succeeded, failed, retried).",
    ["task", "outcome"],
    namespace=NAMESPACE,
)
CELERY_TASK_SECONDS = Histogram(
    "celery_task_seconds",
    "How long a Celery task ran.",
    ["task"],
    namespace=NAMESPACE,
    buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0),
)
CELERY_BEAT_LAG_SECONDS = Histogram(
    "celery_beat_lag_seconds",
    "From beat sending a scheduled task to a worker starting it.",
    ["task"],
    namespace=NAMESPACE,
    buckets=(0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0),
)


def _zeroed(metric: Counter, label: str, values: Iterable[str]) -> None:
    for value in values:
        metric.labels(**{label: value})


_zeroed(TURNS, "status", TURN_STATUSES)
_zeroed(DISCORD_RATE_LIMITED, "scope", RATE_LIMIT_SCOPES)
_zeroed(PLANNER_STEPS, "action", PLANNER_ACTIONS)
_zeroed(MODERATION_VERDICTS_TOTAL, "verdict", MODERATION_VERDICTS)
_zeroed(BUDGET_REFUSALS, "limit", BUDGET_LIMITS)
for _method in DISCORD_METHODS:
    for _status in DISCORD_STATUS_CLASSES:
        DISCORD_REQUESTS.labels(method=_method, status=_status)


# --- Counting, for the places where the events happen -----------------------------------------


def turn_ended(*, status: str, seconds: float | None) -> None:
    """One turn reached the terminal ``status``, ``seconds`` after its trigger (None: not
    timed, e.g. a turn a stopped worker left behind)."""
    TURNS.labels(status=status).inc()
    if seconds is not None:
        TURN_SECONDS.observe(max(seconds, 0.0))


def model_call_counted(
    *,
    model: str,
    outcome: str,
    seconds: float,
    prompt_tokens: int | None,
    cached_prompt_tokens: int | None,
    completion_tokens: int | None,
) -> None:
    """One HTTP call to ``model`` ended with ``outcome`` after ``seconds``, with the usage the
    provider reported (None: not reported, nothing counted)."""
    MODEL_REQUESTS.labels(model=model, outcome=outcome).inc()
    MODEL_REQUEST_SECONDS.labels(model=model).observe(seconds)
    for kind, tokens in (
        ("prompt", prompt_tokens),
        ("cached_prompt", cached_prompt_tokens),
        ("completion", completion_tokens),
    ):
        if tokens:
            MODEL_TOKENS.labels(model=model, kind=kind).inc(tokens)


def model_cost_counted(*, model: str, usd: float) -> None:
    """A model call of ``model`` cost ``usd`` (counted where the call's spend is recorded)."""
    if usd > 0:
        MODEL_COST.labels(model=model).inc(usd)


def discord_answered(*, method: str, status: int | None, scope: str | None = None) -> None:
    """One Discord REST request ended: with HTTP ``status`` (None: no answer); a 429's
    ``scope`` is its ``X-RateLimit-Scope``. Methods and scopes outside the known sets are
    counted under the nearest known value, so no label can grow."""
    method = method.upper() if method.upper() in DISCORD_METHODS else "POST"
    status_class = "error" if status is None else f"{min(max(status // 100, 2), 5)}xx"
    DISCORD_REQUESTS.labels(method=method, status=status_class).inc()
    if status == 429:
        DISCORD_RATE_LIMITED.labels(scope=scope if scope in RATE_LIMIT_SCOPES else "unknown").inc()


def planner_step_counted(*, action: str | None) -> None:
    """One planner step decided ``action`` (None or an unknown name: no valid action)."""
    PLANNER_STEPS.labels(action=action if action in PLANNER_ACTIONS else "none").inc()


def moderation_verdict_counted(*, verdict: str) -> None:
    """One reply piece was checked: ``passed``, ``flagged`` or ``error`` (raises ValueError
    for anything else: a verdict outside the set would be a new series)."""
    if verdict not in MODERATION_VERDICTS:
        raise ValueError(f"unknown moderation verdict {verdict!r}; one of {MODERATION_VERDICTS}")
    MODERATION_VERDICTS_TOTAL.labels(verdict=verdict).inc()


def budget_refusal_counted(*, limit: str) -> None:
    """A model call was refused by a guild's ``limit`` (one of `BUDGET_LIMITS`; raises
    ValueError for anything else)."""
    if limit not in BUDGET_LIMITS:
        raise ValueError(f"unknown budget limit {limit!r}; one of {BUDGET_LIMITS}")
    BUDGET_REFUSALS.labels(limit=limit).inc()


def budget_used_ratio_set(*, limit: str, ratio: float) -> None:
    """The largest share of its ``limit`` any guild has used in the current period."""
    if limit not in BUDGET_LIMITS:
        raise ValueError(f"unknown budget limit {limit!r}; one of {BUDGET_LIMITS}")
    BUDGET_USED_RATIO.labels(limit=limit).set(ratio)
