"""Persona test cases built and run as dry-run turns against the fake model over HTTP: the
request through the turn pipeline with nothing written, each expectation checked, the judge's
verdict and reason kept, repeats, drafts, other models, and a model's failure as the case's."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.apps import apps
from django.db import connections

from chat.llm.attempts import AttemptRunner, RetryPolicy
from chat.llm.embeddings import HashingEmbeddings
from chat.llm.fake_server import FakeLLMServer, Fault, FaultKind, Reply
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.models import Memory, PersonaTestRun, UsageDay
from chat.pipeline.persona_checks import JUDGE_SYSTEM_PROMPT, json_differences
from chat.pipeline.tokens import default_token_counter
from chat.services.persona_test_runs import (
    RunCase,
    Target,
    TargetKey,
    persona_test_run_create,
    persona_test_run_execute,
)
from chat.services.persona_tests import case_prepare, case_turn
from chat.services.spend import Spend
from personas.case_schema import PersonaCaseSpec
from personas.config_version import config_version_bump
from personas.models import GuildConfig, Persona
from personas.selectors import config_export
from personas.services import config_import

pytestmark = pytest.mark.django_db(transaction=True)

DEMO_CONFIG = Path(__file__).resolve().parents[2] / "sandbox" / "demo_config.json"
GUILD = 1191168914227200002
NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)

CASE = {
    "name": "greets by name",
    "history": [
        {"author": "alice", "content": "hi everyone"},
        {"author": "bob", "content": "hey alice"},
        {"author": "Tomori", "content": "...hello, both of you."},
    ],
    "message": {"author": "alice", "content": "tomori, do you remember me?"},
    "expect": {
        "contains": ["alice"],
        "not_contains": ["As an AI"],
        "matches": "^[^\\n]{1,400}$",
        "max_chars": 400,
    },
}


def database_state() -> dict[str, list[dict]]:
    return {
        model.__name__: list(model.objects.order_by("pk").values())
        for app in ("chat", "personas")
        for model in apps.get_app_config(app).get_models()
    }


@pytest.fixture
async def demo(transactional_db):
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    yield
    await sync_to_async(connections.close_all)()


async def _tomori() -> Persona:
    return await Persona.objects.select_related("guild").aget(name="Tomori")


async def _turn(case: dict, persona: Persona | None = None):
    saved = await _tomori()
    guild = await GuildConfig.objects.aget(guild_id=GUILD)
    cast = await sync_to_async(
        lambda: list(Persona.objects.filter(guild=guild).order_by("-is_main", "name"))
    )()
    return case_turn(
        case=PersonaCaseSpec.model_validate(case),
        guild=guild,
        personas=cast,
        persona=persona or saved,
        now=NOW,
    )


def judge_or_echo(body: dict):
    """The fake model: a judge request answers YES when the rubric says "kind", else NO; any
    other request answers "Alice, of course I remember you." """
    first = body["messages"][0]
    if first["role"] == "system" and first["content"] == JUDGE_SYSTEM_PROMPT:
        kind = "kind" in body["messages"][1]["content"].split("\n")[0]
        return Reply("YES\nThe reply is gentle." if kind else "NO\nIt never mentions the sea.")
    return Reply("Alice, of course I remember you.")


@pytest.fixture
async def model():
    async with FakeLLMServer(responder=judge_or_echo) as server:
        client = OpenAICompatibleClient(base_url=server.base_url, api_key="test")
        yield (
            server,
            AttemptRunner(
                client=client, stream=False, policy=RetryPolicy(backoff_base=0.01, backoff_cap=0.02)
            ),
        )


SAVED = (Target(TargetKey.SAVED, "saved"),)


async def _run(runner, cases, targets=SAVED, spend=None, **kw):
    """Create a run of ``cases`` against Tomori and execute it (its calls counted by ``spend``
    when given); the run and its results."""
    tomori = await _tomori()
    run = await sync_to_async(persona_test_run_create)(
        cases=[
            RunCase(
                spec=PersonaCaseSpec.model_validate(c),
                persona_id=tomori.pk,
                persona_name="Tomori",
                guild_id=GUILD,
            )
            for c in cases
        ],
        targets=list(targets),
        persona=tomori,
        **kw,
    )
    await persona_test_run_execute(
        run_id=run.pk, runner=runner, embeddings=HashingEmbeddings, now=NOW, spend=spend
    )
    if spend is not None:
        await spend.settled()
    run = await PersonaTestRun.objects.aget(pk=run.pk)
    results = await sync_to_async(lambda: list(run.results.order_by("id")))()
    return run, results


async def test_a_case_is_prepared_as_a_dry_run_turn_over_its_history(demo):
    before = await sync_to_async(database_state)()

    prepared = await case_prepare(turn=await _turn(CASE))

    messages = prepared.body["messages"]
    assert messages[0]["role"] == "system" and "You are Tomori" in messages[0]["content"]
    assert messages[4:8] == [
        {"role": "user", "content": "alice: [ref_1] hi everyone"},
        {"role": "user", "content": "bob: [ref_2] hey alice"},
        {"role": "assistant", "content": "Tomori: [ref_3] ...hello, both of you."},
        {"role": "user", "content": "alice: [ref_4] tomori, do you remember me?"},
    ]
    assert "This is a small, friendly server" in json.dumps(messages)  # the guild's note
    assert await sync_to_async(database_state)() == before


async def test_given_memories_and_notes_replace_what_the_store_and_the_channel_hold(demo):
    case = {
        **CASE,
        "memories": ["About alice: alice's cat is called Miso"],
        "short_term_memory": "They talked about the rehearsal.",
        "notes": {"channel": {"text": "This channel is for poems.", "depth": 1}},
    }

    prepared = await case_prepare(turn=await _turn(case))

    text = json.dumps(prepared.body["messages"], ensure_ascii=False)
    assert "alice's cat is called Miso" in text
    assert "They talked about the rehearsal." in text
    assert "This channel is for poems." in text
    assert "This is a small, friendly server" not in text  # notes given: the guild's is not


async def test_checks_pass_and_fail_as_the_reply_says(demo, model):
    _, runner = model
    failing = {
        **CASE,
        "name": "never says alice",
        "expect": {"not_contains": ["alice"], "max_chars": 5},
    }

    run, results = await _run(runner, [CASE, failing])

    assert run.status == PersonaTestRun.Status.FINISHED and run.done == run.total == 2
    by_case = {r.case_name: r for r in results}
    assert by_case["greets by name"].passed is True
    assert [c["passed"] for c in by_case["greets by name"].checks] == [True, True, True, True]
    wrong = by_case["never says alice"]
    assert wrong.passed is False
    assert [(c["kind"], c["passed"]) for c in wrong.checks] == [
        ("not_contains", False),
        ("max_chars", False),
    ]
    assert wrong.checks[1]["detail"] == "32 characters"
    assert run.calls == 2 and run.prompt_tokens > 0


async def test_the_judges_verdict_and_reason_are_kept(demo, model):
    server, runner = model
    kind = {**CASE, "name": "kind", "expect": {"judge": "The reply is kind."}}
    sea = {**CASE, "name": "sea", "expect": {"judge": "The reply talks about the sea."}}

    run, results = await _run(
        runner,
        [kind, sea],
    )

    by_case = {r.case_name: r for r in results}
    [verdict] = by_case["kind"].checks
    assert verdict == {
        "kind": "judge",
        "expected": "The reply is kind.",
        "passed": True,
        "detail": "the judge said yes",
        "reason": "The reply is gentle.",
    }
    [verdict] = by_case["sea"].checks
    assert verdict["passed"] is False and verdict["reason"] == "It never mentions the sea."
    assert run.calls == 4  # two replies, two verdicts
    judged = [b for b in server.chat_bodies if b["messages"][0]["content"] == JUDGE_SYSTEM_PROMPT]
    assert "alice: tomori, do you remember me?" in judged[0]["messages"][1]["content"]
    assert "Alice, of course I remember you." in judged[0]["messages"][1]["content"]


async def test_repeat_calls_the_model_that_many_times_per_case(demo, model):
    server, runner = model

    run, results = await _run(runner, [CASE], repeat=3)

    assert run.total == 3 and run.done == 3
    assert sorted(r.repeat_index for r in results) == [0, 1, 2]
    assert len([b for b in server.chat_bodies]) == 3


async def test_a_model_error_is_that_cases_error_not_the_runs(demo):
    calls = iter([Fault(FaultKind.HTTP_ERROR, status=401), Reply("Alice!")])
    async with FakeLLMServer(responder=lambda body: next(calls)) as server:
        runner = AttemptRunner(
            client=OpenAICompatibleClient(base_url=server.base_url, api_key="x"), stream=False
        )
        run, results = await _run(runner, [CASE])
    assert run.status == PersonaTestRun.Status.FINISHED
    [result] = results
    assert result.passed is None and "401" in result.error and result.checks == []


async def test_a_draft_changes_the_request_only_where_it_differs(demo, model):
    _, runner = model
    tomori = await _tomori()
    [row] = [
        p
        for p in (await sync_to_async(config_export)())["guilds"][0]["personas"]
        if p["name"] == "Tomori"
    ]
    draft = {**row, "system_prompt": "You are Tomori, and you answer in haiku."}

    _, results = await _run(
        runner,
        [CASE],
        targets=[Target(TargetKey.SAVED, "saved"), Target(TargetKey.DRAFT, "draft")],
        draft=draft,
        draft_for=[tomori.pk],
    )

    by_target = {r.target: r for r in results}
    saved, drafted = by_target["saved"].request, by_target["draft"].request
    assert json_differences(saved, drafted) == ["messages[0].content"]
    assert "answer in haiku" in drafted["messages"][0]["content"]
    assert await Persona.objects.filter(system_prompt__contains="haiku").acount() == 0


async def test_another_model_is_asked_with_the_same_prompt(demo, model):
    _, runner = model

    _, results = await _run(
        runner,
        [CASE],
        targets=[Target(TargetKey.SAVED, "saved"), Target(TargetKey.MODEL, "on m2", model="m2")],
    )

    by_target = {r.target: r for r in results}
    assert by_target["model"].request["model"] == "m2"
    assert json_differences(by_target["saved"].request, by_target["model"].request) == ["model"]


async def test_tools_the_model_calls_are_answered_and_write_nothing(demo):
    from chat.llm.fake_server import ScriptedToolCall

    script = iter(
        [
            Reply(
                tool_calls=(
                    ScriptedToolCall(
                        "remember",
                        {
                            "scope": "server",
                            "fact": "the band rehearses on Fridays",
                            "ref": "ref_1",
                        },
                    ),
                )
            ),
            Reply("I will remember that."),
        ]
    )
    async with FakeLLMServer(responder=lambda body: next(script)) as server:
        runner = AttemptRunner(
            client=OpenAICompatibleClient(base_url=server.base_url, api_key="x"), stream=False
        )
        case = {
            **CASE,
            "message": {
                "author": "alice",
                "content": "tomori, remember that we rehearse on Fridays",
            },
        }
        _, [result] = await _run(runner, [case])

    assert result.reply == "I will remember that."
    assert result.tool_calls == [
        {
            "tool": "remember",
            "scope": "server",
            "fact": "the band rehearses on Fridays",
            "ref": "ref_1",
        }
    ]
    assert await Memory.objects.acount() == 0


async def test_similarity_to_the_baseline_uses_the_embedding_cosine(demo, model):
    _, runner = model
    close = {
        **CASE,
        "name": "close",
        "baseline": {"reply": "Alice, of course I remember you!"},
        "expect": {"similar_to_baseline": 0.8},
    }
    far = {
        **CASE,
        "name": "far",
        "baseline": {"reply": "The weather is grey today."},
        "expect": {"similar_to_baseline": 0.8},
    }

    _, results = await _run(runner, [close, far])

    by_case = {r.case_name: r for r in results}
    assert by_case["close"].passed is True and by_case["close"].checks[0]["detail"].startswith(
        "cosine "
    )
    assert by_case["far"].passed is False


async def test_without_a_model_endpoint_the_run_fails_saying_so(demo, settings):
    from chat.tasks import persona_test_run_now

    settings.LLM_BASE_URL = ""
    tomori = await _tomori()
    run = await sync_to_async(persona_test_run_create)(
        cases=[
            RunCase(
                spec=PersonaCaseSpec.model_validate(CASE),
                persona_id=tomori.pk,
                persona_name="Tomori",
                guild_id=GUILD,
            )
        ],
        targets=list(SAVED),
        persona=tomori,
    )

    await persona_test_run_now(run.pk)

    run = await PersonaTestRun.objects.aget(pk=run.pk)
    assert run.status == PersonaTestRun.Status.FAILED
    assert run.error.startswith("LLM_BASE_URL is empty")
    assert await run.results.acount() == 0


async def test_a_runs_calls_count_as_tests_against_the_guilds_budget_and_a_spent_one_refuses(
    demo, model
):
    server, runner = model
    await GuildConfig.objects.filter(guild_id=GUILD).aupdate(
        limits={"tokens_per_day": 100, "usd_per_month": None, "user_turns": None, "notice": ""}
    )
    await sync_to_async(config_version_bump)(GUILD)
    spend = Spend(token_counter=default_token_counter())
    try:
        _, first = await _run(runner, [CASE], spend=spend)
        calls_before = len(server.chat_bodies)
        _, second = await _run(runner, [CASE], spend=spend)
    finally:
        await spend.close()

    assert [r.error for r in first] == [""]  # the day's first call fits
    counted = [
        (row.kind, row.calls, row.persona_name)
        async for row in UsageDay.objects.filter(guild_id=GUILD)
    ]
    assert counted == [("test", 1, "Tomori")]
    assert len(server.chat_bodies) == calls_before  # the spent budget asked no model
    [refused] = second
    assert refused.error.startswith("no model was asked: ") and "budget" in refused.error
    assert refused.passed is None
