"""A persona's test cases (DESIGN §3b, "Persona tests"): its test set.

A case is stored as its JSON (`personas.case_schema.PersonaCaseSpec`, checked on every way in:
the dashboard's forms, a test file, the configuration file), so what is exported is what was
imported. Runs and their results are the bot's records (`chat.models_persona_tests`).
"""

from __future__ import annotations

from django.db import models, transaction
from django.db.models.functions import Length, Lower
from django.db.models.lookups import LessThanOrEqual
from django.db.models.signals import post_save
from django.dispatch import receiver

from chat.pipeline.types import PrivacyLevel
from personas.case_schema import CASE_NAME_MAX, case_json, parse_case
from personas.models import Persona, UserPrivacy


class PersonaTestCase(models.Model):
    """One case of a persona's test set.

    ``spec`` is the case as the configuration file's ``tests`` list holds it (its ``name``
    repeated there). A case saved from a turn keeps the turn it came from and ``author_ids``:
    each history author's Discord id by the name the case shows (never exported), so the lines
    of someone who later chooses full privacy are removed (`persona_cases_forget_user`).
    """

    persona = models.ForeignKey(Persona, on_delete=models.CASCADE, related_name="test_cases")
    name = models.CharField(max_length=CASE_NAME_MAX)
    spec = models.JSONField()
    author_ids = models.JSONField(
        default=dict,
        blank=True,
        help_text="A case saved from a turn: each author's Discord id by the name shown",
    )
    source_turn_id = models.PositiveBigIntegerField(
        null=True, blank=True, help_text="The turn the case was saved from"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint("persona", Lower("name"), name="persona_test_case_unique_name"),
            models.CheckConstraint(
                condition=LessThanOrEqual(Length("name"), CASE_NAME_MAX),
                name="persona_test_case_name_length",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.persona.name})"


def persona_cases_forget_user(*, guild_id: int, user_id: int) -> int:
    """Remove ``user_id``'s messages from every case of the guild saved from a turn: their
    history lines and the memory lines about them (``About <name>: …``) go, replies to them
    lose their target, and a case whose trigger was theirs is deleted (it has nothing left to
    answer). Returns how many cases changed. Runs in the caller's transaction when there is
    one (the privacy row's save), else in one of its own."""
    with transaction.atomic():
        return _forget_user(guild_id=guild_id, user_id=str(user_id))


def _forget_user(*, guild_id: int, user_id: str) -> int:
    mine = user_id
    changed = 0
    cases = PersonaTestCase.objects.filter(persona__guild__guild_id=guild_id).select_for_update()
    for case in cases:
        names = {name for name, i in (case.author_ids or {}).items() if i == mine}
        if not names:
            continue
        spec = dict(case.spec)
        if spec["message"]["author"] in names:
            case.delete()
            changed += 1
            continue
        kept = [i for i, line in enumerate(spec.get("history", [])) if line["author"] not in names]
        theirs = tuple(f"About {name}:" for name in names)  # personal memory lines
        spec["memories"] = [m for m in spec.get("memories", []) if not m.startswith(theirs)]
        spec["earlier_memories"] = [
            {**earlier, "lines": lines}
            for earlier in spec.get("earlier_memories", [])
            if (lines := [m for m in earlier["lines"] if not m.startswith(theirs)])
        ]
        spec["history"], spec["message"] = _without_lines(
            spec.get("history", []), spec["message"], kept
        )
        spec["earlier_memories"] = _memories_reindexed(spec.get("earlier_memories", []), kept)
        case.spec = case_json(parse_case(spec))
        case.author_ids = {n: i for n, i in case.author_ids.items() if n not in names}
        case.save(update_fields=["spec", "author_ids", "updated_at"])
        changed += 1
    return changed


def _without_lines(history: list[dict], message: dict, kept: list[int]) -> tuple[list[dict], dict]:
    """The ``kept`` lines of ``history`` (their indices), each ``reply_to`` renumbered (a reply
    to a removed line loses it), and ``message`` likewise."""
    new_index = {old: new for new, old in enumerate(kept)}

    def renumbered(line: dict) -> dict:
        line = dict(line)
        if "reply_to" in line:
            if line["reply_to"] in new_index:
                line["reply_to"] = new_index[line["reply_to"]]
            else:
                del line["reply_to"]
        return line

    return [renumbered(history[index]) for index in kept], renumbered(message)


def _memories_reindexed(earlier: list[dict], kept: list[int]) -> list[dict]:
    """Earlier memories after a removed line move to the kept line before it (none: dropped)."""
    result = []
    for memories in earlier:
        before = [new for new, old in enumerate(kept) if old <= memories["after"]]
        if before:
            result.append({**memories, "after": before[-1]})
    return result


@receiver(post_save, sender=UserPrivacy, dispatch_uid="forget_cases_on_full_privacy")
def forget_cases_on_full_privacy(sender: type, instance: UserPrivacy, **kwargs: object) -> None:
    """Full-privacy users never appear in a saved case: whenever a privacy row is saved at
    ``full`` (the dashboard, a configuration import, the ``/privacy`` command), that user's
    lines leave the guild's cases."""
    if instance.level == PrivacyLevel.FULL:
        persona_cases_forget_user(guild_id=instance.guild.guild_id, user_id=instance.user_id)
