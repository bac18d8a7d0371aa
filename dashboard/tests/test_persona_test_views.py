"""A persona's Tests page: cases written by hand and refused by field, imported whole or not at
all and exported, runs started (queued for Celery after the commit) against the saved persona,
another model or the persona form's unsaved values, and other guilds' sets answering 404."""

from __future__ import annotations

import io
import json

import pytest
from django.urls import reverse

from chat.models import PersonaTestRun
from chat.tasks import persona_test_run_task
from personas.models import GuildConfig, Persona
from personas.models_cases import PersonaTestCase
from personas.selectors import persona_cases_file

pytestmark = pytest.mark.django_db

CASE_FORM = {
    "name": "greets by name",
    "conversation": "alice: hi everyone\nbob: hey alice\nalice: tomori, do you remember me?",
    "contains": "alice",
    "not_contains": "As an AI\nlanguage model",
    "matches": "^[^\\n]{1,400}$",
    "max_chars": "400",
    "judge": "The reply stays in character as Tomori.",
    "similar_to_baseline": "",
}


@pytest.fixture
def tomori(guild) -> Persona:
    return Persona.objects.get(guild=guild, name="Tomori")


def page_url(persona: Persona, name: str = "persona_tests", **ids) -> str:
    return reverse(
        f"dashboard:{name}",
        kwargs={"guild_id": persona.guild.guild_id, "persona_id": persona.pk, **ids},
    )


def test_an_admin_writes_a_case_as_the_schema_has_it(admin_client, tomori):
    response = admin_client.post(page_url(tomori), CASE_FORM)

    assert response.status_code == 302
    case = PersonaTestCase.objects.get(persona=tomori)
    assert case.spec == {
        "name": "greets by name",
        "history": [
            {"author": "alice", "content": "hi everyone"},
            {"author": "bob", "content": "hey alice"},
        ],
        "message": {"author": "alice", "content": "tomori, do you remember me?"},
        "expect": {
            "contains": ["alice"],
            "not_contains": ["As an AI", "language model"],
            "matches": "^[^\\n]{1,400}$",
            "max_chars": 400,
            "judge": "The reply stays in character as Tomori.",
        },
    }
    page = admin_client.get(page_url(tomori)).content.decode()
    assert "greets by name" in page and "3 messages" in page


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"matches": "([a-z]"}, "matches", "is not a valid regular expression"),
        ({"judge": "   "}, "judge", "is empty"),
        ({"conversation": "alice hi"}, "conversation", "line 1 is not “author: what they said”"),
        (
            {"conversation": "\n".join(f"a: {n}" for n in range(102))},
            "conversation",
            "List should have at most 100 items",
        ),
        ({"similar_to_baseline": "0.8"}, "similar_to_baseline", "needs a baseline reply"),
        ({"max_chars": "0"}, "max_chars", "Input should be greater than or equal to 1"),
    ],
)
def test_a_bad_case_is_refused_on_its_field_and_nothing_is_saved(
    admin_client, tomori, change, field, message
):
    response = admin_client.post(page_url(tomori), {**CASE_FORM, **change})

    assert response.status_code == 400
    errors = response.context["form"].errors[field]
    assert any(message in error for error in errors), errors
    assert PersonaTestCase.objects.count() == 0


def test_editing_a_case_keeps_what_the_form_does_not_show(admin_client, tomori):
    spec = {
        "name": "saved",
        "history": [{"author": "alice", "content": "hi", "at": "2026-12-01T10:00:00Z"}],
        "message": {
            "author": "alice",
            "content": "tomori?",
            "at": "2026-12-01T10:01:00Z",
            "reply_to": 0,
        },
        "memories": ["About alice: alice likes tea"],
        "baseline": {"reply": "...hello."},
        "expect": {"contains": ["hello"]},
    }
    case = PersonaTestCase.objects.create(persona=tomori, name="saved", spec=spec)
    page = admin_client.get(page_url(tomori, "persona_test_case", case_id=case.pk))
    initial = page.context["form"].initial

    response = admin_client.post(
        page_url(tomori, "persona_test_case", case_id=case.pk),
        {
            **initial,
            "max_chars": "200",
            "max_chars_": "",
            "similar_to_baseline": "0.5",
            "contains": initial["contains"],
            "not_contains": "",
            "matches": "",
            "judge": "",
        },
    )

    assert response.status_code == 302, response.context["form"].errors
    case.refresh_from_db()
    assert case.spec == {
        **spec,
        "expect": {"contains": ["hello"], "max_chars": 200, "similar_to_baseline": 0.5},
    }


def _upload(data: object, name: str = "cases.json") -> io.BytesIO:
    upload = io.BytesIO(json.dumps(data).encode())
    upload.name = name
    return upload


def test_a_test_file_is_imported_whole_and_exported_back(admin_client, tomori):
    file_case = {
        "name": "greets",
        "guild": str(tomori.guild.guild_id),
        "persona": "Tomori",
        "message": {"author": "alice", "content": "tomori, hi"},
        "expect": {"contains": ["alice"]},
    }
    response = admin_client.post(
        page_url(tomori, "persona_tests_import"),
        {"file": _upload({"version": 1, "cases": [file_case]})},
    )
    assert response.status_code == 302
    export = admin_client.get(page_url(tomori, "persona_tests_export"))
    assert export["Content-Disposition"] == 'attachment; filename="Tomori-tests.json"'
    assert json.loads(export.content) == {"version": 1, "cases": [file_case]}
    assert json.loads(export.content) == persona_cases_file(personas=[tomori])


def test_a_refused_test_file_names_each_path_and_imports_nothing(admin_client, tomori):
    guild_id = str(tomori.guild.guild_id)
    good = {
        "name": "good",
        "guild": guild_id,
        "persona": "Tomori",
        "message": {"author": "a", "content": "b"},
    }
    bad = {**good, "name": "bad", "expect": {"matches": "("}}
    elsewhere = {**good, "name": "elsewhere", "guild": "1100000000000000999"}

    response = admin_client.post(
        page_url(tomori, "persona_tests_import"),
        {"file": _upload({"version": 1, "cases": [good, bad]})},
    )
    assert response.status_code == 400
    assert any(
        "cases.json: cases[1].expect.matches: is not a valid regular expression" in p
        for p in response.context["problems"]
    )

    # A guild this page's admin is not on is refused as if it did not exist.
    response = admin_client.post(
        page_url(tomori, "persona_tests_import"),
        {"file": _upload({"version": 1, "cases": [good, elsewhere]})},
    )
    assert response.status_code == 400
    assert response.context["problems"] == [
        "cases.json: cases[1].guild: no configured guild has the id 1100000000000000999"
    ]
    assert PersonaTestCase.objects.count() == 0


def test_a_run_is_queued_for_celery_after_the_commit(
    admin_client, tomori, django_capture_on_commit_callbacks, monkeypatch
):
    admin_client.post(page_url(tomori), CASE_FORM)

    with django_capture_on_commit_callbacks() as callbacks:
        response = admin_client.post(
            page_url(tomori, "persona_tests_run"), {"saved": "on", "model": "gpt-4o", "repeat": "3"}
        )

    run = PersonaTestRun.objects.get()
    assert response.status_code == 302 and response["Location"] == page_url(
        tomori, "persona_test_run", run_id=run.pk
    )
    assert run.status == PersonaTestRun.Status.QUEUED and run.repeat == 3 and run.total == 6
    assert [t["key"] for t in run.targets] == ["saved", "model"] and run.model == "gpt-4o"
    # After the commit, the run (and nothing else) is handed to Celery's broker. The broker is
    # stood in for here; a real worker runs it in the browser test.
    queued = []
    monkeypatch.setattr(persona_test_run_task, "delay", queued.append)
    [callback] = callbacks
    callback()
    assert queued == [run.pk]
    page = admin_client.get(page_url(tomori, "persona_test_run", run_id=run.pk)).content.decode()
    assert 'hx-trigger="every 1s"' in page and "0 of 6 calls" in page
    assert persona_test_run_task.name == "chat.tasks.persona_test_run_task"


@pytest.mark.parametrize(
    ("post", "problem"),
    [
        ({"repeat": "1"}, "choose what to run against"),
        ({"saved": "on", "repeat": "21"}, "repeat must be from 1 to 20, got 21"),
        ({"saved": "on", "repeat": "three"}, "Repeat: give a whole number."),
    ],
)
def test_a_run_asked_wrongly_is_refused_and_nothing_is_queued(admin_client, tomori, post, problem):
    admin_client.post(page_url(tomori), CASE_FORM)
    response = admin_client.post(page_url(tomori, "persona_tests_run"), post)
    assert response.status_code == 400 and response.context["run_problem"].startswith(problem)
    assert PersonaTestRun.objects.count() == 0


def test_a_set_without_cases_cannot_run(admin_client, tomori):
    response = admin_client.post(page_url(tomori, "persona_tests_run"), {"saved": "on"})
    assert (
        response.status_code == 400 and "there is no case to run" in response.context["run_problem"]
    )


def _persona_form(admin_client, persona: Persona) -> dict:
    """The persona page's form as the browser would post it."""
    form = admin_client.get(
        reverse("dashboard:persona", args=[persona.guild.guild_id, persona.pk])
    ).context["form"]
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name, field.initial)
        if isinstance(value, bool):
            if value:
                data[name] = "on"
        elif value is not None:
            data[name] = "\n".join(value) if isinstance(value, list) else value
    data["sample_role"] = [row["role"] for row in form.sample_rows]
    data["sample_content"] = [row["content"] for row in form.sample_rows]
    return data


def test_the_persona_forms_unsaved_values_run_as_a_draft_and_nothing_is_saved(admin_client, tomori):
    admin_client.post(page_url(tomori), CASE_FORM)
    form = _persona_form(admin_client, tomori)

    response = admin_client.post(
        page_url(tomori, "persona_tests_run"),
        {**form, "system_prompt": "You are Tomori. Answer in haiku.", "draft": "1", "saved": "on"},
    )

    run = PersonaTestRun.objects.get()
    assert response.status_code == 302
    assert [t["key"] for t in run.targets] == ["saved", "draft"]
    assert run.draft["row"]["system_prompt"] == "You are Tomori. Answer in haiku."
    assert run.draft["for"] == [tomori.pk]
    tomori.refresh_from_db()
    assert "haiku" not in tomori.system_prompt


def test_the_draft_the_saved_persona_and_another_model_run_at_once(admin_client, tomori):
    admin_client.post(page_url(tomori), CASE_FORM)
    form = _persona_form(admin_client, tomori)

    admin_client.post(
        page_url(tomori, "persona_tests_run"),
        {**form, "draft": "1", "saved": "on", "model": "gpt-4o", "repeat": "2"},
    )

    run = PersonaTestRun.objects.get()
    assert [t["key"] for t in run.targets] == ["saved", "draft", "model"]
    assert run.total == 6 and run.model == "gpt-4o"


def test_a_refused_draft_shows_the_persona_page_with_the_field_and_runs_nothing(
    admin_client, tomori
):
    admin_client.post(page_url(tomori), CASE_FORM)
    form = _persona_form(admin_client, tomori)

    response = admin_client.post(
        page_url(tomori, "persona_tests_run"), {**form, "temperature": "9", "draft": "1"}
    )

    assert response.status_code == 400
    assert response.templates[0].name == "dashboard/persona.html"
    assert response.context["form"].errors["temperature"]
    assert PersonaTestRun.objects.count() == 0


def test_another_guilds_set_answers_404(admin_client, tomori):
    case = PersonaTestCase.objects.create(
        persona=tomori, name="x", spec={"name": "x", "message": {"author": "a", "content": "b"}}
    )
    other = GuildConfig.objects.create(guild_id=1100000000000000999, name="Elsewhere")
    wrong = {"guild_id": other.guild_id, "persona_id": tomori.pk}
    assert admin_client.get(reverse("dashboard:persona_tests", kwargs=wrong)).status_code == 404
    assert (
        admin_client.get(
            reverse("dashboard:persona_test_case", kwargs={**wrong, "case_id": case.pk})
        ).status_code
        == 404
    )
    anon = Persona.objects.get(guild=tomori.guild, name="Anon")
    assert admin_client.get(page_url(anon, "persona_test_case", case_id=case.pk)).status_code == 404


# --- A finished run's page ---------------------------------------------------------------------


def answer_by_prompt(body: dict):
    """The fake model: the judge says yes with its reason; the draft (its system prompt says
    haiku) answers in three short lines; the saved persona answers plainly."""
    from chat.llm.fake_server import Reply
    from chat.pipeline.persona_checks import JUDGE_SYSTEM_PROMPT

    system = body["messages"][0]["content"]
    if system == JUDGE_SYSTEM_PROMPT:
        return Reply("YES\nShe stays quiet and kind.")
    if "haiku" in system:
        return Reply("alice, I remember\nyour voice like the evening tide\nwelcome back again")
    return Reply("...alice. of course I remember you.")


@pytest.fixture
def transactional_guild(transactional_db):
    from dashboard.tests.conftest import FIXTURE
    from personas.services import config_import

    config_import(data=json.loads(FIXTURE.read_text()))
    return GuildConfig.objects.get(guild_id=1100000000000000001)


@pytest.mark.django_db(transaction=True)
async def test_the_run_page_sets_old_and_new_replies_side_by_side_with_checks_and_requests(
    transactional_guild,
):
    from asgiref.sync import sync_to_async
    from django.contrib.auth.models import User
    from django.db import connections
    from django.test import AsyncClient

    from chat.llm.attempts import AttemptRunner
    from chat.llm.embeddings import HashingEmbeddings
    from chat.llm.fake_server import FakeLLMServer
    from chat.llm.openai_compat import OpenAICompatibleClient
    from chat.services.persona_test_runs import (
        Target,
        TargetKey,
        persona_test_run_create,
        persona_test_run_execute,
        run_cases_of,
    )
    from personas.case_schema import parse_case
    from personas.case_services import persona_case_save
    from personas.selectors import config_export

    tomori = await Persona.objects.select_related("guild").aget(
        guild__guild_id=1100000000000000001, name="Tomori"
    )
    spec = parse_case(
        {
            "name": "remembers alice",
            "history": [{"author": "alice", "content": "hi everyone"}],
            "message": {"author": "alice", "content": "tomori, do you remember me?"},
            "baseline": {"reply": "...alice. of course I remember you."},
            "expect": {"contains": ["alice"], "max_chars": 40, "judge": "Stays in character."},
        }
    )
    await sync_to_async(persona_case_save)(persona=tomori, spec=spec)
    [row] = [
        p
        for p in (await sync_to_async(config_export)())["guilds"][0]["personas"]
        if p["name"] == "Tomori"
    ]
    draft = {**row, "system_prompt": row["system_prompt"] + " Answer in haiku."}
    user = await sync_to_async(User.objects.create_user)("ada", password="x" * 20, is_staff=True)
    client = AsyncClient()
    await sync_to_async(client.force_login)(user)

    async with FakeLLMServer(responder=answer_by_prompt) as server:
        runner = AttemptRunner(
            client=OpenAICompatibleClient(base_url=server.base_url, api_key="t"), stream=False
        )
        runs = []
        for _ in range(2):
            cases = await sync_to_async(run_cases_of)(
                cases=await sync_to_async(list)(tomori.test_cases.select_related("persona__guild"))
            )
            run = await sync_to_async(persona_test_run_create)(
                cases=cases,
                targets=[
                    Target(TargetKey.SAVED, "saved"),
                    Target(TargetKey.DRAFT, "draft (unsaved)"),
                ],
                draft=draft,
                draft_for=[tomori.pk],
                persona=tomori,
            )
            await persona_test_run_execute(
                run_id=run.pk, runner=runner, embeddings=HashingEmbeddings
            )
            runs.append(run)
    first, second = runs
    url = page_url(tomori, "persona_test_run", run_id=second.pk)

    page = (await client.get(url, {"compare": first.pk})).content.decode()

    titles = [
        "Baseline (recorded)",
        "saved",
        "draft (unsaved)",
        f"Run {first.pk}: saved",
        f"Run {first.pk}: draft",
    ]
    assert [t for t in titles if f'data-title="{t}"' in page] == titles
    assert "<ins>voice like the evening tide" in page  # the draft's new words, marked
    assert "Not kept from “Baseline (recorded)”: <del>...alice. of course</del>" in page
    assert "The same words as “Baseline (recorded)”." in page  # the saved reply did not change
    assert "“She stays quiet and kind.”" in page
    assert 'class="check missed"' in page and "max_chars 40" in page  # the haiku is longer
    assert "Cost: 4 model calls" in page  # two replies, two verdicts
    assert 'hx-trigger="every 1s"' not in page  # finished: the page no longer polls
    result = await second.results.filter(target="draft").afirst()
    request_url = page_url(
        tomori, "persona_test_result_request", run_id=second.pk, result_id=result.pk
    )
    assert request_url in page
    shown = (await client.get(request_url)).content.decode()
    assert "Tomori answering the case" in shown and 'id="preview-request"' in shown
    assert "Answer in haiku." in shown and "tokens (" in shown
    await sync_to_async(connections.close_all)()
