"""The product's Prometheus series: no label takes an unbounded value, the closed label sets
match the product's own vocabularies, and Discord answers are counted in bounded classes."""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter
from prometheus_client.metrics import MetricWrapperBase

from chat import metrics
from chat.gateway.health import HealthSnapshot, WorkerCollector
from chat.pipeline.planner import PlannerAction
from chat.services.turn_lifecycle import TRANSITIONS

UNBOUNDED = re.compile(r"guild|channel|user|message", re.IGNORECASE)
"""Label names that would take a value per guild, channel, user or message."""


def product_metrics() -> list[MetricWrapperBase]:
    """Every series `chat.metrics` defines."""
    return [value for value in vars(metrics).values() if isinstance(value, MetricWrapperBase)]


def worker_collector() -> WorkerCollector:
    """The worker's scrape-time gauges, with every sample present (no database read)."""
    collector = WorkerCollector()
    collector.snapshot = HealthSnapshot(
        shards=(), shards_ready=1, shard_count=1, latency=0.05, unready=None
    )
    return collector


def exported_families(registries: Iterable = (REGISTRY,)) -> dict[str, tuple[str, set[str]]]:
    """Every metric family the project exports (the process's registry, which holds
    `chat.metrics`, and the worker's scrape-time gauges): name → (type, label names)."""
    families: dict[str, tuple[str, set[str]]] = {}
    for source in [*registries, worker_collector()]:
        for family in source.collect():
            labels = {name for sample in family.samples for name in sample.labels}
            families[family.name] = (family.type, labels)
    for metric in product_metrics():
        family_type, labels = families.get(metric._name, (metric._type, set()))
        families[metric._name] = (family_type, labels | set(metric._labelnames))
    return families


def unbounded_labels(families: dict[str, tuple[str, set[str]]]) -> list[str]:
    return sorted(
        f"{name}{{{label}}}"
        for name, (_, labels) in families.items()
        for label in labels
        if UNBOUNDED.search(label)
    )


def test_no_series_has_a_guild_channel_user_or_message_label():
    families = exported_families()
    assert "personabot_turns" in families and "personabot_shards_ready" in families
    assert unbounded_labels(families) == []


def test_the_label_check_finds_an_unbounded_label():
    registry = CollectorRegistry()
    per_channel = Counter(
        "personabot_per_channel", "per channel", ["channel_id"], registry=registry
    )
    per_channel.labels(channel_id="1200000000000000001").inc()
    Counter("personabot_by_guild", "per guild", ["guild"], registry=registry).labels("1").inc()
    found = unbounded_labels(exported_families([registry]))
    assert found == ["personabot_by_guild{guild}", "personabot_per_channel{channel_id}"]


def test_turn_statuses_are_the_lifecycles_terminal_ones():
    terminal = {str(status) for status, targets in TRANSITIONS.items() if not targets}
    assert set(metrics.TURN_STATUSES) == terminal


def test_planner_actions_are_the_planners_own_and_none():
    union = typing.get_args(typing.get_args(PlannerAction)[0])
    names = {typing.get_args(model.model_fields["action"].annotation)[0] for model in union}
    assert set(metrics.PLANNER_ACTIONS) == names | {"none"}


@pytest.mark.parametrize(
    ("method", "status", "scope", "counted", "limited"),
    [
        ("GET", 200, None, ("GET", "2xx"), None),
        ("post", 204, None, ("POST", "2xx"), None),
        ("PATCH", 404, None, ("PATCH", "4xx"), None),
        ("POST", 429, "shared", ("POST", "4xx"), "shared"),
        ("PUT", 429, None, ("PUT", "4xx"), "unknown"),
        ("DELETE", 429, "a-new-scope", ("DELETE", "4xx"), "unknown"),
        ("GET", 502, None, ("GET", "5xx"), None),
        ("GET", None, None, ("GET", "error"), None),
    ],
)
def test_discord_answers_are_counted_in_closed_classes(method, status, scope, counted, limited):
    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    requests = {"method": counted[0], "status": counted[1]}
    before = value("personabot_discord_requests_total", **requests)
    limited_before = {
        s: value("personabot_discord_rate_limited_total", scope=s)
        for s in metrics.RATE_LIMIT_SCOPES
    }

    metrics.discord_answered(method=method, status=status, scope=scope)

    assert value("personabot_discord_requests_total", **requests) == before + 1
    limited_after = {
        s: value("personabot_discord_rate_limited_total", scope=s)
        for s in metrics.RATE_LIMIT_SCOPES
    }
    assert {
        s: limited_after[s] - limited_before[s]
        for s in limited_after
        if limited_after[s] != limited_before[s]
    } == ({limited: 1} if limited else {})


def test_verdicts_and_limits_outside_their_sets_are_refused():
    with pytest.raises(ValueError, match="unknown moderation verdict 'maybe'"):
        metrics.moderation_verdict_counted(verdict="maybe")
    with pytest.raises(ValueError, match="unknown budget limit 'per_guild'"):
        metrics.budget_refusal_counted(limit="per_guild")
