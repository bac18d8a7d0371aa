"""What a turn reads besides its window, through the real worker on the sandbox: the turns
answering one message share the read of the people in it (seed 000's request-scoped
participant map), a turn's own reads run at once, and each read is timed on the turn and shown
in the inspector."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from chat.models import Turn
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.sandbox.records import Upload
from chat.services.memory_store import MemoryScope, default_embedding_model, memory_add
from chat.tests.e2e.conftest import ALICE, eventually
from dashboard.tests.live.conftest import make_client

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


async def _counting(matching: str) -> tuple[list[str], Callable[[], None]]:
    seen: list[str] = []

    def wrapper(execute, sql, params, many, context):
        if matching in sql:
            seen.append(sql)
        return execute(sql, params, many, context)

    wrappers = await sync_to_async(lambda: connection.execute_wrappers)()
    wrappers.append(wrapper)
    return seen, lambda: wrappers.remove(wrapper)


async def _replied(count: int) -> list[Turn]:
    turns = Turn.objects.filter(status=Turn.Status.REPLIED).order_by("id")
    return [t async for t in turns] if await turns.acount() >= count else []


async def test_the_personas_answering_one_message_read_its_people_once(world):
    await world.start_worker()
    world.say("hello everyone")
    await world.drained()
    seen, stop = await _counting('"personas_userprivacy"')
    try:
        world.say("tomori and anon, what do you both think?")
        turns = await eventually(lambda: _replied(2))
        await world.drained()
    finally:
        stop()

    assert [t.persona_name for t in turns] == ["Tomori", "Anon"]
    # The trigger rules' facts for the message, then its people for both turns: two reads.
    assert len(seen) == 2, seen


async def test_a_turns_reads_run_at_once_and_each_is_timed_in_the_inspector(world, settings):
    """A slow image download and a slow embedding model: the image is hashed while the
    memories are recalled, so the stage takes about as long as the slower read, not both."""
    settings.LLM_EMBEDDING_MODEL = "nomic-embed-text"
    settings.LLM_BASE_URL = world.llm.base_url
    default_embedding_model.cache_clear()
    try:
        await sync_to_async(memory_add)(
            scope=MemoryScope.personal(DEMO_GUILD_ID, ALICE, name="Alice"),
            text="Alice paints with watercolours",
            source="admin",
        )
        await world.start_worker()
        world.sandbox.attachment_delay = world.llm.embedding_delay = 0.6

        world.say("tomori, look at my painting", attachments=[Upload("p.png", PNG, "image/png")])
        [turn] = await eventually(lambda: _replied(1), within=30)
    finally:
        default_embedding_model.cache_clear()

    assert turn.image_hash_ms >= 600 and turn.recall_ms >= 600
    assert turn.hydration_ms is not None and turn.url_refresh_ms is not None
    assert turn.participant_ms < turn.image_hash_ms + turn.recall_ms
    client = await sync_to_async(make_client)("mo", moderator=True)
    page = (await sync_to_async(client.get)(f"/turns/{turn.id}/")).content.decode()
    assert "Participants, read at once:" in page
    for label in ("people (privacy, blocks, notices)", "image hashes", "memory recall"):
        assert label in page
