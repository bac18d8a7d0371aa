"""A persona's test cases (DESIGN §3b, "Persona tests"): its test set.

A case is stored as its JSON (`personas.case_schema.PersonaCaseSpec`, checked on every way in:
the dashboard's forms, a test file, the configuration file), so what is exported is what was
imported. Runs and their results are the bot's records (`chat.models_persona_tests`).
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Length, Lower
from django.db.models.lookups import LessThanOrEqual

from personas.case_schema import CASE_NAME_MAX
from personas.models import Persona


class PersonaTestCase(models.Model):
    """One case of a persona's test set.

    ``spec`` is the case as the configuration file's ``tests`` list holds it (its ``name``
    repeated there). A case saved from a turn keeps the turn it came from and ``author_ids``:
    each history author's Discord id by the name the case shows (never exported), so the lines
    of someone who later chooses full privacy are removed (`personas.case_services`).
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
