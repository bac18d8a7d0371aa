"""A turn's prompt is stored once, compressed, and read back exactly."""

from __future__ import annotations

import json

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from chat.models import Turn

REQUEST = {
    "model": "m",
    "messages": [
        {"role": "system", "content": "You are Tomori. " * 40},
        *(
            {"role": "user", "content": f"alice: line {n} about the band and the poem"}
            for n in range(60)
        ),
    ],
}
ITEMS = [
    {"tag": "dialogue_history", "role": "user", "text": m["content"], "tokens": 9, "source_ids": []}
    for m in REQUEST["messages"]
]


@pytest.mark.django_db
def test_items_and_request_read_back_exactly_and_take_less_room_than_one_copy():
    turn = Turn.objects.create(
        channel_id=1, persona_name="Tomori", reason="mention", context_items=ITEMS, request=REQUEST
    )

    stored = Turn.objects.get(id=turn.id)

    assert (stored.context_items, stored.request) == (ITEMS, REQUEST)
    with connection.cursor() as cursor:
        cursor.execute("SELECT prompt_record FROM chat_turn WHERE id = %s", [turn.id])
        size = len(bytes(cursor.fetchone()[0]))
    assert size < len(json.dumps(REQUEST)) / 2  # both copies together, well under one raw copy


@pytest.mark.django_db(transaction=True)
def test_the_migration_carries_recorded_prompts_over():
    executor = MigrationExecutor(connection)
    before = [("chat", "0005_memory_expiry_planner_steps_maintenance_turns")]
    latest = executor.loader.graph.leaf_nodes("chat")
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps.get_model("chat", "Turn")
        old.objects.create(
            channel_id=1,
            persona_name="Tomori",
            reason="mention",
            context_items=ITEMS,
            request=REQUEST,
        )
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
        turn = Turn.objects.get()
        assert (turn.context_items, turn.request) == (ITEMS, REQUEST)
    finally:
        MigrationExecutor(connection).migrate(latest)
