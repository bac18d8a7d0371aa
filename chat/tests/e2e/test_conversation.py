"""A long conversation on PostgreSQL, each message posted the moment the previous reply
appears: every prompt holds the guild channel's window, never a DM's default one. And a busy
stretch, many triggers posted at once: each queued turn's prompt starts where the previous
one's did (the channel's anchor) and ends at its own trigger."""

from __future__ import annotations

import re
from itertools import pairwise

import pytest
from asgiref.sync import sync_to_async

from chat.llm.fake_server import StreamPace
from chat.models import Turn
from chat.pipeline.items import ItemTag
from chat.tests.e2e.conftest import ALICE, BOB, GENERAL, eventually
from personas.models import ChannelConfig

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

LIMIT = 20
STRIDE = 6  # floor(0.3 × 20), even
TURNS = 30


def history_sizes() -> list[int]:
    """Per turn, in order: how many Discord messages its prompt's dialogue history holds."""
    sizes = []
    for items in (turn.context_items for turn in Turn.objects.order_by("id")):
        ids = {
            source
            for item in items
            if item["tag"] == ItemTag.DIALOGUE_HISTORY
            for source in item["source_ids"]
        }
        sizes.append(len(ids))
    return sizes


async def test_every_prompt_of_a_long_conversation_holds_the_channels_window(world):
    await ChannelConfig.objects.filter(channel_id=GENERAL).aupdate(message_fetch_limit=LIMIT)
    for n in range(30):  # earlier conversation, before the worker started
        world.say(f"earlier line {n}", author=ALICE if n % 2 else BOB)
    await world.start_worker()

    for n in range(TURNS):
        trigger = world.say(f"tomori, question {n}")
        await eventually(
            lambda trigger=trigger: any(
                (m.get("message_reference") or {}).get("message_id") == trigger["id"]
                for m in world.bot_messages(GENERAL)
            )
        )
    await world.drained()

    sizes = await sync_to_async(history_sizes)()
    assert len(sizes) == TURNS
    assert all(LIMIT - STRIDE <= size <= LIMIT for size in sizes), sizes


async def test_a_conversation_reads_its_history_over_rest_once(world):
    await world.start_worker()
    history_route = ("GET", "/channels/{channel_id}/messages")
    before = world.sandbox.request_counts.get(history_route, 0)

    for n in range(20):  # a trigger, its reply, the next trigger: the channel idles in between
        trigger = world.say(f"tomori, question {n}")
        await eventually(
            lambda trigger=trigger: any(
                (m.get("message_reference") or {}).get("message_id") == trigger["id"]
                for m in world.bot_messages(GENERAL)
            )
        )
    await world.drained()

    reads = world.sandbox.request_counts.get(history_route, 0) - before
    print(f"REST history reads for 20 conversational turns: {reads}")
    assert reads <= 1
    assert await sync_to_async(Turn.objects.filter(status="replied").count)() == 20


async def test_a_busy_stretch_fetches_each_reply_target_once(world):
    await ChannelConfig.objects.filter(channel_id=GENERAL).aupdate(message_fetch_limit=LIMIT)
    targets = [int(world.say(f"an old thought {n}", author=BOB)["id"]) for n in range(3)]
    for n in range(30):  # the targets fall out of every window
        world.say(f"chatter {n}", author=BOB)
    await world.start_worker()
    single_message = ("GET", "/channels/{channel_id}/messages/{message_id}")
    before = world.sandbox.request_counts.get(single_message, 0)

    triggers = [
        world.say(f"tomori, about that ({n})", reply_to=targets[n % 3])["id"] for n in range(12)
    ]
    await eventually(
        lambda: all(
            any(
                (m.get("message_reference") or {}).get("message_id") == trigger
                for m in world.bot_messages(GENERAL)
            )
            for trigger in triggers
        ),
        within=60,
    )
    await world.drained()

    fetches = world.sandbox.request_counts.get(single_message, 0) - before
    print(f"single-message GETs for 12 replies to 3 targets: {fetches}")
    # At most one GET per distinct reply target: the three old thoughts, and those triggers the
    # moving window has left behind (the bot's replies reference them). Fetching per turn, as
    # before, cost a GET per missing target per turn: dozens here.
    assert 3 <= fetches <= len(targets) + len(triggers)


MODEL_PACE = StreamPace(first_token_s=0.2, words_per_s=60)
"""A model that takes a moment to answer: the first word after 0.2 s, then 60 a second."""
_HISTORY_LINE = re.compile(r"\[ref_\d+\] ([^\n]*)")


def history_lines(body: dict) -> list[str]:
    """The texts of the Discord messages a model request shows, oldest first (each message
    of the dialogue history is written ``[ref_N] text``)."""
    return _HISTORY_LINE.findall("\n".join(str(m["content"]) for m in body["messages"]))


async def test_queued_turns_of_a_busy_stretch_share_their_prompts_start(world):
    await ChannelConfig.objects.filter(channel_id=GENERAL).aupdate(message_fetch_limit=LIMIT)
    earlier = [f"earlier line {n}" for n in range(25)]
    for n, text in enumerate(earlier):  # before the worker started
        world.say(text, author=ALICE if n % 2 else BOB)
    world.llm.pace = MODEL_PACE
    await world.start_worker(stream=True)

    questions = [f"tomori, question {n}" for n in range(TURNS)]
    triggers = [world.say(text)["id"] for text in questions]  # all at once: queued turns
    await eventually(
        lambda: all(
            any(
                (m.get("message_reference") or {}).get("message_id") == trigger
                for m in world.bot_messages(GENERAL)
            )
            for trigger in triggers
        ),
        within=90,
    )
    await world.drained()

    channel_order = earlier + questions
    windows = [history_lines(body) for body in world.llm.chat_bodies]
    assert len(windows) == TURNS
    # Each turn ends at its own trigger: the questions after it wait for their own turns.
    assert [window[-1] for window in windows] == questions
    for window in windows:
        first = channel_order.index(window[0])
        assert window == channel_order[first : first + len(window)]
        assert LIMIT - STRIDE <= len(window) <= LIMIT
    # Consecutive prompts start at the same message unless the anchor moved by a stride.
    moves = [
        channel_order.index(after[0]) - channel_order.index(before[0])
        for before, after in pairwise(windows)
    ]
    assert set(moves) <= {0, STRIDE}, moves
    assert moves.count(STRIDE) <= len(moves) // (STRIDE + 1) + 1, moves  # at most once a stride
    # The turn records say so too: the stored anchor kept, or advanced by one stride.
    records = await sync_to_async(
        lambda: [
            turn.window
            for turn in Turn.objects.filter(trigger_message_id__in=map(int, triggers)).order_by(
                "id"
            )
        ]
    )()
    assert len(records) == TURNS
    assert [r["reanchor_reason"] for r in records[1:]] == [None] * (TURNS - 1)
    assert {r["advanced_by"] for r in records[1:]} <= {0, STRIDE}
