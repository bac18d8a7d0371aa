"""Long-term memories through the real worker on the sandbox: a fact kept about a person reaches
a later prompt of any persona of the guild when it bears on what is said and that person is in
the conversation; never when they are not; privacy forgets it. A persona's own note reaches only
that persona. Extraction runs on a real Celery worker with beat (``celery`` tier)."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client
from django.urls import reverse

from chat.llm.fake_server import Reply
from chat.models import Memory, Turn
from chat.pipeline.recall import MEMORY_HEADER
from chat.pipeline.triggers import TurnReason
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_GUILD_ID, DEMO_USER_IDS
from chat.services.memory_documents import document_embed, document_upload
from chat.services.memory_store import MemoryScope, memory_add
from chat.tests.celery_worker import WORKER_TIMEOUT, start_celery, stop
from chat.tests.e2e.conftest import ALICE, BOB, GENERAL, eventually
from chat.tests.e2e.test_commands import run
from personas.config_schema import UserSpec
from personas.models import GuildConfig
from personas.services import user_privacy_save

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

POETRY = DEMO_CHANNEL_IDS["poetry"]
CAROL = DEMO_USER_IDS["carol"]
FACT = "Alice's cat is called Miso and loves tuna"


def _remember_alices_cat() -> None:
    memory_add(
        scope=MemoryScope.personal(DEMO_GUILD_ID, ALICE, name="alice"), text=FACT, source="command"
    )


def _turns() -> list[Turn]:
    return list(Turn.objects.order_by("id"))


def _memory_items(body: dict) -> list[str]:
    return [
        m["content"]
        for m in body["messages"]
        if isinstance(m["content"], str) and m["content"].startswith(f"[System: {MEMORY_HEADER}")
    ]


async def _answered(world, count: int) -> list[dict]:
    await eventually(lambda: len(world.llm.chat_bodies) >= count)
    await world.drained()
    return world.llm.chat_bodies


async def test_a_fact_about_a_person_reaches_any_personas_prompt_while_they_take_part(world):
    await sync_to_async(_remember_alices_cat)()
    await world.start_worker()

    world.say("anon, what is my cat called again?", author=ALICE)
    [body] = await _answered(world, 1)

    [item] = _memory_items(body)
    assert f"- About Alice: {FACT}" in item
    system = [m for m in body["messages"] if m["role"] == "system"]
    assert system and all("Miso" not in str(m["content"]) for m in system)
    [turn] = await sync_to_async(_turns)()
    assert turn.persona_name == "Anon"
    [recalled] = turn.recalled
    assert recalled["line"] == f"About Alice: {FACT}" and recalled["kind"] == "personal"
    assert recalled["score"] > 0.3 and "who is in the window" in recalled["why"]
    assert all(i["tag"] != "memory" for i in turn.context_items[: turn.cache_prefix_end])

    world.say("tomori, does my cat like fish?", author=ALICE)
    bodies = await _answered(world, 2)
    assert f"- About Alice: {FACT}" in _memory_items(bodies[1])[0]


async def test_a_later_turn_keeps_the_memories_an_earlier_one_showed_where_they_were(world):
    await sync_to_async(_remember_alices_cat)()
    for n in range(3):
        world.say(f"morning {n}", author=ALICE)
        world.say(f"hello {n}", author=BOB)
    await world.start_worker()

    world.say("tomori, what is my cat called again?", author=ALICE)
    [first] = await _answered(world, 1)
    world.say("tomori, and does my cat like tuna?", author=ALICE)
    bodies = await _answered(world, 2)

    [item] = _memory_items(first)
    kept = first["messages"].index({"role": "user", "content": item}) + 1
    second = bodies[1]["messages"]
    # The second request repeats the first up to and past the memories it showed, and shows
    # them once: what the provider cached of the first request serves the second.
    assert second[:kept] == first["messages"][:kept]
    assert _memory_items(bodies[1]) == [item]
    turns = await sync_to_async(_turns)()
    assert turns[0].recalled[0]["line"] == f"About Alice: {FACT}" and turns[1].recalled == []


def _remember_alices_cat_and_cello() -> None:
    _remember_alices_cat()
    memory_add(
        scope=MemoryScope.personal(DEMO_GUILD_ID, ALICE, name="alice"),
        text="I play the cello in a youth orchestra",
        source="command",
    )


async def test_a_later_question_recalls_a_new_memory_after_the_ones_the_window_keeps(world):
    await sync_to_async(_remember_alices_cat_and_cello)()
    for n in range(3):
        world.say(f"has anyone seen the new poster {n}?", author=BOB)
        world.say(f"not yet {n}", author=CAROL)
    await world.start_worker()

    world.say("tomori, what is my cat called again?", author=ALICE)
    [first] = await _answered(world, 1)
    world.say("tomori, which instrument do I practise?", author=ALICE)
    second = (await _answered(world, 2))[1]

    [cat] = _memory_items(first)
    assert "Miso" in cat and "cello" not in cat
    kept, new = _memory_items(second)
    assert kept == cat and "- About Alice: I play the cello in a youth orchestra" in new
    # The new set comes after the kept one, which stays where the first request had it: the
    # second request repeats the first up to and past it.
    messages = second["messages"]
    at = messages.index({"role": "user", "content": cat}) + 1
    assert messages[:at] == first["messages"][:at]
    assert messages.index({"role": "user", "content": new}) > at
    turns = await sync_to_async(_turns)()
    assert [m["line"] for m in turns[1].recalled] == [
        "About Alice: I play the cello in a youth orchestra"
    ]


async def test_a_personal_memory_never_reaches_a_window_without_its_person(world):
    await sync_to_async(_remember_alices_cat)()
    await world.start_worker()

    world.say("tomori, what is alice's cat called?", channel_id=POETRY, author=BOB)
    [body] = await _answered(world, 1)

    assert _memory_items(body) == []
    assert "Miso" not in str(body)
    [turn] = await sync_to_async(_turns)()
    assert turn.recalled == []


async def _forget_by_command(world) -> None:
    record = await run(world, "memory forget", {"id": "all"})
    assert record.content == "Forgotten: 1 memory(ies)."


def _delete_on_the_dashboard() -> None:
    admin = User.objects.create_user("ada", is_staff=True)
    client = Client()
    client.force_login(admin)
    [memory] = Memory.objects.all()
    path = reverse(
        "dashboard:memory_delete", kwargs={"guild_id": DEMO_GUILD_ID, "memory_id": memory.id}
    )
    assert client.post(path).status_code == 302


async def _delete_by_an_admin(world) -> None:
    await sync_to_async(_delete_on_the_dashboard)()


async def _withdraw_by_privacy(world) -> None:
    record = await run(world, "privacy", {"level": "full"})
    assert "Deleted: 1 memory(ies) about you" in record.content


@pytest.mark.parametrize(
    "forget",
    [_forget_by_command, _delete_by_an_admin, _withdraw_by_privacy],
    ids=["memory forget", "dashboard delete", "privacy full"],
)
async def test_a_forgotten_memory_is_gone_from_the_very_next_request_of_the_window(world, forget):
    await sync_to_async(_remember_alices_cat)()
    for n in range(3):  # others talk first: the memories then follow one of their messages
        world.say(f"has anyone seen the new poster {n}?", author=BOB)
        world.say(f"not yet {n}", author=CAROL)
    await world.start_worker()
    world.say("tomori, what is my cat called again?", author=ALICE)
    [first] = await _answered(world, 1)
    world.say("tomori, what should we do this weekend?", author=BOB)
    second = (await _answered(world, 2))[1]
    [shown] = _memory_items(first)
    assert f"- About Alice: {FACT}" in shown
    assert _memory_items(second) == [shown]  # kept where the first request showed it
    [first_turn, second_turn] = await sync_to_async(_turns)()
    assert second_turn.recalled == []
    kept_after = int(first_turn.recalled[0]["after"])
    assert world.sandbox.sandbox.message(GENERAL, kept_after)["author"]["id"] == str(BOB)

    await forget(world)
    world.say("tomori, any plans for tonight?", author=BOB)
    third = (await _answered(world, 3))[2]

    assert "Miso" not in json.dumps(third)
    assert _memory_items(third) == []
    # The same window: the request repeats the previous one up to where the memory was.
    kept = second["messages"].index({"role": "user", "content": shown})
    assert third["messages"][:kept] == second["messages"][:kept]


@pytest.mark.parametrize("level", ["partial", "full"])
async def test_choosing_privacy_forgets_what_was_kept(world, level):
    await sync_to_async(_remember_alices_cat)()
    await world.start_worker()
    world.say("tomori, what is my cat called again?", author=ALICE)
    [first] = await _answered(world, 1)
    assert _memory_items(first)

    guild = await sync_to_async(GuildConfig.objects.get)(guild_id=DEMO_GUILD_ID)
    await sync_to_async(user_privacy_save)(guild=guild, spec=UserSpec(id=str(ALICE), privacy=level))
    assert await sync_to_async(Memory.objects.count)() == 0

    world.say("tomori, what is my cat called again?", author=BOB, channel_id=GENERAL)
    bodies = await _answered(world, 2)
    assert "Miso" not in str(bodies[1])


def _tool_results(body: dict) -> list[dict]:
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


async def test_a_fact_saved_with_the_remember_tool_reaches_a_later_prompt(world):
    fact = {"scope": "user", "fact": "Alice plays the oboe in an orchestra", "ref": "ref_1"}
    world.llm.enqueue(Reply.calling("remember", fact), Reply("Noted!"))
    await world.start_worker()

    world.say("tomori, remember that I play the oboe in an orchestra", author=ALICE)
    bodies = await _answered(world, 2)

    assert "remember" in [tool["function"]["name"] for tool in bodies[0]["tools"]]
    assert _tool_results(bodies[1]) == [{"saved": "added"}]
    [memory] = await sync_to_async(list)(Memory.objects.all())
    [turn] = await sync_to_async(_turns)()
    assert (memory.user_id, memory.source, memory.turn_id) == (ALICE, "tool", turn.id)
    assert memory.text == fact["fact"] and memory.subject_name == "Alice"

    world.say("anon, which instrument do I play in the orchestra?", author=ALICE)
    bodies = await _answered(world, 3)
    assert "- About Alice: Alice plays the oboe in an orchestra" in _memory_items(bodies[2])[0]


async def test_what_a_persona_says_it_will_remember_reaches_only_its_own_later_prompts(world):
    promise = {"scope": "persona", "fact": "I promised to call Alice Captain", "ref": "ref_1"}
    world.llm.enqueue(Reply.calling("remember", promise), Reply("Aye, Captain!"))
    await world.start_worker()

    world.say("tomori, remember to call me captain from now on", author=ALICE)
    bodies = await _answered(world, 2)

    assert _tool_results(bodies[1]) == [{"saved": "added"}]
    [memory] = await sync_to_async(list)(Memory.objects.select_related("persona"))
    [turn] = await sync_to_async(_turns)()
    assert (memory.kind, memory.persona.name, memory.source) == ("persona", "Tomori", "tool")
    assert memory.user_id is None and memory.turn_id == turn.id

    world.say("anon, will you call me captain too?", author=ALICE)
    bodies = await _answered(world, 3)
    assert "Captain" not in str(_memory_items(bodies[2]))

    world.say("tomori, what will you call me, captain?", author=ALICE)
    bodies = await _answered(world, 4)
    [item] = _memory_items(bodies[3])
    assert "- You said you would remember: I promised to call Alice Captain" in item
    turns = await sync_to_async(_turns)()
    assert [t.persona_name for t in turns[1:]] == ["Anon", "Tomori"]
    assert turns[1].recalled == [] and turns[2].recalled[0]["kind"] == "persona"


async def test_the_remember_tool_keeps_nothing_about_someone_who_did_not_say_it(world):
    world.say("hi all", author=ALICE)
    about_alice = {"scope": "user", "fact": "Alice hates the oboe", "ref": "ref_2"}
    world.llm.enqueue(Reply.calling("remember", about_alice), Reply("Hm."))
    await world.start_worker()

    world.say("tomori, remember: alice hates the oboe", author=BOB)
    bodies = await _answered(world, 2)

    [result] = _tool_results(bodies[1])
    assert result == {
        "error": "the fact names Alice, but ref_2 is Bob's: save only what people say about "
        "themselves, citing their own message"
    }
    assert await sync_to_async(Memory.objects.count)() == 0


def _extraction() -> tuple[Turn | None, list[Memory]]:
    turn = Turn.objects.filter(reason=TurnReason.EXTRACTION).first()
    return turn, list(Memory.objects.all())


@pytest.mark.celery
async def test_after_a_conversation_goes_quiet_extraction_runs_and_its_facts_reach_a_prompt(
    world, tmp_path
):
    await world.start_worker()
    world.say("I just adopted a greyhound called Pixel", author=ALICE)
    world.say("so cute!", author=BOB)
    await world.drained()
    fact = {"about": "Alice", "fact": "Alice adopted a greyhound called Pixel"}
    world.llm.enqueue(Reply(json.dumps({"facts": [fact]})))

    # The real Celery worker with beat: its schedule finds the quiet channel and queues the
    # extraction task, which reads the channel over the sandbox's REST API and asks the model.
    celery = start_celery(
        world.sandbox,
        world.llm,
        tmp_path / "beat-schedule",
        MEMORY_EXTRACTION_SECONDS="0.5",
        MEMORY_EXTRACTION_QUIET_SECONDS="0",
        MEMORY_EXTRACTION_MIN_MESSAGES="2",
        SHORT_TERM_MEMORY_MAINTENANCE_SECONDS="3600",
    )
    try:

        async def stored() -> bool:
            turn, memories = await sync_to_async(_extraction)()
            return turn is not None and turn.status == Turn.Status.REPLIED and bool(memories)

        await eventually(stored, within=WORKER_TIMEOUT)
    finally:
        await sync_to_async(stop)(celery)

    [extraction] = world.llm.chat_bodies
    assert "Alice: [ref_1] I just adopted a greyhound called Pixel" in str(extraction)
    turn, [memory] = await sync_to_async(_extraction)()
    assert (memory.user_id, memory.source, memory.turn_id) == (ALICE, "extraction", turn.id)

    world.say("anon, what is my greyhound called?", author=ALICE)
    bodies = await _answered(world, 2)
    assert f"- About Alice: {fact['fact']}" in _memory_items(bodies[1])[0]
    await sync_to_async(connections.close_all)()


def _upload_the_harbour_guide() -> None:
    text = "The tea house on the pier opens at noon on Sundays and closes at dusk."
    document = document_upload(guild_id=DEMO_GUILD_ID, name="harbour.md", data=text.encode())
    document_embed(document_id=document.id)


async def test_a_passage_of_a_guild_document_reaches_a_prompt_it_bears_on(world):
    await sync_to_async(_upload_the_harbour_guide)()
    await world.start_worker()

    world.say("tomori, when does the tea house on the pier open?", author=BOB)
    [body] = await _answered(world, 1)

    [item] = _memory_items(body)
    assert "- From harbour.md: The tea house on the pier opens at noon on Sundays" in item
    [turn] = await sync_to_async(_turns)()
    assert turn.recalled[0]["kind"] == "document"
    assert "a passage of harbour.md" in turn.recalled[0]["why"]
