"""A persona test run's results, case by case: how often each check held over the repeats,
the verdict of each case (``PASS``, ``FAIL``, ``ERROR``), one line per case and check for a
terminal, and JUnit XML for CI (``manage.py personatest``, the dashboard's run page)."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from collections.abc import Sequence
from dataclasses import dataclass

from chat.models import PersonaTestResult, PersonaTestRun
from chat.pipeline.persona_checks import CheckRate, CheckResult, check_rates


class Verdict:
    PASS = "PASS"
    FAIL = "FAIL"
    ERROR = "ERROR"


@dataclass(frozen=True)
class CheckLine:
    """One check of a case over its calls: how often it held, and what the first call where
    it did not hold said (the judge's reason included)."""

    rate: CheckRate
    detail: str
    reason: str


@dataclass(frozen=True)
class CaseOutcome:
    """One case against one target: its calls (in repeat order), its checks, its errors."""

    case_name: str
    persona_name: str
    target: str
    results: tuple[PersonaTestResult, ...]
    checks: tuple[CheckLine, ...]
    errors: tuple[str, ...]

    @property
    def verdict(self) -> str:
        if self.errors:
            return Verdict.ERROR
        return Verdict.PASS if all(line.rate.all_held for line in self.checks) else Verdict.FAIL


def run_outcomes(*, run: PersonaTestRun, results: Sequence[PersonaTestResult]) -> list[CaseOutcome]:
    """The run's results grouped by case (in the run's order) and target (in its order)."""
    targets = [target["key"] for target in run.targets]
    grouped: dict[tuple[str, str], list[PersonaTestResult]] = {}
    for result in sorted(results, key=lambda r: (r.repeat_index, r.pk or 0)):
        grouped.setdefault((result.case_name, result.target), []).append(result)
    outcomes = []
    for data in run.cases:
        name = data["case"]["name"]
        for target in targets:
            calls = grouped.get((name, target), [])
            if calls:
                outcomes.append(_outcome(name, target, calls))
    return outcomes


def _outcome(name: str, target: str, calls: list[PersonaTestResult]) -> CaseOutcome:
    checked = [[CheckResult.from_json(c) for c in r.checks] for r in calls if not r.error]
    lines = []
    for rate in check_rates(checked):
        missed = next(
            (c for checks in checked for c in checks if c.label == rate.label and not c.passed),
            None,
        )
        shown = missed or next(c for checks in checked for c in checks if c.label == rate.label)
        lines.append(CheckLine(rate=rate, detail=shown.detail, reason=shown.reason))
    return CaseOutcome(
        case_name=name,
        persona_name=calls[0].persona_name,
        target=target,
        results=tuple(calls),
        checks=tuple(lines),
        errors=tuple(r.error for r in calls if r.error),
    )


def outcome_lines(*, outcomes: Sequence[CaseOutcome], several_targets: bool) -> list[str]:
    """One line per case (its verdict, name, persona, and target when a run has several),
    then one per check (``ok`` or ``FAIL``, held in how many calls, what was found, the
    judge's reason), then each error."""
    lines = []
    for outcome in outcomes:
        target = f", {outcome.target}" if several_targets else ""
        lines.append(f"{outcome.verdict:<5} {outcome.case_name} ({outcome.persona_name}{target})")
        for line in outcome.checks:
            mark = "ok" if line.rate.all_held else "FAIL"
            said = "; ".join(part for part in (line.detail, line.reason) if part)
            lines.append(
                f"  {mark:<4} {line.rate.label} ({line.rate.held}/{line.rate.total})"
                + (f": {said}" if said else "")
            )
        for error in outcome.errors:
            lines.append(f"  ERROR {error}")
    return lines


def outcomes_summary(*, run: PersonaTestRun, outcomes: Sequence[CaseOutcome]) -> str:
    """``3 cases: 2 passed, 1 failed, 0 errors; 7 model calls, 4,211 prompt tokens
    (1,024 cached), 310 completion tokens``."""
    count = {v: sum(o.verdict == v for o in outcomes) for v in (Verdict.PASS, Verdict.FAIL)}
    errors = sum(o.verdict == Verdict.ERROR for o in outcomes)
    return (
        f"{len(outcomes)} cases: {count[Verdict.PASS]} passed, {count[Verdict.FAIL]} failed, "
        f"{errors} errors; {run.calls:,} model calls, {run.prompt_tokens:,} prompt tokens "
        f"({run.cached_prompt_tokens:,} cached), {run.completion_tokens:,} completion tokens"
    )


def junit_xml(*, run: PersonaTestRun, outcomes: Sequence[CaseOutcome]) -> str:
    """The run as JUnit XML: one ``testsuite``, one ``testcase`` per case (``classname`` its
    persona, and target when not the saved one), a ``failure`` naming the checks that did not
    hold, an ``error`` for a case whose model failed."""
    suite = ElementTree.Element(
        "testsuite",
        name="persona tests",
        tests=str(len(outcomes)),
        failures=str(sum(o.verdict == Verdict.FAIL for o in outcomes)),
        errors=str(sum(o.verdict == Verdict.ERROR for o in outcomes)),
        time=f"{_seconds(run):.3f}",
    )
    for outcome in outcomes:
        classname = outcome.persona_name + (
            f".{outcome.target}" if outcome.target != "saved" else ""
        )
        case = ElementTree.SubElement(
            suite,
            "testcase",
            classname=classname,
            name=outcome.case_name,
            time=f"{sum((r.llm_ms or 0) for r in outcome.results) / 1000:.3f}",
        )
        body = "\n".join(outcome_lines(outcomes=[outcome], several_targets=False)[1:])
        if outcome.verdict == Verdict.ERROR:
            error = ElementTree.SubElement(case, "error", message=outcome.errors[0][:500])
            error.text = body
        elif outcome.verdict == Verdict.FAIL:
            failed = [line.rate.label for line in outcome.checks if not line.rate.all_held]
            failure = ElementTree.SubElement(
                case, "failure", message=("did not hold: " + "; ".join(failed))[:500]
            )
            failure.text = body
        replies = "\n---\n".join(r.reply for r in outcome.results if r.reply)
        if replies:
            ElementTree.SubElement(case, "system-out").text = replies
    ElementTree.indent(suite)
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"


def _seconds(run: PersonaTestRun) -> float:
    if run.started_at is None or run.finished_at is None:
        return 0.0
    return (run.finished_at - run.started_at).total_seconds()
