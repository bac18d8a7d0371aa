"""Names for the dashboard, kept from the gateway: the worker stores the guild, its channels,
threads and members when the guild becomes available, and follows renames and nick changes."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.models import DiscordName
from chat.sandbox.demo import DEMO_GUILD_ID, DEMO_USER_IDS
from chat.tests.e2e.conftest import ALICE, BOB, GENERAL, eventually
from chat.tests.privacy import user_privacy

pytestmark = pytest.mark.django_db(transaction=True)

CAROL = DEMO_USER_IDS["carol"]


def _names() -> dict[tuple[str, int], str]:
    return {(n.kind, n.discord_id): n.name for n in DiscordName.objects.all()}


async def test_the_worker_keeps_the_names_the_gateway_gives(world):
    await sync_to_async(user_privacy)(CAROL, guild_id=DEMO_GUILD_ID, level="full")
    await world.start_worker()
    await world.drained()

    names = await sync_to_async(_names)()
    assert names[("guild", DEMO_GUILD_ID)] == "Sandbox Café"
    assert names[("channel", GENERAL)] == "general"
    assert names[("user", ALICE)] == "Alice"
    assert names[("user", BOB)] == "Bob"
    assert ("user", CAROL) not in names  # full privacy: never stored

    sandbox = world.sandbox.sandbox
    said = world.say("a thread starts here")
    thread_id = sandbox.start_thread(GENERAL, int(said["id"]), name="set list", creator_id=ALICE)
    sandbox.rename_guild(DEMO_GUILD_ID, "Café Nouveau")
    sandbox.rename_channel(GENERAL, "lobby")
    sandbox.set_nick(DEMO_GUILD_ID, BOB, "Bobby")
    sandbox.rename_channel(thread_id, "set list, final")
    await world.drained()

    names = await sync_to_async(_names)()
    assert names[("guild", DEMO_GUILD_ID)] == "Café Nouveau"
    assert names[("channel", GENERAL)] == "lobby"
    assert names[("user", BOB)] == "Bobby"
    assert names[("thread", thread_id)] == "set list, final"
    thread = await sync_to_async(DiscordName.objects.get)(kind="thread", discord_id=thread_id)
    assert (thread.parent_id, thread.guild_id) == (GENERAL, DEMO_GUILD_ID)


async def test_a_user_who_chooses_full_privacy_loses_their_stored_name(world):
    await world.start_worker()
    await eventually(
        sync_to_async(DiscordName.objects.filter(kind="user", discord_id=ALICE).exists)
    )
    await sync_to_async(user_privacy)(ALICE, guild_id=DEMO_GUILD_ID, level="full")
    world.sandbox.sandbox.set_nick(DEMO_GUILD_ID, BOB, "Bobby")  # any names event
    await world.drained()

    assert not await sync_to_async(DiscordName.objects.filter(discord_id=ALICE).exists)()
