"""Running persona tests (DESIGN §3b, "Persona tests"): a run's cases against its targets,
each case's request built as a dry-run turn (`chat.services.persona_tests`), the model
called, every expectation checked, each call recorded (`chat.models_persona_tests`).

A run's lifecycle is this module's: ``queued`` → ``running`` → ``finished`` (every case done,
whatever each case's outcome) or ``failed`` (the run could not go on at all: no model endpoint,
its persona gone); `RUN_TRANSITIONS` says which changes are allowed, and nothing else assigns a
run's status. A model error is that case's error (its result says so), never the run's.

Every model call of a run (a persona's reply, a judge's verdict) goes through
`persona_test_model_call`: the one place where a run's calls are counted as kind ``test``.
Cases run concurrently, at most ``concurrency`` calls at a time.

Steps of `persona_test_run_execute`:
    1. Mark the run running; read its personas, the guild's cast, and build each target's
       persona (the saved one, the draft standing in for it, either on another model).
    2. For each case and target: prepare the request (a dry run over the case's history).
    3. For each repeat: call the model with that request (tools offered as a real turn offers
       them, answered without effect), check each expectation (the judge's and the
       embedding's calls included), save the result, count the progress and the tokens.
    4. Mark the run finished.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from chat.llm.attempts import AttemptRunner, Render
from chat.llm.base import ModelSpec, Usage
from chat.llm.embeddings import EmbeddingError, EmbeddingModel
from chat.llm.metering import UNMETERED, CallMeter
from chat.llm.tools import ToolAttachment, ToolBox, ToolError
from chat.llm.turn_completion import TurnCompletion
from chat.models import PersonaTestResult, PersonaTestRun
from chat.pipeline.persona_checks import (
    CheckKind,
    CheckResult,
    cosine,
    judge_check,
    judge_messages,
    judge_verdict,
    similarity_check,
    text_checks,
)
from chat.pipeline.spend import CallKind
from chat.pipeline.tokens import TokenCounter, default_token_counter
from chat.pipeline.truncation import context_budget
from chat.services.persona_tests import (
    CaseTurn,
    case_prepare,
    case_turn,
    guild_cast,
    lore_labels,
    persona_variant,
)
from chat.services.spend import Spend, SpendSite, guild_site
from chat.services.turn_record import context_items_json
from chat.services.turn_request import PreparedTurn
from chat.services.turn_tools import MetadataLookup
from personas.case_schema import PersonaCaseSpec, case_json, parse_case
from personas.config_schema import PersonaSpec, parse_config_row
from personas.models import GuildConfig, Persona
from personas.models_cases import PersonaTestCase
from personas.services import persona_draft

logger = logging.getLogger(__name__)

RUN_TRANSITIONS: Mapping[str, frozenset[str]] = {
    PersonaTestRun.Status.QUEUED: frozenset(
        {PersonaTestRun.Status.RUNNING, PersonaTestRun.Status.FAILED}
    ),
    PersonaTestRun.Status.RUNNING: frozenset(
        {PersonaTestRun.Status.FINISHED, PersonaTestRun.Status.FAILED}
    ),
    PersonaTestRun.Status.FINISHED: frozenset(),
    PersonaTestRun.Status.FAILED: frozenset(),
}
REPEAT_MAX = 20
JUDGE_MAX_OUTPUT_TOKENS = 300


class TestRunRefused(Exception):
    """A run cannot be made as asked (no target, a draft that is not valid…); the message
    says what and where."""


# --- Targets ----------------------------------------------------------------------------------


class TargetKey:
    SAVED = "saved"
    DRAFT = "draft"
    MODEL = "model"


@dataclass(frozen=True)
class Target:
    """What a run's cases are run against: ``key`` ``saved`` (the persona as saved),
    ``draft`` (the run's draft standing in for the persona it names), ``model`` (the saved
    persona on another model); ``model`` set on a draft runs the draft on that model."""

    key: str
    label: str
    model: str = ""

    def as_json(self) -> dict[str, str]:
        return {"key": self.key, "label": self.label, "model": self.model}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Target:
        return cls(key=data["key"], label=data["label"], model=data.get("model", ""))


def targets_for(*, saved: bool, draft: bool, model: str) -> list[Target]:
    """The dashboard's targets, in the page's order: the saved persona, the draft, the saved
    persona on ``model``. Raises `TestRunRefused` when none is chosen."""
    targets = []
    if saved:
        targets.append(Target(TargetKey.SAVED, "saved"))
    if draft:
        targets.append(Target(TargetKey.DRAFT, "draft (unsaved)"))
    if model:
        targets.append(Target(TargetKey.MODEL, f"on {model}", model=model))
    if not targets:
        raise TestRunRefused("choose what to run against: the saved persona, the draft or a model")
    return targets


# --- Creating a run ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RunCase:
    """One case of a run: its JSON, the persona it names (by id and name) and its guild, and
    the stored case it came from (None: a test file's)."""

    spec: PersonaCaseSpec
    persona_id: int
    persona_name: str
    guild_id: int
    case_id: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "case": case_json(self.spec),
            "persona_id": self.persona_id,
            "persona": self.persona_name,
            "guild": str(self.guild_id),
            "case_id": self.case_id,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunCase:
        return cls(
            spec=parse_case(data["case"]),
            persona_id=int(data["persona_id"]),
            persona_name=str(data["persona"]),
            guild_id=int(data["guild"]),
            case_id=data.get("case_id"),
        )


def run_cases_of(*, cases: Sequence[PersonaTestCase]) -> list[RunCase]:
    """Stored cases as a run's cases."""
    return [
        RunCase(
            spec=parse_case(case.spec),
            persona_id=case.persona.pk,
            persona_name=case.persona.name,
            guild_id=case.persona.guild.guild_id,
            case_id=case.pk,
        )
        for case in cases
    ]


def persona_test_run_create(
    *,
    cases: Sequence[RunCase],
    targets: Sequence[Target],
    repeat: int = 1,
    draft: Mapping[str, Any] | None = None,
    draft_for: Sequence[int] = (),
    persona: Persona | None = None,
    origin: str = PersonaTestRun.Origin.DASHBOARD,
    requested_by: str = "",
) -> PersonaTestRun:
    """Record a queued run of ``cases`` against ``targets``, each case called ``repeat``
    times. ``draft`` (a persona row of the configuration file: the form's unsaved values, or
    ``--persona-file``) stands in for the personas ``draft_for`` (their ids). ``persona``: the
    persona whose set this is (None: a test file's cases, which may name several).

    Raises `TestRunRefused` (no case, a repeat out of 1..20, a draft without personas to
    stand for) and `personas.config_schema.ConfigError` (a draft the schema refuses, with
    the path of the field).
    """
    if not cases:
        raise TestRunRefused("there is no case to run: add one first")
    if not 1 <= repeat <= REPEAT_MAX:
        raise TestRunRefused(f"repeat must be from 1 to {REPEAT_MAX}, got {repeat}")
    if any(target.key == TargetKey.DRAFT for target in targets):
        if draft is None or not draft_for:
            raise TestRunRefused("a run against a draft needs the draft and its persona")
        parse_config_row("personas", dict(draft))  # raises ConfigError with the field's path
    return PersonaTestRun.objects.create(
        guild_id=persona.guild.guild_id if persona is not None else None,
        persona=persona,
        persona_name=persona.name if persona is not None else "",
        origin=origin,
        requested_by=requested_by,
        targets=[target.as_json() for target in targets],
        draft={"row": dict(draft), "for": list(draft_for)} if draft is not None else None,
        model=next((t.model for t in targets if t.model), ""),
        repeat=repeat,
        cases=[case.as_json() for case in cases],
        total=len(cases) * len(targets) * repeat,
    )


# --- The lifecycle ----------------------------------------------------------------------------


def _run_moves(run: PersonaTestRun, to: str, **fields: Any) -> None:
    """Change ``run``'s status to ``to`` (allowed by `RUN_TRANSITIONS`) with ``fields``, and
    save them. Raises ``ValueError`` for a change the table does not allow."""
    if to not in RUN_TRANSITIONS[run.status]:
        raise ValueError(f"a {run.status} test run cannot become {to}")
    values = {"status": to, **fields}
    with transaction.atomic():
        changed = PersonaTestRun.objects.filter(pk=run.pk, status=run.status).update(**values)
        if not changed:
            raise ValueError(f"test run {run.pk} is no longer {run.status}")
    for name, value in values.items():
        setattr(run, name, value)


def persona_test_run_refused(*, run_id: int, reason: str) -> PersonaTestRun | None:
    """A queued run that cannot start (no model endpoint is configured) fails with
    ``reason``; None when there is no such queued run."""
    run = PersonaTestRun.objects.filter(pk=run_id, status=PersonaTestRun.Status.QUEUED).first()
    if run is None:
        return None
    _run_moves(run, PersonaTestRun.Status.FAILED, error=reason, finished_at=timezone.now())
    return run


# --- Executing a run --------------------------------------------------------------------------


async def persona_test_model_call(
    *,
    runner: AttemptRunner,
    meter: CallMeter,
    models: Sequence[ModelSpec],
    render: Render,
    persona_name: str,
    toolbox: ToolBox | None = None,
) -> TurnCompletion:
    """Every model call of a persona test run (a persona's reply, a judge's verdict) is made
    here, as kind ``test``, counted by ``meter`` against its guild's spend limits (the case's
    guild and persona: `_Executor.meter`). Returns the completion; a model's failure is its
    ``error`` and a limit's refusal its ``refusal`` (no model asked), never raised."""
    return await runner.complete_turn(
        models=models,
        render=render,
        persona_name=persona_name,
        toolbox=toolbox,
        kind=CallKind.TEST,
        meter=meter,
    )


async def persona_test_run_execute(
    *,
    run_id: int,
    runner: AttemptRunner,
    embeddings: Callable[[], EmbeddingModel],
    judge_model: str = "",
    concurrency: int = 8,
    now: dt.datetime | None = None,
    token_counter: TokenCounter | None = None,
    spend: Spend | None = None,
) -> PersonaTestRun | None:
    """Run the queued run ``run_id`` to its end (steps in the module docstring) and return
    it; None when there is no such run, or it is not queued (already taken).

    ``runner`` asks the models; ``embeddings`` gives the embedding model for
    ``similar_to_baseline`` (asked only when a case has that check); ``judge_model`` answers
    the rubrics (empty: each case's persona's model); at most ``concurrency`` model calls are
    in flight at once. A case whose model fails records the error and the run goes on.
    ``spend`` counts every call as kind ``test`` against its guild's limits (None: uncounted);
    a call a limit refuses is that case's error.
    """
    run = await PersonaTestRun.objects.filter(pk=run_id).afirst()
    if run is None or run.status != PersonaTestRun.Status.QUEUED:
        return None
    started = now or timezone.now()
    await sync_to_async(_run_moves)(run, PersonaTestRun.Status.RUNNING, started_at=started)
    try:
        units = await sync_to_async(_run_units)(run, started, token_counter)
    except _RunCannotGoOn as problem:
        await sync_to_async(_run_moves)(
            run, PersonaTestRun.Status.FAILED, error=str(problem), finished_at=timezone.now()
        )
        return run
    gate = asyncio.Semaphore(max(1, concurrency))
    executor = _Executor(
        run=run,
        runner=runner,
        embeddings=embeddings,
        judge_model=judge_model,
        gate=gate,
        spend=spend,
    )
    try:
        await asyncio.gather(*(executor.unit(unit) for unit in units))
    except Exception as error:  # the database went away, a bug: the run ends, saying why
        logger.exception("persona test run %s stopped", run.pk)
        await sync_to_async(_run_moves)(
            run,
            PersonaTestRun.Status.FAILED,
            error=f"the run stopped: {type(error).__name__}: {error}",
            finished_at=timezone.now(),
        )
        return run
    await sync_to_async(_run_moves)(run, PersonaTestRun.Status.FINISHED, finished_at=timezone.now())
    return run


class _RunCannotGoOn(Exception):
    """The run as a whole cannot be run (its personas or guild are gone)."""


@dataclass(frozen=True)
class _Unit:
    """One case against one target: its turn and the run's view of them."""

    index: int
    case: RunCase
    target: Target
    turn: CaseTurn
    site: SpendSite
    """Who pays for the unit's calls: its case's guild and persona."""


def _run_units(
    run: PersonaTestRun, now: dt.datetime, token_counter: TokenCounter | None
) -> list[_Unit]:
    """Every (case, target) of the run with the turn its case makes, read once: the personas
    the cases name, their guilds' casts, the draft. Raises `_RunCannotGoOn`."""
    cases = [RunCase.from_json(data) for data in run.cases]
    personas = {
        p.pk: p
        for p in Persona.objects.filter(pk__in={c.persona_id for c in cases}).select_related(
            "guild"
        )
    }
    missing = sorted({c.persona_name for c in cases if c.persona_id not in personas})
    if missing:
        raise _RunCannotGoOn(f"the persona is gone: {', '.join(missing)}")
    casts: dict[int, list[Persona]] = {}
    for persona in personas.values():
        if persona.guild.pk not in casts:
            casts[persona.guild.pk] = guild_cast(guild=persona.guild)
    draft = run.draft or {}
    draft_spec = None
    if draft:
        spec = parse_config_row("personas", draft["row"])
        assert isinstance(spec, PersonaSpec)
        draft_spec = spec
    counter = token_counter or default_token_counter()
    units = []
    for index, case in enumerate(cases):
        saved = personas[case.persona_id]
        guild: GuildConfig = saved.guild
        for target_data in run.targets:
            target = Target.from_json(target_data)
            persona = saved
            stands_in = draft_spec is not None and saved.pk in draft.get("for", [])
            if target.key == TargetKey.DRAFT and draft_spec is not None and stands_in:
                persona = persona_draft(persona=saved, spec=draft_spec)
            if target.model:
                persona = persona_variant(
                    persona=persona, llm_model=target.model, fallback_models=[]
                )
            turn = case_turn(
                case=case.spec,
                guild=guild,
                personas=casts[guild.pk],
                persona=persona,
                now=now,
                token_counter=counter,
            )
            site = guild_site(guild=guild, persona=saved)
            units.append(_Unit(index=index, case=case, target=target, turn=turn, site=site))
    return units


@dataclass
class _Executor:
    run: PersonaTestRun
    runner: AttemptRunner
    embeddings: Callable[[], EmbeddingModel]
    judge_model: str
    gate: asyncio.Semaphore
    spend: Spend | None = None

    def meter(self, unit: _Unit) -> CallMeter:
        """What counts one call of ``unit`` (its case's guild and persona pay; nobody's
        message caused it); nothing counts without a `Spend`."""
        return self.spend.meter(unit.site) if self.spend is not None else UNMETERED

    async def unit(self, unit: _Unit) -> None:
        """Prepare the case's request for the target, then make the run's repeats of it."""
        try:
            prepared = await case_prepare(turn=unit.turn)
        except Exception as error:  # a case that cannot be built is that case's error
            logger.exception("persona test case %r could not be prepared", unit.case.spec.name)
            for repeat in range(self.run.repeat):
                await sync_to_async(self._save)(
                    unit, repeat, None, None, [], error=f"{type(error).__name__}: {error}"
                )
            return
        await asyncio.gather(*(self.call(unit, prepared, r) for r in range(self.run.repeat)))

    async def call(self, unit: _Unit, prepared: PreparedTurn, repeat: int) -> None:
        """One call of the case: the reply, then its checks; saved as one result."""
        tools = _ToolsAnswered()
        async with self.gate:
            completion = await persona_test_model_call(
                runner=self.runner,
                meter=self.meter(unit),
                models=prepared.models,
                render=prepared.render,
                persona_name=prepared.request.persona.name,
                toolbox=case_toolbox(prepared=prepared, kept=tools),
            )
        checks: list[CheckResult] = []
        usage = completion.usage
        calls = 1
        error = str(completion.error) if completion.error is not None else ""
        if completion.refusal is not None:
            error, calls = f"no model was asked: {completion.refusal.reason}", 0
        elif completion.error is None:
            checks, judge_usage, judge_calls = await self.checks(unit, prepared, completion)
            usage, calls = usage + judge_usage, calls + judge_calls
        await sync_to_async(self._save)(
            unit,
            repeat,
            prepared,
            completion,
            checks,
            error=error,
            tool_calls=tools.calls,
            usage=usage,
            calls=calls,
        )

    async def checks(
        self, unit: _Unit, prepared: PreparedTurn, completion: TurnCompletion
    ) -> tuple[list[CheckResult], Usage, int]:
        """Every expectation of the case against the reply, in the schema's order; the
        judge's usage and call count."""
        expect = unit.case.spec.expect
        reply = completion.reply_text
        results = text_checks(
            reply,
            contains=expect.contains,
            not_contains=expect.not_contains,
            matches=expect.matches,
            max_chars=expect.max_chars,
        )
        usage, calls = Usage(), 0
        if expect.judge is not None:
            judged, usage = await self.judge(unit, prepared, expect.judge, reply)
            results.append(judged)
            calls = 1
        if expect.similar_to_baseline is not None and unit.case.spec.baseline is not None:
            results.append(
                await self.similarity(
                    expect.similar_to_baseline, unit.case.spec.baseline.reply, reply
                )
            )
        return results, usage, calls

    async def judge(
        self, unit: _Unit, prepared: PreparedTurn, rubric: str, reply: str
    ) -> tuple[CheckResult, Usage]:
        """The judge's verdict on ``reply`` (``JUDGE_MODEL``, else the persona's model)."""
        name = self.judge_model or prepared.models[0].name
        messages = judge_messages(
            rubric=rubric,
            persona_name=prepared.request.persona.name,
            conversation=unit.turn.conversation,
            reply=reply,
        )
        model = ModelSpec(name, temperature=0.0, max_output_tokens=JUDGE_MAX_OUTPUT_TOKENS)
        async with self.gate:
            completion = await persona_test_model_call(
                runner=self.runner,
                meter=self.meter(unit),
                models=(model,),
                render=lambda plan: messages,
                persona_name="judge",
            )
        if completion.refusal is not None:
            refused = f"the judge was not asked: {completion.refusal.reason}"
            return CheckResult(CheckKind.JUDGE, rubric, None, refused), completion.usage
        if completion.error is not None:
            failed = CheckResult(
                CheckKind.JUDGE, rubric, None, f"the judge model failed: {completion.error}"
            )
            return failed, completion.usage
        return judge_check(rubric, judge_verdict(completion.reply_text)), completion.usage

    async def similarity(self, threshold: float, baseline: str, reply: str) -> CheckResult:
        """``similar_to_baseline``: the cosine of the two replies' embeddings."""
        try:
            model = self.embeddings()
            vectors = await sync_to_async(model.embed, thread_sensitive=False)([baseline, reply])
        except EmbeddingError as error:
            return CheckResult(
                CheckKind.SIMILAR_TO_BASELINE,
                f"{threshold:g}",
                None,
                f"the embedding model failed: {error}",
            )
        return similarity_check(threshold, cosine(vectors[0].tolist(), vectors[1].tolist()))

    def _save(
        self,
        unit: _Unit,
        repeat: int,
        prepared: PreparedTurn | None,
        completion: TurnCompletion | None,
        checks: list[CheckResult],
        *,
        error: str = "",
        tool_calls: Sequence[dict[str, Any]] = (),
        usage: Usage | None = None,
        calls: int = 0,
    ) -> None:
        """Record one call and count it on the run (progress, calls, tokens)."""
        record: dict[str, Any] = {}
        if prepared is not None:
            record = prepared_record(prepared=prepared)
            if completion is not None and completion.request:
                record["request"] = completion.request  # the final attempt's, as a turn keeps
        passed = None if error else all(check.passed is True for check in checks)
        usage = usage or Usage()
        with transaction.atomic():
            PersonaTestResult.objects.create(
                run=self.run,
                case_id=unit.case.case_id
                if unit.case.case_id is not None
                and PersonaTestCase.objects.filter(pk=unit.case.case_id).exists()
                else None,
                case_name=unit.case.spec.name,
                persona_name=unit.turn.request.persona.name,
                target=unit.target.key,
                repeat_index=repeat,
                reply=completion.reply_text if completion else "",
                error=error,
                passed=passed,
                checks=[check.as_json() for check in checks],
                tool_calls=list(tool_calls),
                prompt_record=record,
                prompt_tokens=completion.usage.prompt_tokens if completion else None,
                completion_tokens=completion.usage.completion_tokens if completion else None,
                cached_prompt_tokens=completion.usage.cached_prompt_tokens if completion else None,
                llm_ms=completion.llm_ms if completion else None,
            )
            PersonaTestRun.objects.filter(pk=self.run.pk).update(
                done=F("done") + 1,
                calls=F("calls") + calls,
                prompt_tokens=F("prompt_tokens") + (usage.prompt_tokens or 0),
                completion_tokens=F("completion_tokens") + (usage.completion_tokens or 0),
                cached_prompt_tokens=F("cached_prompt_tokens") + (usage.cached_prompt_tokens or 0),
            )


def prepared_record(*, prepared: PreparedTurn) -> dict[str, Any]:
    """What a result keeps of its prepared request, in the prompt preview's JSON shape
    (DESIGN §3: ``request``, ``items``, ``tokens``, ``cache_prefix_end``, ``tools``, with the
    truncation and the lorebook entries that fired), so the preview's page shows it."""
    context = prepared.context
    by_tag: dict[str, int] = {}
    for item in context.items:
        by_tag[str(item.tag)] = by_tag.get(str(item.tag), 0) + item.tokens
    model = prepared.turn_input.persona.model
    return {
        "request": prepared.body,
        "items": [
            {"index": index, **item}
            for index, item in enumerate(context_items_json(items=context.items))
        ],
        "tokens": {
            "total": context.total_tokens,
            "budget": context_budget(model.context_window, model.max_output_tokens),
            "by_tag": by_tag,
            "counter": context.token_counter,
        },
        "cache_prefix_end": context.cacheable_prefix_end,
        "tools": list(context.tools),
        "truncation": {
            "batches": context.truncation.batches,
            "removed_entries": context.truncation.removed_entries,
            "removed_message_ids": [str(i) for i in context.truncation.removed_message_ids],
            "warning": context.truncation.warning,
        },
        "recalled": [],
        "lorebook": lore_labels(record=context.lore.as_record()),
    }


# --- Tools, answered without effect -------------------------------------------------------------


@dataclass
class _ToolsAnswered:
    """The tool calls a test's model made, answered as the tools would answer and never run:
    no memory is written, nothing is sent."""

    calls: list[dict[str, Any]] = field(default_factory=list)


class _NoMemoryWritten:
    """``update_short_term_memory`` and ``remember`` in a test: the call is kept on the
    result and answered as a success; nothing is stored."""

    def __init__(self, kept: _ToolsAnswered) -> None:
        self._kept = kept

    async def write(self, *, summary: str, categories: Mapping[str, str]) -> None:
        self._kept.calls.append(
            {"tool": "update_short_term_memory", "summary": summary, "categories": dict(categories)}
        )

    async def remember(self, *, scope: str, fact: str, ref: str) -> str:
        self._kept.calls.append({"tool": "remember", "scope": scope, "fact": fact, "ref": ref})
        return "added"


class _NoFiles:
    async def read(self, attachment: ToolAttachment, *, max_bytes: int) -> bytes:
        raise ToolError("a persona test case has no files")


def case_toolbox(*, prepared: PreparedTurn, kept: _ToolsAnswered) -> ToolBox:
    """The tools the prepared turn offers (the same definitions, so the request is the real
    turn's), answered without effect: memory writes kept on the result, never stored."""
    writer = _NoMemoryWritten(kept)
    toolbox = ToolBox(
        allowlist=prepared.context.tools,
        attachments={},
        attachment_reader=_NoFiles(),
        message_metadata=MetadataLookup(
            prepared.context.message_ids, {m.id: m for m in prepared.turn_input.history}
        ),
        short_term_memory=writer,
        long_term_memory=writer if prepared.request.configuration.guild_id is not None else None,
    )
    if toolbox.offered != prepared.toolbox.offered:
        raise RuntimeError(
            f"a test offers {toolbox.offered}, its turn {prepared.toolbox.offered}: "
            "the tools a test answers must be the turn's"
        )
    return toolbox


# --- Reading results --------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSummary:
    """A finished run in numbers: calls that passed every check, failed one, or errored."""

    passed: int
    failed: int
    errors: int


def run_summary(*, results: Sequence[PersonaTestResult]) -> RunSummary:
    return RunSummary(
        passed=sum(r.passed is True for r in results),
        failed=sum(r.passed is False for r in results),
        errors=sum(r.passed is None for r in results),
    )


def result_checks(*, result: PersonaTestResult) -> list[CheckResult]:
    return [CheckResult.from_json(data) for data in result.checks]


__all__ = [
    "REPEAT_MAX",
    "RunCase",
    "Target",
    "TargetKey",
    "TestRunRefused",
    "persona_test_model_call",
    "persona_test_run_create",
    "persona_test_run_execute",
    "persona_test_run_refused",
    "run_cases_of",
    "targets_for",
]
