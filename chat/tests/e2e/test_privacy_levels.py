"""What ``/privacy`` levels do, through the worker on the sandbox (DESIGN §3): ``full`` — never
seen, never triggers, stored nowhere; ``partial`` — seen in conversation, but nothing about them
is kept: across ingest, prompts, the dry-run preview, turn records and memories."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from chat.llm.fake_server import Reply
from chat.models import EventQueue, Memory, ShortTermMemory, Turn
from chat.sandbox.demo import DEMO_GUILD_ID, DEMO_USER_IDS
from chat.services.memory_refresh import short_term_memory_refresh
from chat.tests.e2e.conftest import ALICE, BOB, GENERAL, eventually
from chat.tests.e2e.test_commands import MANAGE_GUILD, moderator, replied_to, run
from personas.models import Persona

pytestmark = pytest.mark.django_db(transaction=True)

CAROL = DEMO_USER_IDS["carol"]
PARTIAL_WORDS = "my secret garden has blue roses"
FULL_WORDS = "my phone number ends in forty two"


def _taken_in(message_id: str) -> bool:
    return EventQueue.objects.filter(message_id=int(message_id)).exists()


def _turn_records_text() -> str:
    return json.dumps(
        [[t.request, t.context_items, t.reply_text] for t in Turn.objects.all()],
        ensure_ascii=False,
    )


def _due_channel_memory() -> int:
    """Tomori's short-term memory of #general, due for its refresh."""
    tomori = Persona.objects.get(guild__guild_id=DEMO_GUILD_ID, name="Tomori")
    memory, _ = ShortTermMemory.objects.update_or_create(
        persona=tomori,
        channel_id=GENERAL,
        user_id=None,
        defaults={
            "guild_id": DEMO_GUILD_ID,
            "turns_since_refresh": tomori.short_term_memory_refresh_every,
            "last_turn_at": timezone.now(),
        },
    )
    return memory.id


async def test_partial_is_seen_but_never_remembered_and_full_is_never_seen(world):
    world.llm.enqueue(Reply("How lovely."), Reply("Hello."))  # replies that quote nobody
    await world.start_worker()
    assert (await run(world, "privacy", {"level": "partial"}, user=ALICE)).answered
    assert (await run(world, "privacy", {"level": "full"}, user=CAROL)).answered

    partial = world.say(f"tomori, {PARTIAL_WORDS}", author=ALICE)
    await replied_to(world, partial)
    full = world.say(f"tomori, {FULL_WORDS}", author=CAROL)
    trigger = world.say("tomori, what is new?", author=BOB)
    await replied_to(world, trigger)
    await world.drained()

    # Ingest: the partial user's message is taken in and answered like anyone's; the full
    # user's is taken in (its key) but never answered.
    assert await sync_to_async(_taken_in)(partial["id"]) and await sync_to_async(_taken_in)(
        full["id"]
    )
    assert await sync_to_async(Turn.objects.filter(trigger_message_id=int(partial["id"])).exists)()
    # Prompts and turn records: the partial user is in the conversation, the full one nowhere.
    last_prompt = json.dumps(world.llm.chat_bodies[-1], ensure_ascii=False)
    assert PARTIAL_WORDS in last_prompt and FULL_WORDS not in last_prompt
    records = await sync_to_async(_turn_records_text)()
    assert PARTIAL_WORDS in records and FULL_WORDS not in records
    assert not await sync_to_async(Turn.objects.filter(trigger_message_id=int(full["id"])).exists)()
    # The dry-run preview (/prompt) shows the same.
    moderator(world, BOB, MANAGE_GUILD)
    preview = await run(world, "prompt", {"persona": "Tomori"}, user=BOB)
    previewed = preview.files[0].data.decode()
    assert PARTIAL_WORDS in previewed and FULL_WORDS not in previewed
    # Memories: neither can be given a long-term memory, and a short-term memory refresh of
    # the channel summarises without either of them.
    for user in (ALICE, CAROL):
        refused = await run(world, "memory add", {"text": "likes roses"}, user=user)
        assert "nothing about you is remembered" in refused.content
    assert not await sync_to_async(Memory.objects.exists)()
    calls = len(world.llm.chat_bodies)
    memory_id = await sync_to_async(_due_channel_memory)()
    result = await short_term_memory_refresh(
        runtime=world.client.tree.turn_runtime(), memory_id=memory_id
    )
    assert result.status == "refreshed", result
    await eventually(lambda: len(world.llm.chat_bodies) > calls)
    summarised = json.dumps(world.llm.chat_bodies[-1], ensure_ascii=False)
    assert "what is new?" in summarised
    assert PARTIAL_WORDS not in summarised
    assert FULL_WORDS not in summarised
