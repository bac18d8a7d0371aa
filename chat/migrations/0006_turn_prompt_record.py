"""Turns keep their prompt items and exact request once, compressed, in ``prompt_record``.

Existing turns are carried over (items and request copied into the new field) before the old
columns go, so no recorded prompt is lost.
"""

from django.db import migrations

import chat.fields


def carry_over(apps, schema_editor):
    Turn = apps.get_model("chat", "Turn")
    for turn in Turn.objects.only("id", "context_items", "request").iterator(chunk_size=500):
        Turn.objects.filter(id=turn.id).update(
            prompt_record={"context_items": turn.context_items, "request": turn.request}
        )


def carry_back(apps, schema_editor):
    Turn = apps.get_model("chat", "Turn")
    for turn in Turn.objects.only("id", "prompt_record").iterator(chunk_size=500):
        record = turn.prompt_record or {}
        Turn.objects.filter(id=turn.id).update(
            context_items=record.get("context_items", []), request=record.get("request", {})
        )


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0005_memory_expiry_planner_steps_maintenance_turns"),
    ]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="prompt_record",
            field=chat.fields.CompressedJSONField(default=dict),
        ),
        migrations.RunPython(carry_over, carry_back),
        migrations.RemoveField(model_name="turn", name="context_items"),
        migrations.RemoveField(model_name="turn", name="request"),
    ]
