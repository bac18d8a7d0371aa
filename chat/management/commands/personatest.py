"""`manage.py personatest FILE.json`: run a file of persona test cases, one line per case and
check, JUnit XML with ``--junit``, exit status 1 when a check fails or a case errs."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.models import PersonaTestRun
from chat.services.persona_test_report import (
    Verdict,
    junit_xml,
    outcome_lines,
    outcomes_summary,
    run_outcomes,
)
from chat.services.persona_test_runs import (
    REPEAT_MAX,
    RunCase,
    Target,
    TargetKey,
    TestRunRefused,
    persona_test_run_create,
)
from chat.tasks import persona_test_run_now
from personas.case_schema import parse_case_file
from personas.case_services import cases_resolve
from personas.config_schema import (
    CONFIG_FILE_MAX_BYTES,
    ConfigError,
    PersonaSpec,
    decode_json_file,
    parse_config_row,
)

BAD_INPUT = 2
"""The exit status when the files are refused (nothing was run)."""


class Command(BaseCommand):
    help = (
        "Run a file of persona test cases (docs/persona-tests.md): each case's request is built "
        "as a dry-run turn over its history, the model is asked, every expectation is checked. "
        "One line per case and check; exit status 0 when every check held, 1 when one did not "
        "or a case's model failed, 2 when a file is refused."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("file", help='the test file: {"version": 1, "cases": [...]}')
        parser.add_argument(
            "--persona-file",
            metavar="DRAFT.json",
            help="one persona object in the configuration file's format, standing in for the "
            "saved persona of that name",
        )
        parser.add_argument("--model", default="", help="ask this model instead of the persona's")
        parser.add_argument(
            "--repeat",
            type=int,
            default=1,
            help=f"call the model N times per case (1 to {REPEAT_MAX}) and say how often each "
            "check held",
        )
        parser.add_argument("--junit", metavar="PATH", help="also write JUnit XML here")

    def handle(self, *args: object, **options: object) -> None:
        run = self._run_create(options)
        asyncio.run(persona_test_run_now(run.pk))
        run.refresh_from_db()
        if run.status == PersonaTestRun.Status.FAILED:
            raise CommandError(f"the run could not go on: {run.error}", returncode=1)
        outcomes = run_outcomes(run=run, results=list(run.results.all()))
        for line in outcome_lines(outcomes=outcomes, several_targets=False):
            self.stdout.write(line)
        self.stdout.write("\n" + outcomes_summary(run=run, outcomes=outcomes))
        if options["junit"]:
            Path(str(options["junit"])).write_text(
                junit_xml(run=run, outcomes=outcomes), encoding="utf-8"
            )
        self.stdout.flush()
        if any(outcome.verdict != Verdict.PASS for outcome in outcomes):
            sys.exit(1)

    def _run_create(self, options: dict[str, object]) -> PersonaTestRun:
        """Read and check the files, then record the run (nothing is recorded for a refused
        file). Raises CommandError (exit status 2) naming the file and the JSON path."""
        path = str(options["file"])
        document = _checked(path, lambda: parse_case_file(_read(path)))
        personas = _checked(path, lambda: cases_resolve(document=document))
        draft_row, draft_for = None, []
        if options["persona_file"]:
            draft_path = str(options["persona_file"])
            draft_row = _checked(draft_path, lambda: _read(draft_path))
            spec = _checked(draft_path, lambda: parse_config_row("personas", draft_row))
            assert isinstance(spec, PersonaSpec)
            draft_for = sorted(
                {p.pk for p in personas if p.name.casefold() == spec.name.casefold()}
            )
            if not draft_for:
                raise CommandError(
                    f"{draft_path}: name: no case of {path} is of a persona named {spec.name!r}",
                    returncode=BAD_INPUT,
                )
        model = str(options["model"] or "")
        target = Target(
            TargetKey.DRAFT
            if draft_row is not None
            else TargetKey.MODEL
            if model
            else TargetKey.SAVED,
            "draft" if draft_row is not None else f"on {model}" if model else "saved",
            model=model,
        )
        cases = [
            RunCase(
                spec=case,
                persona_id=persona.pk,
                persona_name=persona.name,
                guild_id=persona.guild.guild_id,
            )
            for case, persona in zip(document.cases, personas, strict=True)
        ]
        ones = {persona.pk: persona for persona in personas}
        try:
            return persona_test_run_create(
                persona=next(iter(ones.values())) if len(ones) == 1 else None,
                cases=cases,
                targets=[target],
                repeat=int(str(options["repeat"])),
                draft=draft_row if isinstance(draft_row, dict) else None,
                draft_for=draft_for,
                origin=PersonaTestRun.Origin.COMMAND,
                requested_by="manage.py personatest",
            )
        except TestRunRefused as problem:
            raise CommandError(str(problem), returncode=BAD_INPUT) from None


def _read(path: str) -> object:
    """A JSON file's value; raises ConfigError for a file that cannot be read or is not
    JSON."""
    try:
        raw = Path(path).read_bytes()
    except OSError as error:
        raise ConfigError([("(document)", f"cannot be read: {error.strerror}")]) from None
    return decode_json_file(raw, max_bytes=CONFIG_FILE_MAX_BYTES)


T = TypeVar("T")


def _checked(path: str, check: Callable[[], T]) -> T:
    """``check()``'s value; its ConfigError becomes a CommandError listing each problem as
    ``FILE: json.path: message`` (exit status 2)."""
    try:
        return check()
    except ConfigError as error:
        lines = "\n".join(f"  {path}: {line}" for line in error.lines())
        raise CommandError(
            f"{path} was refused (nothing was run):\n{lines}", returncode=BAD_INPUT
        ) from None
