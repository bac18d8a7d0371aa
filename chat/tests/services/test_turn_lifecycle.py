"""A turn's status changes only through `chat.services.turn_lifecycle`: the allowed changes,
the refused ones, the claim on the trigger, a turn settled elsewhere, the live update after the
commit, and a walk of the code that fails when any other module assigns a status."""

from __future__ import annotations

import ast
import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from channels.layers import DEFAULT_CHANNEL_LAYER, channel_layers
from django.db import connections

from botproject.live_updates import TurnFinished, channel_group, parse_live_update
from chat.models import MessageIndex, Turn
from chat.ports import Delivered
from chat.services.turn_lifecycle import (
    StaleTurn,
    TransitionRefused,
    transition_allowed,
    turn_aborted,
    turn_claim,
    turn_failed,
    turn_piece_delivered,
    turn_refused,
    turn_replied,
    turn_withheld,
    turns_abort_interrupted,
)
from personas.models import GuildConfig, Persona

S = Turn.Status
ALL = list(S)

# Written out here, not read from the module: the lifecycle as the product promises it.
ALLOWED = {
    (S.RUNNING, S.DELIVERING),
    (S.RUNNING, S.REPLIED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.ABORTED),
    (S.RUNNING, S.REFUSED),
    (S.DELIVERING, S.REPLIED),
    (S.DELIVERING, S.FAILED),
    (S.DELIVERING, S.ABORTED),
    (S.DELIVERING, S.WITHHELD),
}


@pytest.mark.parametrize(("source", "target"), list(itertools.product(ALL, ALL)))
def test_the_table_allows_exactly_the_promised_changes(source, target):
    assert transition_allowed(source=source, target=target) is ((source, target) in ALLOWED)


def _turn(status: str, *, trigger: int = 500, persona_name: str = "Tomori") -> Turn:
    guild, _ = GuildConfig.objects.get_or_create(guild_id=1, defaults={"name": "Band practice"})
    persona, _ = Persona.objects.get_or_create(
        guild=guild, name=persona_name, defaults={"is_main": persona_name == "Tomori"}
    )
    return Turn.objects.create(
        channel_id=7,
        guild_id=1,
        persona=persona,
        persona_name=persona_name,
        reason="mention",
        trigger_message_id=trigger,
        status=status,
    )


async def _change(turn: Turn, target: str) -> bool:
    if target == S.DELIVERING:
        return await turn_claim(turn=turn)
    change = {
        S.REPLIED: lambda: turn_replied(turn=turn),
        S.FAILED: lambda: turn_failed(turn=turn, error="the model failed"),
        S.ABORTED: lambda: turn_aborted(turn=turn, reason="stopped"),
        S.WITHHELD: lambda: turn_withheld(turn=turn, reason="flagged"),
        S.REFUSED: lambda: turn_refused(turn=turn, reason="the day's tokens are spent"),
    }[target]
    return await change()


TARGETS = [s for s in ALL if s != S.RUNNING]


@pytest.fixture(autouse=True)
async def _close_the_threads_connection() -> AsyncIterator[None]:
    """The lifecycle's database work runs on sync_to_async's thread: close its connection
    there after each test, so the test database can be dropped."""
    yield
    await sync_to_async(connections.close_all)()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("source", "target"), list(itertools.product(ALL, TARGETS)))
async def test_each_change_saves_what_the_table_allows_and_refuses_the_rest(source, target):
    turn = await sync_to_async(_turn)(source)

    if (source, target) in ALLOWED:
        assert await _change(turn, target) is True
        stored = await Turn.objects.aget(pk=turn.pk)
        assert (turn.status, stored.status) == (target, target)
        assert (stored.finished_at is None) is (target == S.DELIVERING)
    else:
        with pytest.raises(TransitionRefused, match=f"{source} → {target}"):
            await _change(turn, target)
        stored = await Turn.objects.aget(pk=turn.pk)
        assert (turn.status, stored.status, stored.finished_at) == (source, source, None)


@pytest.mark.django_db(transaction=True)
async def test_a_second_claim_on_the_same_trigger_and_persona_is_refused():
    first, second = [await sync_to_async(_turn)(S.RUNNING) for _ in range(2)]
    other_persona = await sync_to_async(_turn)(S.RUNNING, persona_name="Anon")

    assert await turn_claim(turn=first) is True
    assert await turn_claim(turn=second) is False
    assert second.status == S.RUNNING
    assert (await Turn.objects.aget(pk=second.pk)).status == S.RUNNING
    assert await turn_aborted(turn=second, reason="answered elsewhere") is True
    assert await turn_claim(turn=other_persona) is True  # each persona may answer the message once


@pytest.mark.django_db(transaction=True)
async def test_a_turn_settled_elsewhere_is_not_moved_back():
    running = await sync_to_async(_turn)(S.RUNNING)
    delivering = await sync_to_async(_turn)(S.DELIVERING, trigger=501)
    # A new shard owner's recovery aborts them while this process still holds them.
    moved = await sync_to_async(turns_abort_interrupted)(
        turn_ids=[running.pk, delivering.pk], reason="the worker stopped during the turn"
    )
    assert moved == 1  # only the running one: recovery never aborts a delivering turn so

    with pytest.raises(StaleTurn, match="aborted"):
        await turn_claim(turn=running)
    assert running.status == S.ABORTED
    stored = await Turn.objects.aget(pk=running.pk)
    assert (stored.status, stored.error) == (S.ABORTED, "the worker stopped during the turn")

    await sync_to_async(Turn.objects.filter(pk=delivering.pk).update)(status=S.REPLIED)
    assert await turn_failed(turn=delivering, error="late") is False
    stored = await Turn.objects.aget(pk=delivering.pk)
    assert (delivering.status, stored.status, stored.error) == (S.REPLIED, S.REPLIED, "")


@pytest.mark.django_db(transaction=True)
async def test_pieces_are_recorded_and_indexed_only_while_delivering():
    turn = await sync_to_async(_turn)(S.RUNNING)
    piece = Delivered(message_id=9001, author_id=1, webhook_id=None, message=None)
    with pytest.raises(TransitionRefused, match="running"):
        await turn_piece_delivered(turn=turn, delivered=[piece], shown=["first"])

    await turn_claim(turn=turn)
    await turn_piece_delivered(turn=turn, delivered=[piece], shown=["first"])
    second = Delivered(message_id=9002, author_id=1, webhook_id=None, message=None)
    await turn_piece_delivered(turn=turn, delivered=[second], shown=["first", "second"])

    stored = await Turn.objects.aget(pk=turn.pk)
    assert (stored.status, stored.delivered_message_ids, stored.reply_text) == (
        S.DELIVERING,
        ["9001", "9002"],
        "first\n\nsecond",
    )
    assert await MessageIndex.objects.filter(message_id__in=[9001, 9002]).acount() == 2


@pytest.mark.django_db(transaction=True)
async def test_the_finished_update_goes_out_once_the_change_is_committed():
    layer = channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)
    inbox = await layer.new_channel()
    await layer.group_add(channel_group(7), inbox)
    turn = await sync_to_async(_turn)(S.RUNNING)

    await turn_refused(turn=turn, reason="the day's tokens are spent")

    update = parse_live_update(await asyncio.wait_for(layer.receive(inbox), 10))
    assert update == TurnFinished(turn_id=turn.pk, persona="Tomori", status="refused")
    stored = await Turn.objects.aget(pk=turn.pk)
    assert (stored.status, stored.error) == (S.REFUSED, "the day's tokens are spent")


# --- Nothing else assigns a status ---------------------------------------------------------

ROOT = Path(__file__).resolve().parents[3]
OWNER = ROOT / "chat" / "services" / "turn_lifecycle.py"
FIXTURE = ROOT / "chat" / "tests" / "services" / "turn_status_fixture.py"


def status_assignments(path: Path) -> list[str]:
    """Where ``path`` sets a turn's status: ``<turn>.status = …`` (a target whose name says
    turn, or a value that is a `Turn.Status`), and ``status=Turn.Status.…`` passed to a call
    (``update``, ``create``, a constructor). Filters (``filter(status=…)``) only read."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []

    def is_turn_status(value: ast.AST) -> bool:
        return "Turn.Status" in ast.unparse(value) or "TurnStatus" in ast.unparse(value)

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = [
                t
                for target in node.targets
                for t in (target.elts if isinstance(target, ast.Tuple) else [target])
            ]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == "status":
                    owner = ast.unparse(target.value).lower()
                    if "turn" in owner or is_turn_status(node.value):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        elif isinstance(node, ast.Call):
            name = ast.unparse(node.func).rsplit(".", 1)[-1]
            if name in {"filter", "exclude", "get", "aget", "first", "Q"}:
                continue
            for keyword in node.keywords:
                if keyword.arg == "status" and is_turn_status(keyword.value):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def product_modules() -> list[Path]:
    return [
        path
        for package in ("botproject", "chat", "personas", "dashboard")
        for path in (ROOT / package).rglob("*.py")
        if "tests" not in path.parts and "migrations" not in path.parts and path != OWNER
    ]


def test_no_module_but_the_lifecycle_assigns_a_turns_status():
    assert [line for path in product_modules() for line in status_assignments(path)] == []


def test_the_walk_finds_each_kind_of_assignment():
    found = status_assignments(FIXTURE)
    assert [line.rsplit(":", 1)[1] for line in found] == ["8", "9", "10", "11"]
