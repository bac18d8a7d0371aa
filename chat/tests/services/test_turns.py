"""`turn_prepare` and `turn_run` with a fake Discord and the fake model over HTTP."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt

import pytest
from asgiref.sync import sync_to_async
from django.apps import apps

from chat.leases import FencedPort
from chat.llm.fake_server import Fault, FaultKind, Reply, ScriptedToolCall
from chat.models import MessageIndex, ShortTermMemory, Turn
from chat.pipeline.types import HistoryMessage, MessageReference
from chat.ports import DeliveryError, LeaseLost, Speaker
from chat.selectors import turn_already_answered
from chat.services.recovery import Reconciled, turns_reconcile_interrupted
from chat.services.turn_record import LEFT_OUT_AFTER_TRIGGER, window_report
from chat.services.turns import turn_prepare, turn_run
from chat.tests.conftest import CHANNEL, GUILD_ID, NOW, Bench
from chat.tests.e2e.conftest import eventually
from chat.tests.factories import ALICE, BOB, TOMORI, message
from chat.windows import WindowRegistry
from personas.models import GuildConfig, Persona

pytestmark = pytest.mark.django_db(transaction=True)


def chat(n: int, content: str, **kw):
    return message(n, content, channel_id=CHANNEL, at=NOW - dt.timedelta(minutes=90 - n), **kw)


def seed(bench: Bench, count: int = 30) -> list:
    return [
        bench.discord.post(chat(n, f"line {n}", author=ALICE if n % 2 else BOB))
        for n in range(1, count + 1)
    ]


def database_state() -> dict[str, list[dict]]:
    """Every row of every table the product owns."""
    return {
        model.__name__: list(model.objects.order_by("pk").values())
        for app in ("chat", "personas")
        for model in apps.get_app_config(app).get_models()
    }


async def test_a_dry_run_renders_the_request_the_real_turn_sends(bench: Bench):
    seed(bench)
    first = bench.discord.post(chat(40, "tomori, how are you?"))
    await turn_run(runtime=bench.runtime, request=await bench.request(first, bench.tomori))
    # The conversation goes on: a new trigger while the window is warm and anchored.
    trigger = bench.discord.post(chat(41, "tomori, and the poem?", author=BOB))
    request = await bench.request(trigger, bench.tomori, is_queued_turn=True)

    tables = await sync_to_async(database_state)()
    registry = bench.runtime.windows.snapshot()
    warm = bench.runtime.caches.warm_contexts()
    prepared = await turn_prepare(runtime=bench.runtime, request=request, dry_run=True)

    assert await sync_to_async(database_state)() == tables
    assert bench.runtime.windows.snapshot() == registry
    assert bench.runtime.caches.warm_contexts() == warm
    assert len(bench.llm.chat_bodies) == 1  # the dry run called no model

    turn = await turn_run(runtime=bench.runtime, request=request)

    assert turn.status == Turn.Status.REPLIED
    assert bench.llm.chat_bodies[-1] == prepared.body
    assert turn.request == prepared.body
    assert any("tomori, and the poem?" in str(m["content"]) for m in prepared.body["messages"])


async def test_a_dry_run_stores_no_anchor_and_reads_rest_without_counting(bench: Bench):
    seed(bench)
    trigger = bench.discord.post(chat(40, "tomori?"))

    prepared = await turn_prepare(
        runtime=bench.runtime, request=await bench.request(trigger, bench.tomori), dry_run=True
    )

    assert prepared.rest_reason is not None  # nothing to reuse: read from Discord
    state = await sync_to_async(database_state)()
    assert (state["ChannelWindowAnchor"], state["Turn"]) == ([], [])
    assert bench.runtime.windows.rest_reads == 0
    assert (
        bench.runtime.windows.snapshot()
        == WindowRegistry(
            fetch_history=bench.discord.fetch_history, cache_view=bench.discord.cache_view
        ).snapshot()
    )


async def test_the_exchange_is_recorded_on_the_turn(bench: Bench):
    bench.tomori.llm_model, bench.tomori.fallback_models = "primary-model", ["backup-model"]
    await sync_to_async(bench.tomori.save)()
    memory = {"summary": "Alice asked about practice."}
    bench.llm.enqueue(
        Fault(FaultKind.HTTP_ERROR, status=401),
        Reply(
            tool_calls=(ScriptedToolCall("update_short_term_memory", memory),),
            prompt_tokens=100,
            completion_tokens=12,
            cached_prompt_tokens=0,
        ),
        Reply("See you at six!", prompt_tokens=140, completion_tokens=5, cached_prompt_tokens=96),
    )
    trigger = bench.discord.post(chat(40, "tomori, remember that practice is at six"))

    turn = await turn_run(runtime=bench.runtime, request=await bench.request(trigger, bench.tomori))

    await turn.arefresh_from_db()
    assert turn.status == Turn.Status.REPLIED
    assert (turn.prompt_tokens, turn.completion_tokens, turn.cached_prompt_tokens) == (240, 17, 96)
    assert turn.reply_text == "See you at six!"
    assert turn.request == bench.llm.chat_bodies[-1]
    assert [(a["model"], a["outcome"], a["status"]) for a in turn.attempts] == [
        ("primary-model", "client_error", 401),
        ("backup-model", "ok", None),
        ("backup-model", "ok", None),
    ]
    assert "fell back to backup-model" in turn.warnings[-1]
    assert turn.llm_ms > 0 and turn.build_ms is not None and turn.deliver_ms is not None
    stored = await ShortTermMemory.objects.aget(persona=bench.tomori, channel_id=CHANNEL)
    assert stored.summary == memory["summary"]
    assert stored.last_refreshed_turn_id == turn.id


async def test_delivered_messages_are_indexed_with_their_persona_and_webhook(bench: Bench):
    trigger = bench.discord.post(chat(40, "anon, sing!"))

    turn = await turn_run(runtime=bench.runtime, request=await bench.request(trigger, bench.anon))

    [row] = await sync_to_async(list)(MessageIndex.objects.select_related("persona"))
    assert turn.delivered_message_ids == [str(row.message_id)]
    assert (row.persona.name, row.channel_id, row.webhook_id) == ("Anon", CHANNEL, row.author_id)
    assert row.webhook_id is not None


async def test_an_abort_after_the_model_answered_delivers_nothing(bench: Bench):
    trigger = bench.discord.post(chat(40, "tomori?"))

    async def new_messages_arrived() -> str:
        return "2 new messages arrived during generation"

    turn = await turn_run(
        runtime=bench.runtime,
        request=await bench.request(trigger, bench.tomori),
        abort_if=new_messages_arrived,
    )

    await turn.arefresh_from_db()
    assert turn.status == Turn.Status.ABORTED
    assert turn.error == "2 new messages arrived during generation"
    assert bench.discord.delivered == []
    assert len(turn.attempts) == 1  # the exchange is on record all the same


async def test_a_burst_of_model_failures_sends_one_notice(bench: Bench):
    bench.llm.enqueue(*[Fault(FaultKind.HTTP_ERROR, status=401)] * 3)
    triggers = [bench.discord.post(chat(40 + n, f"tomori, question {n}")) for n in range(3)]

    turns = [
        await turn_run(runtime=bench.runtime, request=await bench.request(t, bench.tomori))
        for t in triggers
    ]

    assert [t.status for t in turns] == [Turn.Status.FAILED] * 3
    assert all(t.error.startswith("client_error (HTTP 401)") for t in turns)
    [(speaker, text, reply_to, _)] = bench.discord.delivered
    assert (speaker.is_main, reply_to) == (True, triggers[0].id)
    assert "could not answer just now" in text

    # A reply ends the burst: the next failure is announced again.
    reply = await turn_run(
        runtime=bench.runtime,
        request=await bench.request(bench.discord.post(chat(50, "tomori?")), bench.tomori),
    )
    bench.llm.enqueue(Fault(FaultKind.HTTP_ERROR, status=401))
    await turn_run(
        runtime=bench.runtime,
        request=await bench.request(bench.discord.post(chat(51, "tomori??")), bench.tomori),
    )
    assert reply.status == Turn.Status.REPLIED
    assert sum("could not answer" in text for _, text, _, _ in bench.discord.delivered) == 2


async def test_a_refused_delivery_fails_the_turn_and_indexes_nothing(bench: Bench):
    bench.discord.refuse_delivery = DeliveryError("403 Missing Permissions", permanent=True)
    trigger = bench.discord.post(chat(40, "tomori?"))

    turn = await turn_run(runtime=bench.runtime, request=await bench.request(trigger, bench.tomori))

    await turn.arefresh_from_db()
    assert turn.status == Turn.Status.FAILED
    assert turn.error == "delivery failed: 403 Missing Permissions"
    assert turn.reply_text  # the model's answer is kept for moderators
    assert await MessageIndex.objects.acount() == 0


class _LostLease:
    """The fence of a worker whose lease another worker took."""

    async def check(self, guild_id: int | None) -> None:
        raise LeaseLost(f"guild {guild_id} belongs to another worker now")


async def test_a_turn_whose_lease_was_lost_is_aborted_and_raises(bench: Bench):
    runtime = dataclasses.replace(bench.runtime, port=FencedPort(bench.discord, fence=_LostLease()))
    trigger = bench.discord.post(message(1, "tomori, hello?", author=ALICE))

    with pytest.raises(LeaseLost):
        await turn_run(runtime=runtime, request=await bench.request(trigger, bench.tomori))

    turn = await Turn.objects.aget()
    assert (turn.status, turn.delivered_message_ids) == (Turn.Status.ABORTED, [])
    assert "lost the lease" in turn.error
    assert bench.discord.delivered == []
    # Not an answer: the worker that owns the channel now answers the trigger.
    assert not await sync_to_async(turn_already_answered)(
        trigger_id=trigger.id, persona_id=bench.tomori.id
    )


async def test_a_budget_that_cannot_fit_is_a_warning_on_the_turn(bench: Bench):
    bench.tomori.context_window, bench.tomori.max_output_tokens = 600, 500
    bench.tomori.system_prompt = "Be Tomori. " * 60
    await sync_to_async(bench.tomori.save)()
    seed(bench)
    trigger = bench.discord.post(chat(40, "tomori, a long question " * 5))

    turn = await turn_run(runtime=bench.runtime, request=await bench.request(trigger, bench.tomori))

    await turn.arefresh_from_db()
    assert turn.status == Turn.Status.REPLIED
    assert turn.truncation["warning"] in turn.warnings
    assert turn.truncation["removed_entries"] > 0


async def test_a_second_turn_for_an_answered_trigger_sends_nothing(bench: Bench):
    trigger = bench.discord.post(chat(40, "tomori?"))
    request = await bench.request(trigger, bench.tomori)
    first = await turn_run(runtime=bench.runtime, request=request)

    second = await turn_run(runtime=bench.runtime, request=request)  # e.g. an overlapping worker

    assert first.status == Turn.Status.REPLIED
    assert second.status == Turn.Status.ABORTED
    assert "already answered" in second.error
    assert len(bench.discord.delivered) == 1


async def test_interrupted_turns_are_reconciled_against_the_channel(bench: Bench):
    sent_trigger = bench.discord.post(chat(40, "tomori, one"))
    unsent_trigger = bench.discord.post(chat(41, "anon, two"))
    running_trigger = bench.discord.post(chat(42, "tomori, three"))
    # The worker sent Tomori's reply to the first, then died before recording it.
    [reply] = await bench.discord.deliver(
        channel_id=CHANNEL,
        speaker=Speaker(persona_id=bench.tomori.id, name="Tomori", is_main=True),
        text="one!",
        reply_to=sent_trigger.id,
    )

    def leave(trigger, persona, status):
        return Turn.objects.create(
            guild_id=GUILD_ID,
            channel_id=CHANNEL,
            persona=persona,
            persona_name=persona.name,
            trigger_message_id=trigger.id,
            reason="trigger_word",
            status=status,
        )

    sent = await sync_to_async(leave)(sent_trigger, bench.tomori, Turn.Status.DELIVERING)
    unsent = await sync_to_async(leave)(unsent_trigger, bench.anon, Turn.Status.DELIVERING)
    running = await sync_to_async(leave)(running_trigger, bench.tomori, Turn.Status.RUNNING)

    settled = await turns_reconcile_interrupted(port=bench.discord, on_shard=lambda _: True)

    assert settled == Reconciled(aborted=1, replied=1, unsent=1)
    for turn in (sent, unsent, running):
        await turn.arefresh_from_db()
    assert (sent.status, sent.delivered_message_ids) == ("replied", [str(reply.message_id)])
    assert (unsent.status, running.status) == ("aborted", "aborted")
    row = await MessageIndex.objects.select_related("persona").aget(message_id=reply.message_id)
    assert row.persona.name == "Tomori"
    assert await sync_to_async(turn_already_answered)(
        trigger_id=sent_trigger.id, persona_id=bench.tomori.id
    )


async def test_a_worker_stopping_mid_send_leaves_the_turn_to_reconcile(bench: Bench):
    bench.discord.hold_delivery = asyncio.Event()
    trigger = bench.discord.post(chat(40, "tomori?"))
    running = asyncio.create_task(
        turn_run(runtime=bench.runtime, request=await bench.request(trigger, bench.tomori))
    )
    await eventually(lambda: Turn.objects.filter(status=Turn.Status.DELIVERING).aexists())

    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running

    turn = await Turn.objects.aget(trigger_message_id=trigger.id)
    assert turn.status == Turn.Status.DELIVERING  # not aborted: the reply may be out there


async def test_a_queued_trigger_older_than_the_newest_window_keeps_its_own_context(bench: Bench):
    await GuildConfig.objects.filter(guild_id=GUILD_ID).aupdate(message_fetch_limit=20)
    seed(bench, count=30)
    old_trigger = bench.discord.post(chat(31, "tomori, what about line 30?"))
    for n in range(32, 62):  # more than a window's worth is said while it waits
        bench.discord.post(chat(n, f"later {n}", author=BOB))

    turn = await turn_run(
        runtime=bench.runtime,
        request=await bench.request(old_trigger, bench.tomori, is_queued_turn=True),
    )

    await turn.arefresh_from_db()
    history_ids = {
        int(source)
        for item in turn.context_items
        if item["tag"] == "dialogue_history"
        for source in item["source_ids"]
    }
    assert old_trigger.id in history_ids
    assert max(history_ids) == old_trigger.id  # its window ends at it
    assert 14 <= len(history_ids) <= 20  # and holds what was said before it


async def test_reply_targets_are_fetched_only_up_to_the_trigger_and_once_each(bench: Bench):
    await GuildConfig.objects.filter(guild_id=GUILD_ID).aupdate(message_fetch_limit=20)
    lines = seed(bench, count=30)  # lines 1..10 are outside every window below

    def replying_to(n: int, target: HistoryMessage, content: str) -> HistoryMessage:
        return bench.discord.post(chat(n, content, reference=MessageReference(target.id, CHANNEL)))

    first = replying_to(31, lines[0], "tomori, about line 1?")
    replying_to(32, lines[1], "and line 2, for a later turn")
    await turn_run(
        runtime=bench.runtime,
        request=await bench.request(first, bench.tomori, is_queued_turn=True),
    )
    reads_for_the_first_turn = list(bench.discord.message_reads)
    second = bench.discord.post(chat(33, "tomori, both then?"))
    await turn_run(runtime=bench.runtime, request=await bench.request(second, bench.tomori))

    assert reads_for_the_first_turn == [lines[0].id]  # not line 2: that is after the trigger
    assert bench.discord.message_reads == [lines[0].id, lines[1].id]  # line 1 not again


async def test_queued_triggers_the_window_moved_past_read_further_back_once(bench: Bench):
    await GuildConfig.objects.filter(guild_id=GUILD_ID).aupdate(message_fetch_limit=20)
    seed(bench, count=30)
    queued = [bench.discord.post(chat(n, f"tomori, question {n}?")) for n in range(31, 36)]
    for n in range(36, 66):  # more than a window's worth is said while they wait
        bench.discord.post(chat(n, f"later {n}", author=BOB))

    windows = []
    for trigger in queued:
        turn = await turn_run(
            runtime=bench.runtime,
            request=await bench.request(trigger, bench.tomori, is_queued_turn=True),
        )
        await turn.arefresh_from_db()
        windows.append(turn.window)

    assert len(bench.discord.history_reads) == 2  # the newest window, then further back once
    assert [w["rest_reason"] for w in windows] == ["no_previous_window"] + [None] * 4
    for trigger, window in zip(queued, windows, strict=True):
        assert window["message_ids"][-1] == str(trigger.id)
        assert 14 <= len(window["message_ids"]) <= 20  # what was said before it


async def test_a_queued_turn_starts_at_the_channels_anchor_and_ends_at_its_trigger(
    bench: Bench,
):
    await GuildConfig.objects.filter(guild_id=GUILD_ID).aupdate(message_fetch_limit=20)
    lines = seed(bench, count=30)
    ordinary = await turn_prepare(
        runtime=bench.runtime, request=await bench.request(lines[-1], bench.tomori)
    )
    assert ordinary.window["anchor_message_id"] == str(lines[16].id)  # the newest 14: 17..30
    triggers = [bench.discord.post(chat(n, f"tomori, question {n}?")) for n in range(31, 46)]

    queued = await turn_prepare(
        runtime=bench.runtime,
        request=await bench.request(
            triggers[0],
            bench.tomori,
            is_queued_turn=True,
            later_queued_trigger_ids=frozenset(t.id for t in triggers[1:]),
        ),
    )

    # The newest window (26..45) has moved past the anchor; the turn still starts there.
    assert [m.id for m in queued.turn_input.history] == [m.id for m in lines[16:]] + [
        triggers[0].id
    ]
    assert (queued.window["reanchor_reason"], queued.window["advanced_by"]) == (None, 0)
    report = window_report(prepared=queued)
    assert {"reason": LEFT_OUT_AFTER_TRIGGER, "count": 14} in report["left_out"]


async def test_a_queued_window_past_the_limit_advances_the_anchor_by_a_stride(bench: Bench):
    await GuildConfig.objects.filter(guild_id=GUILD_ID).aupdate(message_fetch_limit=20)
    lines = seed(bench, count=30)
    await turn_prepare(runtime=bench.runtime, request=await bench.request(lines[-1], bench.tomori))
    triggers = [bench.discord.post(chat(n, f"tomori, question {n}?")) for n in range(31, 51)]

    # 17..38 would be 22 messages: the anchor (17) moves one stride (6) to 23.
    queued = await turn_prepare(
        runtime=bench.runtime,
        request=await bench.request(triggers[7], bench.tomori, is_queued_turn=True),
    )

    history = [m.id for m in queued.turn_input.history]
    assert history == [m.id for m in lines[22:]] + [t.id for t in triggers[:8]]
    assert (queued.window["reanchor_reason"], queued.window["advanced_by"]) == (None, 6)


async def test_each_streamed_piece_has_its_own_nonce_and_the_humanizer_applies(bench: Bench):
    await Persona.objects.filter(id=bench.tomori.id).aupdate(force_lowercase=True)
    bench.llm.enqueue(Reply("Tomori: One; two.\n\nThree FOUR.\n\nFive."))
    trigger = bench.discord.post(chat(40, "tomori, count"))
    persona = await Persona.objects.aget(id=bench.tomori.id)

    turn = await turn_run(runtime=bench.runtime, request=await bench.request(trigger, persona))

    assert [text for _, text, _, _ in bench.discord.delivered] == [
        "one; two.",
        "three four.",
        "five.",
    ]
    assert [reply_to for _, _, reply_to, _ in bench.discord.delivered] == [trigger.id, None, None]
    assert bench.discord.nonce_seeds == [f"{trigger.id}:{persona.id}:{n}" for n in range(3)]
    assert turn.status == "replied" and len(turn.delivered_message_ids) == 3


async def test_a_crash_between_pieces_is_reconciled_to_the_pieces_on_record(bench: Bench):
    trigger = bench.discord.post(chat(40, "tomori, long story"))
    first = bench.discord.post(
        message(
            41,
            "first paragraph",
            channel_id=CHANNEL,
            author=TOMORI,
            at=NOW,
        )
    )
    turn = await Turn.objects.acreate(
        channel_id=CHANNEL,
        guild_id=GUILD_ID,
        persona=bench.tomori,
        persona_name="Tomori",
        trigger_message_id=trigger.id,
        reason="trigger_word",
        status=Turn.Status.DELIVERING,
        delivered_message_ids=[str(first.id)],
    )
    await MessageIndex.objects.acreate(
        message_id=first.id, channel_id=CHANNEL, guild_id=GUILD_ID, persona=bench.tomori
    )

    settled = await turns_reconcile_interrupted(port=bench.discord, on_shard=lambda _: True)

    await turn.arefresh_from_db()
    assert settled == Reconciled(replied=1)
    assert turn.status == "replied" and turn.delivered_message_ids == [str(first.id)]
    assert "stopped while the reply was being delivered" in turn.error
    assert bench.discord.delivered == []  # nothing sent again
    assert await sync_to_async(turn_already_answered)(
        trigger_id=trigger.id, persona_id=bench.tomori.id
    )
