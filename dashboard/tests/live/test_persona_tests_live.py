"""A turn of the real worker saved as a test case (its window read again from the sandbox) and
run through the same pipeline: the request is the turn's own when nothing changed, and differs
only where a draft differs."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.urls import reverse

from chat.llm.attempts import AttemptRunner
from chat.llm.embeddings import HashingEmbeddings
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.models import PersonaTestRun, Turn
from chat.pipeline.persona_checks import json_differences
from chat.sandbox.demo import DEMO_USER_IDS
from chat.services.persona_test_runs import (
    Target,
    TargetKey,
    persona_test_run_create,
    persona_test_run_execute,
    run_cases_of,
)
from chat.tests.e2e.conftest import ALICE, BOB, eventually
from dashboard.tests.live.conftest import make_client
from personas.models import Persona, UserPrivacy
from personas.models_cases import PersonaTestCase
from personas.selectors import config_export

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
CAROL = DEMO_USER_IDS["carol"]


def _replied(count: int) -> Turn | None:
    turns = list(Turn.objects.filter(status=Turn.Status.REPLIED).order_by("id"))
    return turns[count - 1] if len(turns) >= count else None


async def _conversation(world) -> Turn:
    world.say("hi everyone", author=ALICE)
    world.say("hey alice", author=BOB)
    world.say("tomori, do you remember me?", author=ALICE)
    await eventually(sync_to_async(lambda: _replied(1)))
    world.say(f"tomori, and me? <@{ALICE}> says hi too", author=BOB)
    return await eventually(sync_to_async(lambda: _replied(2)))


async def _save_case(turn: Turn, name: str) -> PersonaTestCase:
    client = await sync_to_async(make_client)("ada", staff=True)
    response = await sync_to_async(client.post)(
        reverse("dashboard:turn_save_case", args=[turn.pk]), {"name": name}
    )
    assert response.status_code == 302, response.content
    return await PersonaTestCase.objects.select_related("persona__guild").aget(name=name)


async def _run(world, case: PersonaTestCase, targets, **kw) -> list:
    tomori = case.persona
    run = await sync_to_async(persona_test_run_create)(
        cases=await sync_to_async(run_cases_of)(cases=[case]), targets=targets, persona=tomori, **kw
    )
    runner = AttemptRunner(
        client=OpenAICompatibleClient(base_url=world.llm.base_url, api_key="test"), stream=False
    )
    await persona_test_run_execute(run_id=run.pk, runner=runner, embeddings=HashingEmbeddings)
    run = await PersonaTestRun.objects.aget(pk=run.pk)
    assert run.status == PersonaTestRun.Status.FINISHED
    return await sync_to_async(lambda: list(run.results.order_by("id")))()


async def test_a_turn_saved_as_a_case_replays_to_the_identical_request(dashboard_on_world):
    world = dashboard_on_world
    await world.start_worker()
    turn = await _conversation(world)
    await world.drained()

    case = await _save_case(turn, "remembers bob")

    spec = case.spec
    assert [m["author"] for m in spec["history"]] == ["Alice", "Bob", "Alice", "Tomori"]
    assert spec["message"]["author"] == "Bob"
    assert spec["message"]["content"] == "tomori, and me? @Alice says hi too"
    assert spec["history"][3]["persona"] is True and spec["history"][3]["reply_to"] == 2
    assert spec["baseline"]["reply"] == turn.reply_text
    assert spec["notes"]["guild"]["text"].startswith("This is a small, friendly server")
    assert case.source_turn_id == turn.pk and case.author_ids == {
        "Alice": str(ALICE),
        "Bob": str(BOB),
    }

    [result] = await _run(world, case, [Target(TargetKey.SAVED, "saved")])

    assert result.error == ""
    assert result.request == turn.request  # nothing changed: byte for byte the turn's request
    assert json_differences(turn.request, result.request) == []


async def test_a_draft_whose_system_prompt_differs_changes_only_the_system_prompt(
    dashboard_on_world,
):
    world = dashboard_on_world
    await world.start_worker()
    turn = await _conversation(world)
    await world.drained()
    case = await _save_case(turn, "remembers bob")
    [row] = [
        p
        for p in (await sync_to_async(config_export)())["guilds"][0]["personas"]
        if p["name"] == "Tomori"
    ]
    draft = {**row, "system_prompt": "You are Tomori. You answer in haiku."}

    saved, drafted = await _run(
        world,
        case,
        [Target(TargetKey.SAVED, "saved"), Target(TargetKey.DRAFT, "draft")],
        draft=draft,
        draft_for=[case.persona.pk],
    )

    assert saved.request == turn.request
    assert json_differences(saved.request, drafted.request) == ["messages[0].content"]
    assert drafted.request["messages"][0]["content"] == "You are Tomori. You answer in haiku."
    stored = await Persona.objects.aget(pk=case.persona.pk)
    assert "haiku" not in stored.system_prompt


async def test_someone_with_full_privacy_never_appears_in_a_saved_case(dashboard_on_world):
    world = dashboard_on_world
    await sync_to_async(
        lambda: UserPrivacy.objects.create(guild_id=case_guild_pk(), user_id=CAROL, level="full")
    )()
    await world.start_worker()
    world.say("the sea is loud today", author=CAROL)
    world.say("hi everyone", author=ALICE)
    world.say("tomori, do you hear the sea?", author=ALICE)
    turn = await eventually(sync_to_async(lambda: _replied(1)))
    await world.drained()

    case = await _save_case(turn, "the sea")

    text = json.dumps(case.spec)
    assert "the sea is loud today" not in text and "carol" not in text.lower()
    assert str(CAROL) not in json.dumps(case.author_ids)
    assert [m["author"] for m in case.spec["history"]] == ["Alice"]


def case_guild_pk() -> int:
    from personas.models import GuildConfig

    return GuildConfig.objects.get(guild_id=1191168914227200002).pk
