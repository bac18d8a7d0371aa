"""Persona test runs as the bot records them: one `PersonaTestRun` per run of a persona's
test set (or of a test file, from ``manage.py personatest``), one `PersonaTestResult` per case,
target and repeat. `chat.models` imports these models, so Django's app registry finds them
with the app's others. Cases themselves are configuration (`personas.models_cases`).
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from chat.fields import CompressedJSONField
from personas.models import Persona
from personas.models_cases import PersonaTestCase


class PersonaTestRun(models.Model):
    """A run of test cases against one or more targets, each case called ``repeat`` times.

    ``targets``: what the cases ran against, in order, each ``{"key", "label"}``: ``saved``
    (the persona as saved), ``draft`` (the persona form's unsaved values, kept in ``draft``
    as the configuration file's persona row), ``model`` (the saved persona on ``model``).
    ``cases``: the cases as they were run (their JSON), so an earlier run stays readable and
    comparable after its cases change. ``done`` of ``total`` calls are finished (the progress
    bar). Token counts sum every model call of the run (replies and judges). Only
    `chat.services.persona_test_runs` changes ``status``.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        FINISHED = "finished", "Finished"
        FAILED = "failed", "Failed (the run could not go on)"

    class Origin(models.TextChoices):
        DASHBOARD = "dashboard", "The dashboard"
        COMMAND = "command", "manage.py personatest"

    guild_id = models.PositiveBigIntegerField(null=True, blank=True)
    persona = models.ForeignKey(
        Persona, on_delete=models.SET_NULL, null=True, blank=True, related_name="test_runs"
    )
    persona_name = models.CharField(max_length=80, blank=True)
    origin = models.CharField(max_length=10, choices=Origin.choices)
    requested_by = models.CharField(max_length=150, blank=True)
    targets = models.JSONField(default=list)
    draft = models.JSONField(null=True, blank=True)
    model = models.CharField(max_length=200, blank=True)
    repeat = models.PositiveSmallIntegerField(default=1)
    cases = models.JSONField(default=list)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    calls = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cached_prompt_tokens = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["queued", "running", "finished", "failed"]),
                name="persona_test_run_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(repeat__gte=1) & Q(repeat__lte=20),
                name="persona_test_run_repeat_range",
            ),
        ]

    def __str__(self) -> str:
        return f"test run {self.pk} of {self.persona_name or 'a file'} ({self.status})"

    @property
    def percent(self) -> int:
        return round(100 * self.done / self.total) if self.total else 0


class PersonaTestResult(models.Model):
    """One call of one case against one target of a run: the reply (or the model's error,
    which is this case's, not the run's), each check's verdict (``checks``: the judge's reason
    included), the tools the model called (answered, never run), and ``prompt_record``: the
    exact request and the context items it was built from."""

    run = models.ForeignKey(PersonaTestRun, on_delete=models.CASCADE, related_name="results")
    case = models.ForeignKey(
        PersonaTestCase, on_delete=models.SET_NULL, null=True, blank=True, related_name="results"
    )
    case_name = models.CharField(max_length=200)
    persona_name = models.CharField(max_length=80)
    target = models.CharField(max_length=10)
    repeat_index = models.PositiveSmallIntegerField(default=0)
    reply = models.TextField(blank=True)
    error = models.TextField(blank=True)
    passed = models.BooleanField(null=True, help_text="Every check held; empty: an error")
    checks = models.JSONField(default=list, blank=True)
    tool_calls = models.JSONField(default=list, blank=True)
    prompt_record = CompressedJSONField(default=dict)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    cached_prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    llm_ms = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "id"]
        indexes = [models.Index(fields=["run", "case_name"])]

    def __str__(self) -> str:
        return f"{self.case_name} ({self.target}, call {self.repeat_index + 1})"

    @property
    def request(self) -> dict:
        return self.prompt_record.get("request", {})
