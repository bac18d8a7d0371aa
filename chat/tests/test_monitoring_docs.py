"""docs/monitoring/: the alert rules load in Prometheus's own checker (``promtool check rules``,
from Debian's ``prometheus`` package) and fire on their trouble (``promtool test rules``), the
Grafana board's queries are valid PromQL, and every series a rule or a panel reads, with every
label it selects on, is one the project exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from chat.tests.test_metrics import exported_families

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "monitoring" / "alerts.yml"
BOARD = ROOT / "docs" / "monitoring" / "grafana-dashboard.json"
ALERT_CASES = ROOT / "chat" / "tests" / "fixtures" / "alerts_test.yml"
"""``promtool test rules`` cases: each alert fires on its trouble and not on a healthy bot."""

PROMETHEUS_OWN = {"up"}
"""Series Prometheus makes itself for every target."""
TARGET_LABELS = {"job", "instance"}
"""Labels Prometheus adds to every series it scrapes."""
SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_sum", "_count"),
    "gauge": ("",),
}
SELECTOR = re.compile(r"\b([a-z_][a-z0-9_]*)\s*(\{[^}]*\})?")
LABEL_MATCHER = re.compile(r"([a-z_][a-z0-9_]*)\s*(?:=~|!~|!=|=)")
PROMQL_WORDS = {
    "sum", "max", "min", "avg", "count", "by", "without", "and", "or", "unless", "rate",
    "increase", "deriv", "histogram_quantile", "max_over_time", "min_over_time", "bool",
    "le", "humanizePercentage", "humanizeDuration", "offset",
}  # fmt: skip


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool is missing: install Debian's prometheus package (.ci/run does)")
    return found


def rule_expressions() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def panel_expressions() -> list[str]:
    board = json.loads(BOARD.read_text())
    return [
        target["expr"]
        for panel in board["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def exported_samples() -> dict[str, set[str]]:
    """Every sample name the project exports, with the labels it carries."""
    samples: dict[str, set[str]] = {name: set() for name in PROMETHEUS_OWN}
    for name, (kind, labels) in exported_families().items():
        for suffix in SUFFIXES.get(kind, ("",)):
            samples[name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return samples


def series_used(expression: str) -> list[tuple[str, set[str]]]:
    """The series an expression selects, each with the label names its matchers name."""
    used = []
    for name, matchers in SELECTOR.findall(expression.replace("$__rate_interval", "5m")):
        if name in PROMQL_WORDS or not (
            name.startswith(("personabot_", "process_")) or name in PROMETHEUS_OWN
        ):
            continue
        used.append((name, set(LABEL_MATCHER.findall(matchers))))
    return used


def test_the_alert_rules_pass_promtool():
    checked = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(rule_expressions())} rules found" in checked.stdout


def test_the_alerts_fire_on_their_trouble_and_not_on_a_healthy_bot():
    tested = subprocess.run(
        [promtool(), "test", "rules", str(ALERT_CASES)], capture_output=True, text=True, check=False
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout


def test_the_boards_queries_are_valid_promql(tmp_path):
    # promtool checks PromQL inside rule files: each panel query becomes a recording rule.
    recorded = {
        "groups": [
            {
                "name": "board",
                "rules": [
                    {"record": f"board:panel_{n}", "expr": e.replace("$__rate_interval", "5m")}
                    for n, e in enumerate(panel_expressions())
                ],
            }
        ]
    }
    rules = tmp_path / "board.yml"
    rules.write_text(yaml.safe_dump(recorded))
    checked = subprocess.run(
        [promtool(), "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_board_is_an_importable_grafana_dashboard():
    board = json.loads(BOARD.read_text())
    assert board["uid"] == "personabot"
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    panels = [panel for panel in board["panels"] if panel["type"] != "row"]
    assert len({panel["id"] for panel in board["panels"]}) == len(board["panels"])
    assert all(
        panel["targets"] and panel["datasource"]["uid"] == "${DS_PROMETHEUS}" for panel in panels
    )


@pytest.mark.parametrize("source", ["rules", "board"])
def test_every_series_a_rule_or_panel_reads_is_exported(source):
    expressions = rule_expressions() if source == "rules" else panel_expressions()
    exported = exported_samples()
    missing = []
    for expression in expressions:
        used = series_used(expression)
        assert used, f"no series found in {expression!r}"
        for name, labels in used:
            if name not in exported:
                missing.append(f"{name} (in {expression.strip()!r})")
            elif unknown := labels - exported[name] - TARGET_LABELS:
                missing.append(f"{name}{{{', '.join(sorted(unknown))}}}")
    assert missing == []


def test_the_series_check_finds_a_series_nobody_exports():
    exported = exported_samples()
    used = series_used(
        'sum(rate(personabot_replies_total{guild="1"}[5m]))'
        ' / personabot_turns_total{status="replied"}'
    )
    assert [(name, name in exported) for name, _ in used] == [
        ("personabot_replies_total", False),
        ("personabot_turns_total", True),
    ]
    assert used[1][1] <= exported["personabot_turns_total"]
