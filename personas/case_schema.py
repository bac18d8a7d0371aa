"""Persona test cases as JSON (DESIGN §3b, "Persona tests"), validated with pydantic.

A case is a persona, a short conversation (``history`` and the triggering ``message``, authors
by name) and what the reply is expected to do (``expect``). Cases travel in two places:

- a **test file**, ``{"version": 1, "cases": [...]}``, where each case names its ``guild`` and
  ``persona`` (``manage.py personatest``, the dashboard's import and export);
- the **configuration file**, where a persona's cases are its ``tests`` list and name neither
  (`personas.config_schema.PersonaSpec.tests`).

``parse_case_file`` and ``parse_case`` either return the parsed cases or raise
`personas.config_schema.ConfigError` listing every problem with its JSON path
(``cases[2].expect.matches: is not a valid regular expression: …``). Whether the guild and the
persona exist is the database's to say (`personas.case_services`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

from personas.config_values import Depth, Name, NoteText, Snowflake, check_aware

CASE_FILE_VERSION = 1
CASE_NAME_MAX = 200
CASES_PER_FILE_MAX = 1_000
CASES_PER_PERSONA_MAX = 500
HISTORY_MAX = 100
"""Messages of a case's history: at most what one window holds (the fetch limit's maximum)."""
AUTHOR_MAX = 100
MESSAGE_CONTENT_MAX = 4_000
"""Characters of one message (Discord's own limit, with Nitro)."""
EXPECTED_TEXTS_MAX = 20
EXPECTED_TEXT_MAX = 500
PATTERN_MAX = 1_000
RUBRIC_MAX = 2_000
MAX_CHARS_MAX = 100_000
MEMORY_LINES_MAX = 50
MEMORY_LINE_MAX = 2_000
SHORT_TERM_MEMORY_MAX = 8_000
BASELINE_REPLY_MAX = 32_000


def _check_pattern(value: str) -> str:
    try:
        re.compile(value)
    except re.error as error:
        raise ValueError(f"is not a valid regular expression: {error}") from None
    return value


def _check_rubric(value: str) -> str:
    if not value.strip():
        raise ValueError("is empty: write what the judge should check, e.g. 'stays in character'")
    return value


def _check_not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CaseNote(_Strict):
    """A context note: the configuration file's ``context_note`` (same rules)."""

    text: NoteText = ""
    depth: Depth = 4


ExpectedText = Annotated[
    str,
    StringConstraints(min_length=1, max_length=EXPECTED_TEXT_MAX),
    AfterValidator(_check_not_blank),
]
AuthorName = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=AUTHOR_MAX)
]
CaseName = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=CASE_NAME_MAX)
]
MemoryLine = Annotated[str, StringConstraints(min_length=1, max_length=MEMORY_LINE_MAX)]


class CaseMessage(_Strict):
    """One message of a case's conversation: who said it (a member's name as the channel
    showed it, or a persona's), what they said, when (optional; without it the messages are
    a minute apart, the trigger now), and which earlier message of the history it replies to
    (its index). ``persona``: the author is one of the guild's personas (None: when the name
    is a persona's, ignoring case)."""

    author: AuthorName
    content: Annotated[str, StringConstraints(max_length=MESSAGE_CONTENT_MAX)]
    at: Annotated[dt.datetime | None, AfterValidator(check_aware)] = None
    persona: bool | None = None
    reply_to: Annotated[int, Field(strict=True, ge=0)] | None = None


class Expectations(_Strict):
    """What the reply must do; every key is optional, and a case with none is still run (its
    reply shown beside the baseline).

    - ``contains`` / ``not_contains``: texts the reply must (not) hold, ignoring case;
    - ``matches``: a regular expression (Python's ``re``) found somewhere in the reply;
    - ``max_chars``: the reply's length in characters at most;
    - ``judge``: a rubric the judge model answers yes or no, with its reason;
    - ``similar_to_baseline``: the cosine of the reply's and the baseline's embeddings at
      least this (0 to 1); the case needs a ``baseline``.
    """

    contains: Annotated[list[ExpectedText], Field(max_length=EXPECTED_TEXTS_MAX)] = []
    not_contains: Annotated[list[ExpectedText], Field(max_length=EXPECTED_TEXTS_MAX)] = []
    matches: (
        Annotated[
            str,
            StringConstraints(min_length=1, max_length=PATTERN_MAX),
            AfterValidator(_check_pattern),
        ]
        | None
    ) = None
    max_chars: Annotated[int, Field(strict=True, ge=1, le=MAX_CHARS_MAX)] | None = None
    judge: (
        Annotated[str, StringConstraints(max_length=RUBRIC_MAX), AfterValidator(_check_rubric)]
        | None
    ) = None
    similar_to_baseline: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] | None = None


class CaseNotes(_Strict):
    """The notes of the channel and the guild the case runs with (the persona's own note is
    the persona's); null: none."""

    channel: CaseNote | None = None
    guild: CaseNote | None = None


class EarlierMemories(_Strict):
    """Memories an earlier turn showed, kept after the history message ``after`` (its index)."""

    after: Annotated[int, Field(strict=True, ge=0)]
    lines: Annotated[list[MemoryLine], Field(min_length=1, max_length=MEMORY_LINES_MAX)]


class Baseline(_Strict):
    """The reply recorded when the case was saved from a turn (``similar_to_baseline``
    compares with it), and which lorebook entries fired then (as the turn recorded them)."""

    reply: Annotated[str, StringConstraints(max_length=BASELINE_REPLY_MAX)]
    lorebook_fired: Annotated[list[str], Field(max_length=500)] = []


class PersonaCaseSpec(_Strict):
    """A case as a persona's ``tests`` list holds it (the configuration file): everything but
    the guild and the persona.

    ``notes`` absent: the guild's note as it is when the case runs, no channel note; given:
    exactly those. ``memories``: the long-term memory lines shown after the dialogue, instead
    of recalling them; ``earlier_memories``: lines earlier turns showed, kept where they were;
    ``short_term_memory``: the persona's short-term memory of the conversation. ``mode``: the
    channel's (an autonomous channel offers other tools).
    """

    name: CaseName
    history: Annotated[list[CaseMessage], Field(max_length=HISTORY_MAX)] = []
    message: CaseMessage
    notes: CaseNotes | None = None
    mode: Literal["reactive", "autonomous"] = "reactive"
    memories: Annotated[list[MemoryLine], Field(max_length=MEMORY_LINES_MAX)] = []
    earlier_memories: Annotated[list[EarlierMemories], Field(max_length=MEMORY_LINES_MAX)] = []
    short_term_memory: (
        Annotated[str, StringConstraints(max_length=SHORT_TERM_MEMORY_MAX)] | None
    ) = None
    baseline: Baseline | None = None
    expect: Expectations = Expectations()


class FileCaseSpec(PersonaCaseSpec):
    """A case of a test file: a `PersonaCaseSpec` naming its guild and persona."""

    guild: Snowflake
    persona: Name


class CaseFile(_Strict):
    version: Literal[1]
    cases: Annotated[list[FileCaseSpec], Field(max_length=CASES_PER_FILE_MAX)]


def case_problems(case: PersonaCaseSpec, where: str) -> Iterable[tuple[str, str]]:
    """What no single field of a case shows: a reply to a message that is not earlier in the
    history, earlier memories after a message the history does not hold, a similarity check
    without a baseline."""
    count = len(case.history)
    for index, line in enumerate(case.history):
        if line.reply_to is not None and line.reply_to >= index:
            yield (
                f"{where}.history[{index}].reply_to",
                f"must name an earlier message of the history (0 to {index - 1})"
                if index
                else "the first message cannot reply to an earlier one",
            )
    if case.message.reply_to is not None and case.message.reply_to >= count:
        yield (
            f"{where}.message.reply_to",
            f"must name a message of the history (0 to {count - 1})"
            if count
            else "the history is empty: there is nothing to reply to",
        )
    for index, earlier in enumerate(case.earlier_memories):
        if earlier.after >= count:
            yield (
                f"{where}.earlier_memories[{index}].after",
                f"must name a message of the history (0 to {count - 1})",
            )
    if case.expect.similar_to_baseline is not None and case.baseline is None:
        yield (
            f"{where}.expect.similar_to_baseline",
            "needs a baseline reply to compare with (save the case from a turn, or give "
            '"baseline": {"reply": "…"})',
        )


def names_problems(names: Sequence[tuple[str, str, str]]) -> Iterable[tuple[str, str]]:
    """Two cases of one persona with one name (compared ignoring case): ``names`` are
    (JSON path, the persona's key, the case name)."""
    seen: dict[tuple[str, str], str] = {}
    for path, persona, name in names:
        key = (persona, name.casefold())
        if key in seen:
            yield path, f"another case of this persona is named {name!r} ({seen[key]})"
        else:
            seen[key] = path


def parse_case_file(data: object) -> CaseFile:
    """Validate a decoded test file whole. Returns it; raises ConfigError with every problem
    (structure first, then the checks across fields), nothing half-accepted."""
    from personas.config_schema import ConfigError, _describe, _raw_problems, json_path

    problems = _raw_problems(data)
    if not problems:
        try:
            document = CaseFile.model_validate(data)
        except ValidationError as error:
            problems = [(json_path(item["loc"]), _describe(item)) for item in error.errors()]
    if problems:
        raise ConfigError(problems)
    problems = [
        problem
        for index, case in enumerate(document.cases)
        for problem in case_problems(case, f"cases[{index}]")
    ]
    problems += names_problems(
        [
            (f"cases[{i}].name", f"{case.guild}/{case.persona.casefold()}", case.name)
            for i, case in enumerate(document.cases)
        ]
    )
    if problems:
        raise ConfigError(problems)
    return document


def parse_case(data: object) -> PersonaCaseSpec:
    """Validate one case as a persona's ``tests`` list holds it (a form on the dashboard, a
    stored case); raises ConfigError whose paths are relative to the case (``expect.judge``)."""
    from personas.config_schema import ConfigError, _describe, _raw_problems, json_path

    problems = _raw_problems(data)
    if not problems:
        try:
            case = PersonaCaseSpec.model_validate(data)
        except ValidationError as error:
            problems = [(json_path(item["loc"]), _describe(item)) for item in error.errors()]
    if problems:
        raise ConfigError(problems)
    problems = [
        (path.removeprefix("case."), message) for path, message in case_problems(case, "case")
    ]
    if problems:
        raise ConfigError(problems)
    return case


def case_json(case: PersonaCaseSpec) -> dict:
    """The case as its JSON is written (a stored case, an export): unset keys left out."""
    return case.model_dump(mode="json", exclude_defaults=True, exclude={"guild", "persona"})
