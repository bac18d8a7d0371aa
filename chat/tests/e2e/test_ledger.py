"""The window registry's correctness rules through the real worker on the sandbox.

A conversation (a trigger, the reply, the next trigger) keeps its history window across the idle
gap between turns. Whatever happens while the channel is idle must reach the next prompt: an
edit, a delete, a reaction, and a gap in the gateway session each force the read the rules
prescribe, and with nothing happening no read is made at all.
"""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async

from chat.llm.fake_server import Reply
from chat.models import Turn
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_GUILD_ID
from chat.tests.e2e.conftest import ALICE, BOB, GENERAL, eventually
from personas.models import ChannelConfig
from personas.services import config_import

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

HISTORY_READ = ("GET", "/channels/{channel_id}/messages")
POETRY = DEMO_CHANNEL_IDS["poetry"]


def history_reads(world) -> int:
    return world.sandbox.request_counts.get(HISTORY_READ, 0)


def last_prompt(world) -> str:
    """Everything the model was shown in the newest chat request, as one text."""
    return json.dumps(world.llm.chat_bodies[-1]["messages"], ensure_ascii=False)


async def last_window(channel_id: int = GENERAL) -> dict:
    """How the newest turn in the channel read its window (``Turn.window``)."""
    turn = await Turn.objects.filter(channel_id=channel_id).order_by("-id").afirst()
    return turn.window


async def turn(world, content: str, *, channel_id: int = GENERAL) -> dict:
    """Say ``content`` (it names tomori), wait for the reply to it, then for the worker to be
    drained. The reply is scripted and short, so no reply quotes an earlier prompt."""
    world.llm.enqueue(Reply("mm."))
    trigger = world.say(content, channel_id=channel_id)
    await eventually(
        lambda: any(
            (m.get("message_reference") or {}).get("message_id") == trigger["id"]
            for m in world.bot_messages(channel_id)
        )
    )
    await world.drained()
    return trigger


async def test_with_nothing_happening_while_idle_the_next_turn_reads_no_history(world):
    await world.start_worker()
    await turn(world, "tomori, first question")
    reads = history_reads(world)

    await world.drained()  # idle: nothing happens
    await turn(world, "tomori, second question")

    assert history_reads(world) == reads
    assert (await last_window())["rest_reason"] is None
    assert "first question" in last_prompt(world)


async def before_the_gap(world) -> dict[str, dict]:
    """Three lines bob said before the worker started (only a REST read knows them), one he
    said after (in the gateway cache too), then the first turn of the conversation."""
    earlier = [world.say(f"earlier line {n}", author=BOB) for n in range(3)]
    await world.start_worker()
    cached = world.say("a line the gateway saw", author=BOB)
    await turn(world, "tomori, first question")
    return {"uncached": earlier[1], "cached": cached}


def edit(world, message: dict) -> None:
    world.sandbox.sandbox.user_edits(GENERAL, int(message["id"]), "words put right later")


def react(world, message: dict) -> None:
    world.sandbox.sandbox.user_reacts(GENERAL, int(message["id"]), ALICE, "👍")


def clear_all(world, message: dict) -> None:
    world.sandbox.sandbox.user_clears_reactions(GENERAL, int(message["id"]))


def clear_thumbs(world, message: dict) -> None:
    world.sandbox.sandbox.user_clears_reactions(GENERAL, int(message["id"]), "👍")


def delete(world, message: dict) -> None:
    world.sandbox.sandbox.user_deletes(GENERAL, int(message["id"]))


@pytest.mark.parametrize(
    ("change", "which", "reads", "reason", "shown", "gone"),
    [
        (edit, "uncached", 1, "uncached_change", "words put right later", "earlier line 1"),
        (edit, "cached", 0, None, "words put right later", "a line the gateway saw"),
        (react, "uncached", 1, "uncached_change", "earlier line 1 [reactions: 👍 1]", None),
        (react, "cached", 0, None, "a line the gateway saw [reactions: 👍 1]", None),
        (delete, "uncached", 0, None, "earlier line 2", "earlier line 1"),
        (delete, "cached", 0, None, "earlier line 2", "a line the gateway saw"),
    ],
    ids=["edit", "edit-cached", "reaction", "reaction-cached", "delete", "delete-cached"],
)
async def test_what_changes_while_idle_reaches_the_next_prompt_through_the_right_read(
    world, change, which, reads, reason, shown, gone
):
    """A change to a message only REST knows forces a read (the registry holds no fresh copy);
    the gateway cache's copy of a cached one carries the change, and a delete is left out of the
    kept window: neither needs a read."""
    messages = await before_the_gap(world)
    before = history_reads(world)

    change(world, messages[which])
    await world.drained()
    await turn(world, "tomori, second question")

    assert history_reads(world) - before == reads
    assert (await last_window())["rest_reason"] == reason
    assert shown in last_prompt(world)
    if gone is not None:
        assert gone not in last_prompt(world)


@pytest.mark.parametrize(
    ("clear", "shown", "gone"),
    [
        (clear_all, "earlier line 1", "[reactions"),
        (clear_thumbs, "earlier line 1 [reactions: 🎉 1]", "👍"),
    ],
    ids=["all", "one-emoji"],
)
async def test_reactions_cleared_while_idle_are_gone_from_the_next_prompt(
    world, clear, shown, gone
):
    """A moderator clears a message's reactions (all, or one emoji's): seed 000's raw
    reaction events include the clears, so a message only REST knows is read again rather
    than shown with the reactions it no longer has."""
    earlier = [world.say(f"earlier line {n}", author=BOB) for n in range(3)]
    world.sandbox.sandbox.user_reacts(GENERAL, int(earlier[1]["id"]), ALICE, "👍")
    world.sandbox.sandbox.user_reacts(GENERAL, int(earlier[1]["id"]), BOB, "🎉")
    await world.start_worker()
    await turn(world, "tomori, first question")
    assert "earlier line 1 [reactions: 👍 1, 🎉 1]" in last_prompt(world)
    before = history_reads(world)

    clear(world, earlier[1])
    await world.drained()
    await turn(world, "tomori, second question")

    assert history_reads(world) - before == 1
    assert (await last_window())["rest_reason"] == "uncached_change"
    assert shown in last_prompt(world)
    assert gone not in last_prompt(world)


async def test_deletes_that_leave_a_full_window_short_read_the_older_history(world):
    await ChannelConfig.objects.filter(channel_id=GENERAL).aupdate(message_fetch_limit=20)
    earlier = [world.say(f"earlier line {n}", author=BOB) for n in range(25)]
    await world.start_worker()
    await turn(world, "tomori, first question")  # the window: the newest 20, full
    before = history_reads(world)

    for message in earlier[-3:]:
        delete(world, message)
    await world.drained()
    await turn(world, "tomori, second question")  # 20 + reply + trigger - 3 deleted < 20

    assert history_reads(world) - before == 1
    assert (await last_window())["rest_reason"] == "deletion_needs_older_history"
    assert not any(f"earlier line {n}" in last_prompt(world) for n in (22, 23, 24))


async def gap_in_the_session(world, *while_away) -> None:
    """End the worker's gateway session; ``while_away`` happen before it can identify again,
    so the gateway never tells it. Returns once the new session is up, the worker has taken it
    in (its catch-up read of each channel it had seen included) and is drained."""
    old = {s["session_id"] for s in world.sandbox.sessions()}
    before = history_reads(world)
    channels = len(world.client.intake.last_seen)

    assert world.sandbox.invalidate_sessions() == 1
    for happening in while_away:
        happening()
    await eventually(
        lambda: any(s["connected"] and s["session_id"] not in old for s in world.sandbox.sessions())
    )
    await eventually(lambda: not world.client.windows.disconnected_shards)
    await eventually(lambda: history_reads(world) == before + channels)  # the catch-up
    await world.drained()


async def test_a_gap_in_the_session_reads_once_and_reanchors_and_keeps_what_it_missed(world):
    messages = await before_the_gap(world)

    await gap_in_the_session(
        world, lambda: edit(world, messages["cached"]), lambda: delete(world, messages["uncached"])
    )
    before = history_reads(world)
    await turn(world, "tomori, second question")

    assert history_reads(world) - before == 1
    window = await last_window()
    assert (window["rest_reason"], window["reanchor_reason"]) == ("shard_reconnected", "forced")
    assert "words put right later" in last_prompt(world)
    assert "a line the gateway saw" not in last_prompt(world)
    assert "earlier line 1" not in last_prompt(world)

    await turn(world, "tomori, third question")  # the window is reused again

    assert history_reads(world) - before == 1
    assert (await last_window())["rest_reason"] is None
    assert "words put right later" in last_prompt(world)
    assert "a line the gateway saw" not in last_prompt(world)
    assert "earlier line 1" not in last_prompt(world)


async def test_a_channel_quiet_through_a_gap_reads_once_after_it_and_keeps_to_the_rules(world):
    """Every window is dropped on a new session, the quiet channels' too: the first turn there
    reads once and shows what the gateway missed, and later changes force reads as before."""
    await world.start_worker()
    verse = int(world.say("a verse about rain", channel_id=POETRY, author=BOB)["id"])
    await turn(world, "tomori, a poem please", channel_id=POETRY)
    await turn(world, "tomori, first question")

    await gap_in_the_session(
        world, lambda: world.sandbox.sandbox.user_edits(POETRY, verse, "a verse about snow")
    )
    await turn(world, "tomori, second question")  # only #general speaks after the gap
    before = history_reads(world)
    await turn(world, "tomori, another poem", channel_id=POETRY)

    assert history_reads(world) - before == 1
    window = await last_window(POETRY)
    assert (window["rest_reason"], window["reanchor_reason"]) == ("shard_reconnected", "forced")
    assert "a verse about snow" in last_prompt(world)
    assert "a verse about rain" not in last_prompt(world)

    await turn(world, "tomori, one more", channel_id=POETRY)

    assert history_reads(world) - before == 1
    assert (await last_window(POETRY))["rest_reason"] is None
    assert "a verse about snow" in last_prompt(world)
    assert "a verse about rain" not in last_prompt(world)

    world.sandbox.sandbox.user_edits(POETRY, verse, "a verse about sun")
    await world.drained()
    await turn(world, "tomori, and the last", channel_id=POETRY)

    assert history_reads(world) - before == 2
    assert (await last_window(POETRY))["rest_reason"] == "uncached_change"
    assert "a verse about sun" in last_prompt(world)
    assert "a verse about snow" not in last_prompt(world)


OTHER_GUILD = DEMO_GUILD_ID + (1 << 22)  # a millisecond later: the other shard of two
LOUNGE = GENERAL + (1 << 22)
DEMO_SHARD = (DEMO_GUILD_ID >> 22) % 2


async def a_guild_on_the_other_shard(world) -> None:
    """A second configured guild, with #lounge, whose guild id puts it on the other shard."""
    assert (OTHER_GUILD >> 22) % 2 != DEMO_SHARD
    sandbox = world.sandbox.sandbox
    sandbox.add_guild("Night Café", guild_id=OTHER_GUILD)
    sandbox.add_text_channel(OTHER_GUILD, "lounge", channel_id=LOUNGE)
    sandbox.add_member(OTHER_GUILD, ALICE)
    tomori = {"name": "Tomori", "main": True, "system_prompt": "You are Tomori."}
    guild = {
        "id": str(OTHER_GUILD),
        "name": "Night Café",
        "personas": [{**tomori, "triggers": ["tomori"]}],
        "channels": [{"id": str(LOUNGE), "mode": "reactive"}],
    }
    await sync_to_async(config_import)(data={"version": 1, "guilds": [guild]})


async def test_one_shard_dropping_stops_reuse_on_its_channels_only(world):
    """A worker holds two shards and one shard's connection drops and stays down: the other
    shard's channel reads once (every window is dropped on a disconnect, seed 000) and then
    reuses its window again while the shard is still down; once the shard has resumed, its
    own channel reads its history by REST, saying the shard reconnected."""
    await a_guild_on_the_other_shard(world)
    await world.start_worker(shard_ids=[0, 1], shard_count=2)
    for channel in (GENERAL, LOUNGE):
        await turn(world, "tomori, hello", channel_id=channel)
        await turn(world, "tomori, still there?", channel_id=channel)
        assert (await last_window(channel))["rest_reason"] is None

    assert world.sandbox.drop_shard(DEMO_SHARD, 2, hold=True) == 1
    await eventually(lambda: world.client.windows.disconnected_shards == {DEMO_SHARD})
    await turn(world, "tomori, the other shard is down", channel_id=LOUNGE)
    assert (await last_window(LOUNGE))["rest_reason"] == "shard_reconnected"  # windows dropped
    before = history_reads(world)
    await turn(world, "tomori, and now?", channel_id=LOUNGE)

    assert history_reads(world) == before
    assert (await last_window(LOUNGE))["rest_reason"] is None  # reused while the shard is down
    assert world.client.windows.disconnected_shards == {DEMO_SHARD}

    assert world.sandbox.release_shard(DEMO_SHARD, 2) == 1
    await eventually(lambda: not world.client.windows.disconnected_shards)
    await world.drained()
    before = history_reads(world)
    await turn(world, "tomori, you are back", channel_id=GENERAL)

    assert history_reads(world) - before == 1
    window = await last_window(GENERAL)
    assert (window["rest_reason"], window["reanchor_reason"]) == ("shard_reconnected", "forced")
    await turn(world, "tomori, once more", channel_id=GENERAL)
    assert (await last_window(GENERAL))["rest_reason"] is None
