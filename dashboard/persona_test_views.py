"""Persona tests on the dashboard (DESIGN §3b, "Persona tests"; docs/persona-tests.md).

- the persona's **Tests** page: its cases (written by hand, saved from turns, imported from a
  test file; exported the same way), the form that starts a run, and its earlier runs;
- a **case**'s page: edit or delete it;
- **starting a run**: against the saved persona, another model, or (from the persona's own
  page, its form posted here) the form's unsaved values; the run goes to Celery
  (``persona_test_run_task``) after the commit;
- a **run**'s page: a progress bar while it runs (the page polls its own body), then each
  case's replies side by side (the baseline, then each target) with a word diff, every check's
  verdict over the repeats with the judge's reason, a link to each request, and the run's
  tokens; ``?compare=<run>`` sets an earlier run's replies beside;
- a **result's request**: the prompt preview's page sections for that request;
- **Save as test case** on a turn's page.

A guild's sets are its admins' only: a persona, case, run or result is found through the guild
and persona of its URL (`_persona`, through `dashboard.access.guild_access`), so one of a guild
the person has no right in answers 404 and a moderator of the guild gets 403.
"""

from __future__ import annotations

import json
from typing import Any

from asgiref.sync import async_to_sync
from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from chat.models import PersonaTestRun
from chat.pipeline.persona_checks import DiffKind, word_diff
from chat.services.persona_test_report import CaseOutcome, run_outcomes
from chat.services.persona_test_runs import (
    REPEAT_MAX,
    TestRunRefused,
    persona_test_run_create,
    run_cases_of,
    run_summary,
    targets_for,
)
from chat.services.persona_tests import case_from_turn, mentioned_user_ids
from chat.tasks import persona_test_run_task
from dashboard import selectors
from dashboard.access import guild_access, require_change, turn_access, viewer_required
from dashboard.form_posts import form_status
from dashboard.forms import PersonaForm
from dashboard.live_views import preview_data_context
from dashboard.names import NameBook
from dashboard.persona_test_forms import CaseForm, TestFileForm
from dashboard.preview import DiscordUnavailable, PreviewError, preview_prepare
from dashboard.views import persona_page
from personas.case_schema import parse_case_file
from personas.case_services import persona_case_delete, persona_case_save, persona_cases_import
from personas.config_schema import CONFIG_FILE_MAX_BYTES, ConfigError, decode_json_file
from personas.models import Persona
from personas.selectors import persona_cases_file

RUNS_SHOWN = 20


def _persona(request: HttpRequest, guild_id: int, persona_id: int) -> Persona:
    """The persona of the URL, in the URL's guild, which the person may change; 404 for a
    guild they have no right in or a persona not of it, 403 for a moderator (the one lookup
    every view of a persona's tests goes through)."""
    guild = guild_access(request, guild_id, change=True)
    return get_object_or_404(selectors.guild_personas_listed(guild=guild), pk=persona_id)


def _tests_url(persona: Persona) -> str:
    return reverse("dashboard:persona_tests", args=[persona.guild.guild_id, persona.pk])


# --- The Tests page and cases ---------------------------------------------------------------------


@require_http_methods(["GET", "POST"])
@viewer_required
def persona_tests(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    """The persona's test set and runs; a POST adds a case written by hand."""
    persona = _persona(request, guild_id, persona_id)
    form = CaseForm()
    if request.method == "POST":
        form = CaseForm(request.POST)
        if form.is_valid() and form.spec is not None:
            try:
                case = persona_case_save(persona=persona, spec=form.spec, actor=request.user)
            except ConfigError as error:
                form.add_problems(error.problems)
            else:
                messages.success(request, f"Added the case “{case.name}”.")
                return redirect(_tests_url(persona))
    return _tests_page(request, persona, form=form)


def _tests_page(
    request: HttpRequest,
    persona: Persona,
    *,
    form: CaseForm | None = None,
    file_form: TestFileForm | None = None,
    problems: list[str] | None = None,
    run_problem: str = "",
) -> HttpResponse:
    status = form_status(form) if form is not None else 200
    if problems or run_problem or (file_form is not None and file_form.errors):
        status = 400
    context = {
        "guild": persona.guild,
        "persona": persona,
        "cases": persona.test_cases.order_by("name"),
        "runs": persona.test_runs.all()[:RUNS_SHOWN],
        "form": form or CaseForm(),
        "file_form": file_form or TestFileForm(),
        "problems": problems or [],
        "run_problem": run_problem,
        "repeat_max": REPEAT_MAX,
        "section": "personas",
    }
    return render(request, "dashboard/persona_tests.html", context, status=status)


@require_http_methods(["GET", "POST"])
@viewer_required
def persona_test_case(
    request: HttpRequest, guild_id: int, persona_id: int, case_id: int
) -> HttpResponse:
    """One case: its form (keys it does not show kept as they are) and what it was saved
    with (a baseline, memories, notes)."""
    persona = _persona(request, guild_id, persona_id)
    case = get_object_or_404(persona.test_cases, pk=case_id)
    form = CaseForm(stored=case.spec)
    if request.method == "POST":
        form = CaseForm(request.POST, stored=case.spec)
        if form.is_valid() and form.spec is not None:
            try:
                persona_case_save(persona=persona, spec=form.spec, case=case, actor=request.user)
            except ConfigError as error:
                form.add_problems(error.problems)
            else:
                messages.success(request, f"Saved the case “{form.spec.name}”.")
                return redirect(_tests_url(persona))
    context = {
        "guild": persona.guild,
        "persona": persona,
        "case": case,
        "form": form,
        "case_json": json.dumps(case.spec, indent=2, ensure_ascii=False),
        "section": "personas",
    }
    return render(request, "dashboard/persona_test_case.html", context, status=form_status(form))


@require_POST
@viewer_required
def persona_test_case_delete(
    request: HttpRequest, guild_id: int, persona_id: int, case_id: int
) -> HttpResponse:
    persona = _persona(request, guild_id, persona_id)
    case = get_object_or_404(persona.test_cases, pk=case_id)
    persona_case_delete(case=case, actor=request.user)
    messages.success(request, f"Deleted the case “{case.name}”.")
    return redirect(_tests_url(persona))


@require_POST
@viewer_required
def persona_tests_import(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    """Import a test file into the guild's sets: every case checked and its persona found
    first (a case of another guild is refused as one of no guild), then all written or none."""
    persona = _persona(request, guild_id, persona_id)
    file_form = TestFileForm(request.POST, request.FILES)
    if not file_form.is_valid():
        return _tests_page(request, persona, file_form=file_form)
    upload = file_form.cleaned_data["file"]
    try:
        document = parse_case_file(decode_json_file(upload.read(CONFIG_FILE_MAX_BYTES + 1)))
        report = persona_cases_import(
            document=document, guild_ids=[persona.guild.guild_id], actor=request.user
        )
    except ConfigError as error:
        problems = [f"{upload.name}: {line}" for line in error.lines()]
        return _tests_page(request, persona, file_form=file_form, problems=problems)
    messages.success(request, f"Imported {upload.name}: {report.summary()}")
    return redirect(_tests_url(persona))


@require_GET
@viewer_required
def persona_tests_export(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    """The persona's cases as a test file (what the import and ``personatest`` read)."""
    persona = _persona(request, guild_id, persona_id)
    body = json.dumps(persona_cases_file(personas=[persona]), indent=2, ensure_ascii=False)
    response = HttpResponse(body, content_type="application/json")
    response["Content-Disposition"] = content_disposition_header(True, f"{persona.name}-tests.json")
    return response


# --- Runs -----------------------------------------------------------------------------------------


@require_POST
@viewer_required
def persona_tests_run(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    """Start a run of the persona's set. From the Tests page: against the saved persona
    (``saved``) and/or another model (``model``), ``repeat`` times. From the persona's page
    (``draft``): its form's unsaved values, checked as a save would check them (a refused
    field is shown on the persona's page, nothing run), and with ``saved`` the saved persona
    beside them."""
    persona = _persona(request, guild_id, persona_id)
    draft = request.POST.get("draft") == "1"
    draft_row = None
    if draft:
        form = PersonaForm(request.POST, instance=persona)
        if not form.is_valid():
            return persona_page(request, persona.guild, persona, form)
        draft_row = form.to_row(form.cleaned_data)
    try:
        repeat = int(request.POST.get("repeat", "1") or "1")
        targets = targets_for(
            saved=request.POST.get("saved") in ("on", "1"),
            draft=draft,
            model=request.POST.get("model", "").strip(),
        )
        cases = run_cases_of(cases=list(persona.test_cases.select_related("persona__guild")))
        with transaction.atomic():
            run = persona_test_run_create(
                cases=cases,
                targets=targets,
                repeat=repeat,
                draft=draft_row,
                draft_for=[persona.pk] if draft_row is not None else [],
                persona=persona,
                requested_by=request.user.get_username(),
            )
            transaction.on_commit(lambda: persona_test_run_task.delay(run.pk))
    except ValueError:
        return _tests_page(request, persona, run_problem="Repeat: give a whole number.")
    except (TestRunRefused, ConfigError) as problem:
        return _tests_page(request, persona, run_problem=str(problem))
    return redirect(_run_url(run))


def _run_url(run: PersonaTestRun) -> str:
    assert run.persona is not None
    return reverse(
        "dashboard:persona_test_run", args=[run.persona.guild.guild_id, run.persona.pk, run.pk]
    )


def _run_of(persona: Persona, run_id: int) -> PersonaTestRun:
    return get_object_or_404(persona.test_runs.select_related("persona"), pk=run_id)


@require_GET
@viewer_required
def persona_test_run(
    request: HttpRequest, guild_id: int, persona_id: int, run_id: int
) -> HttpResponse:
    """A run: its progress while it runs, its results once done; ``?compare=<run id>`` (an
    earlier run of the persona) sets that run's replies beside. htmx asks for the body alone
    (the progress bar's poll)."""
    persona = _persona(request, guild_id, persona_id)
    run = _run_of(persona, run_id)
    compare = None
    compare_raw = request.GET.get("compare", "").strip()
    if compare_raw.isdigit():
        compare = _run_of(persona, int(compare_raw))
    context = {
        "guild": persona.guild,
        "persona": persona,
        "run": run,
        "section": "personas",
        "earlier": persona.test_runs.exclude(pk=run.pk)[:RUNS_SHOWN],
        "compare": compare,
        **_run_body(run, compare),
    }
    if getattr(request, "htmx", False):
        return render(request, "dashboard/_test_run_body.html", context)
    return render(request, "dashboard/persona_test_run.html", context)


def _run_body(run: PersonaTestRun, compare: PersonaTestRun | None) -> dict[str, Any]:
    """What the run's body shows: its cases' outcomes side by side (when it is done)."""
    if run.status in (PersonaTestRun.Status.QUEUED, PersonaTestRun.Status.RUNNING):
        return {"running": True, "cases": []}
    results = list(run.results.all())
    outcomes = run_outcomes(run=run, results=results)
    earlier = (
        run_outcomes(run=compare, results=list(compare.results.all()))
        if compare is not None
        else []
    )
    return {
        "running": False,
        "summary": run_summary(results=results),
        "cases": _case_rows(run, outcomes, earlier),
    }


def _case_rows(
    run: PersonaTestRun, outcomes: list[CaseOutcome], earlier: list[CaseOutcome]
) -> list[dict[str, Any]]:
    """One row per case: its columns (the baseline, each target, the compared run's), each
    reply with its word diff against the first column (its new words marked, the words of the
    first it lost listed under it), and each target's checks."""
    rows = []
    for data in run.cases:
        case = data["case"]
        mine = [o for o in outcomes if o.case_name == case["name"]]
        theirs = [o for o in earlier if o.case_name == case["name"]]
        columns: list[dict[str, Any]] = []
        baseline = (case.get("baseline") or {}).get("reply")
        if baseline:
            columns.append({"title": "Baseline (recorded)", "reply": baseline, "outcome": None})
        labels = {t["key"]: t["label"] for t in run.targets}
        for outcome in mine:
            first = outcome.results[0]
            columns.append(
                {
                    "title": labels.get(outcome.target, outcome.target),
                    "reply": first.reply,
                    "error": first.error,
                    "outcome": outcome,
                    "result": first,
                }
            )
        for outcome in theirs:
            columns.append(
                {
                    "title": f"Run {outcome.results[0].run_id}: {outcome.target}",
                    "reply": outcome.results[0].reply,
                    "error": outcome.results[0].error,
                    "outcome": None,
                    "result": outcome.results[0],
                }
            )
        old = columns[0]["reply"] if columns else ""
        for index, column in enumerate(columns):
            pieces = word_diff(old, column["reply"] or "") if index else []
            column["diff"] = [{"kind": str(p.kind), "text": p.text} for p in pieces]
            column["changed"] = any(p.kind is not DiffKind.SAME for p in pieces)
            column["removed"] = [
                p.text.strip() for p in pieces if p.kind is DiffKind.REMOVED and p.text.strip()
            ]
        rows.append(
            {
                "name": case["name"],
                "conversation": [*case.get("history", []), case["message"]],
                "columns": columns,
                "outcomes": mine,
            }
        )
    return rows


@require_GET
@viewer_required
def persona_test_result_request(
    request: HttpRequest, guild_id: int, persona_id: int, run_id: int, result_id: int
) -> HttpResponse:
    """A result's request, shown by the prompt preview's own sections (tokens by section,
    the items with the cacheable prefix, the exact body)."""
    persona = _persona(request, guild_id, persona_id)
    run = _run_of(persona, run_id)
    result = get_object_or_404(run.results, pk=result_id)
    if not result.prompt_record:
        raise Http404("this call has no request: its case could not be prepared")
    context = {
        "guild": persona.guild,
        "persona": persona,
        "run": run,
        "result": result,
        "section": "personas",
        **preview_data_context(result.prompt_record),
    }
    return render(request, "dashboard/persona_test_request.html", context)


# --- Save as test case (the turn page) ------------------------------------------------------------


@require_POST
@viewer_required
def turn_save_case(request: HttpRequest, turn_id: int) -> HttpResponse:
    """Freeze a turn as a case of its persona: its window read again from Discord as the
    history, its trigger, notes, recalled memories and lorebook entries, its reply as the
    baseline (`chat.services.persona_tests.case_from_turn`); then the case's page."""
    turn = turn_access(request, turn_id)
    back = redirect("dashboard:turn", turn_id=turn.pk)
    persona = selectors.persona_with_guild(persona_id=turn.persona_id)
    require_change(request, turn.guild_id or (persona.guild.guild_id if persona else None))
    if persona is None or persona.guild.guild_id != turn.guild_id:
        messages.error(request, "Save as test case: this turn's persona is gone.")
        return back
    if turn.trigger_message_id is None:
        messages.error(request, "Save as test case: this turn answered no message.")
        return back
    name = request.POST.get("name", "").strip() or f"turn {turn.pk}"
    window_ids = frozenset(int(i) for i in (turn.window or {}).get("message_ids") or []) or None
    try:
        result = async_to_sync(preview_prepare)(
            channel_id=turn.channel_id,
            persona_name=turn.persona_name,
            trigger_message_id=turn.trigger_message_id,
            window_message_ids=window_ids,
            now=timezone.now(),
        )
        mentioned = mentioned_user_ids(prepared=result.prepared)
        book = NameBook()
        book.prefetch_users(mentioned)
        known = {i: shown.text for i in mentioned if (shown := book.user(i)).known}
        frozen = case_from_turn(turn=turn, prepared=result.prepared, name=name, known_names=known)
        case = persona_case_save(
            persona=persona,
            spec=frozen.spec,
            author_ids=frozen.author_ids,
            source_turn_id=turn.pk,
            actor=request.user,
        )
    except (PreviewError, DiscordUnavailable) as problem:
        messages.error(request, f"Save as test case: {problem}")
        return back
    except ConfigError as error:
        messages.error(request, "Save as test case: " + "; ".join(error.lines()))
        return back
    kept = f" ({frozen.left_out} messages of the window left out)" if frozen.left_out else ""
    messages.success(request, f"Saved as a test case of {persona.name}: “{case.name}”{kept}.")
    return redirect(
        "dashboard:persona_test_case",
        guild_id=persona.guild.guild_id,
        persona_id=persona.pk,
        case_id=case.pk,
    )
