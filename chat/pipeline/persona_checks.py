"""Persona tests: what a reply is checked against, and how results are compared (DESIGN §3b,
"Persona tests").

A case's expectations become `CheckResult`s here: the text checks (``contains``,
``not_contains``, ``matches``, ``max_chars``) from the reply alone; ``judge`` from the judge
model's answer (`judge_messages` writes its request, `judge_verdict` reads the answer); and
``similar_to_baseline`` from two embeddings (`similarity_check`). `check_rates` says how often
each check held over repeated calls, `word_diff` sets two replies side by side, and
`json_differences` says where two requests differ. Pure: the service
(`chat.services.persona_tests`) asks the models.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class CheckKind(StrEnum):
    CONTAINS = "contains"
    NOT_CONTAINS = "not_contains"
    MATCHES = "matches"
    MAX_CHARS = "max_chars"
    JUDGE = "judge"
    SIMILAR_TO_BASELINE = "similar_to_baseline"


@dataclass(frozen=True)
class CheckResult:
    """One expectation judged against one reply. ``passed`` None: it could not be judged
    (the judge answered neither yes nor no, or its call failed), which counts as not held;
    ``detail`` says what was found; ``reason`` is the judge's own words."""

    kind: CheckKind
    expected: str
    passed: bool | None
    detail: str = ""
    reason: str = ""

    @property
    def label(self) -> str:
        """How a line of output names the check: ``contains "alice"``, ``max_chars 400``."""
        if self.kind in (CheckKind.CONTAINS, CheckKind.NOT_CONTAINS, CheckKind.MATCHES):
            return f"{self.kind} {self.expected!r}"
        return f"{self.kind} {self.expected}"

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "expected": self.expected,
            "passed": self.passed,
            "detail": self.detail,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CheckResult:
        return cls(
            kind=CheckKind(data["kind"]),
            expected=str(data["expected"]),
            passed=data["passed"],
            detail=str(data.get("detail", "")),
            reason=str(data.get("reason", "")),
        )


def text_checks(
    reply: str,
    *,
    contains: Sequence[str] = (),
    not_contains: Sequence[str] = (),
    matches: str | None = None,
    max_chars: int | None = None,
) -> list[CheckResult]:
    """The checks that read the reply alone, in this order: each ``contains`` text (found,
    ignoring case), each ``not_contains`` text (absent, ignoring case), ``matches`` (the
    pattern found anywhere: Python's ``re.search``; anchor it with ``^``/``$`` to match the
    whole reply), ``max_chars`` (the reply's length in characters)."""
    folded = reply.casefold()
    results = []
    for text in contains:
        found = text.casefold() in folded
        results.append(
            CheckResult(CheckKind.CONTAINS, text, found, "" if found else "not in the reply")
        )
    for text in not_contains:
        at = folded.find(text.casefold())
        results.append(
            CheckResult(
                CheckKind.NOT_CONTAINS,
                text,
                at < 0,
                "" if at < 0 else f"found at character {at}: …{_around(reply, at, len(text))}…",
            )
        )
    if matches is not None:
        match = re.search(matches, reply)
        results.append(
            CheckResult(
                CheckKind.MATCHES,
                matches,
                match is not None,
                f"matched {match.group(0)[:80]!r}" if match else "no match in the reply",
            )
        )
    if max_chars is not None:
        results.append(
            CheckResult(
                CheckKind.MAX_CHARS,
                str(max_chars),
                len(reply) <= max_chars,
                f"{len(reply)} characters",
            )
        )
    return results


def _around(text: str, at: int, length: int, margin: int = 20) -> str:
    return text[max(0, at - margin) : at + length + margin]


JUDGE_SYSTEM_PROMPT = (
    "You grade one reply of a chat persona against a rubric. Answer on the first line with "
    "exactly YES (the reply meets the rubric) or NO (it does not), then say why in one "
    "sentence."
)
JUDGE_CONTEXT_LINES = 10
"""How many of the conversation's newest lines the judge is shown."""


def judge_messages(
    *,
    rubric: str,
    persona_name: str,
    conversation: Sequence[tuple[str, str]],
    reply: str,
) -> list[dict[str, str]]:
    """The judge model's request (Chat Completions messages): the rubric, the newest
    `JUDGE_CONTEXT_LINES` lines of ``conversation`` ((author, content) pairs, oldest first) and
    the reply to grade."""
    lines = "\n".join(
        f"{author}: {content}" for author, content in conversation[-JUDGE_CONTEXT_LINES:]
    )
    return [
        {"role": "system", "content": JUDGE_SYSTEM_PROMPT},
        {
            "role": "user",
            "content": (
                f"Rubric: {rubric}\n\n"
                f"The conversation (the newest last):\n{lines}\n\n"
                f"The reply of {persona_name}:\n{reply}"
            ),
        },
    ]


@dataclass(frozen=True)
class JudgeVerdict:
    """What the judge answered: ``passed`` None when it said neither yes nor no."""

    passed: bool | None
    reason: str


_VERDICT = re.compile(r"^\W*(?:verdict|answer)?\W*(yes|no)\b\W*(.*)$", re.IGNORECASE | re.DOTALL)


def judge_verdict(answer: str) -> JudgeVerdict:
    """Read the judge's answer: its first line starts with yes or no (any case; markdown,
    punctuation or a ``Verdict:`` label around it ignored); the reason is what follows, on
    that line and the next ones. Anything else is no verdict, the answer kept as the reason."""
    text = answer.strip()
    match = _VERDICT.match(text)
    if match is None:
        return JudgeVerdict(None, f"the judge answered neither yes nor no: {text[:300]!r}")
    reason = " ".join(match.group(2).split())
    return JudgeVerdict(match.group(1).lower() == "yes", reason)


def judge_check(rubric: str, verdict: JudgeVerdict) -> CheckResult:
    return CheckResult(
        CheckKind.JUDGE,
        rubric,
        verdict.passed,
        {True: "the judge said yes", False: "the judge said no", None: "no verdict"}[
            verdict.passed
        ],
        verdict.reason,
    )


def cosine(first: Sequence[float], second: Sequence[float]) -> float:
    """The cosine of two vectors (0 when either is zero)."""
    dot = sum(a * b for a, b in zip(first, second, strict=True))
    norms = math.sqrt(sum(a * a for a in first)) * math.sqrt(sum(b * b for b in second))
    return dot / norms if norms else 0.0


def similarity_check(threshold: float, similarity: float) -> CheckResult:
    """``similar_to_baseline``: the reply's embedding is at least ``threshold`` close to the
    baseline's (cosine)."""
    return CheckResult(
        CheckKind.SIMILAR_TO_BASELINE,
        f"{threshold:g}",
        similarity >= threshold,
        f"cosine {similarity:.3f}",
    )


@dataclass(frozen=True)
class CheckRate:
    """How often one check held over a case's repeated calls."""

    label: str
    held: int
    total: int

    @property
    def all_held(self) -> bool:
        return self.held == self.total


def check_rates(calls: Iterable[Sequence[CheckResult]]) -> list[CheckRate]:
    """Per check (in the order of the first call's checks), how many of the calls it held in:
    the calls are one case's repeats, each with the same checks."""
    rates: dict[str, list[int]] = {}
    for results in calls:
        for result in results:
            held, total = rates.setdefault(result.label, [0, 0])
            rates[result.label] = [held + (result.passed is True), total + 1]
    return [CheckRate(label, held, total) for label, (held, total) in rates.items()]


class DiffKind(StrEnum):
    SAME = "same"
    REMOVED = "removed"
    ADDED = "added"


@dataclass(frozen=True)
class DiffPiece:
    kind: DiffKind
    text: str


_WORDS = re.compile(r"\s+|[^\s]+")


def word_diff(old: str, new: str) -> list[DiffPiece]:
    """``new`` against ``old`` word by word (whitespace kept with its word): the pieces both
    share, those only ``old`` has (removed) and those only ``new`` has (added), in reading
    order; neighbouring pieces of one kind are joined."""
    old_words, new_words = _WORDS.findall(old), _WORDS.findall(new)
    pieces: list[DiffPiece] = []
    matcher = difflib.SequenceMatcher(a=old_words, b=new_words, autojunk=False)
    for tag, a1, a2, b1, b2 in matcher.get_opcodes():
        if tag == "equal":
            _append(pieces, DiffKind.SAME, "".join(old_words[a1:a2]))
            continue
        if a2 > a1:
            _append(pieces, DiffKind.REMOVED, "".join(old_words[a1:a2]))
        if b2 > b1:
            _append(pieces, DiffKind.ADDED, "".join(new_words[b1:b2]))
    return pieces


def _append(pieces: list[DiffPiece], kind: DiffKind, text: str) -> None:
    if pieces and pieces[-1].kind is kind:
        pieces[-1] = DiffPiece(kind, pieces[-1].text + text)
    else:
        pieces.append(DiffPiece(kind, text))


def json_differences(first: Any, second: Any, path: str = "") -> list[str]:
    """The JSON paths where two decoded JSON values differ (``messages[0].content``): a
    value of another type or a scalar that differs is one path; objects and arrays are walked
    into (an array of another length differs at the array itself)."""
    if isinstance(first, dict) and isinstance(second, dict):
        keys = sorted(set(first) | set(second))
        return [
            difference
            for key in keys
            for difference in json_differences(
                first.get(key, _MISSING),
                second.get(key, _MISSING),
                f"{path}.{key}" if path else key,
            )
        ]
    if isinstance(first, list) and isinstance(second, list) and len(first) == len(second):
        return [
            difference
            for index, (a, b) in enumerate(zip(first, second, strict=True))
            for difference in json_differences(a, b, f"{path}[{index}]")
        ]
    return [] if first == second and type(first) is type(second) else [path or "(the whole)"]


_MISSING = object()
