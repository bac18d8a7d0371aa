"""What the bot spends on models, as the database keeps it (DESIGN §3b): daily rollups of every
model call, the budget counters limits are checked against, the reservations of calls in flight
and each user's recent triggers. `chat.models` imports these models, so Django's app registry
finds them with the app's others.

The rows are written as calls happen (`chat.services.spend`); the usage page reads the rollups
and counters and never the turns. Retention prunes turns and planner steps, never these.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from chat.pipeline.spend import CallKind

CALL_KIND_LABELS = {
    CallKind.REPLY: "Persona reply",
    CallKind.TOOL: "Tool follow-up",
    CallKind.VISION: "Vision",
    CallKind.PLANNER: "Planner",
    CallKind.EXTRACTION: "Memory extraction",
    CallKind.REFRESH: "Memory refresh",
    CallKind.EMBEDDING: "Document embedding",
    CallKind.TEST: "Persona test",
}
CALL_KIND_CHOICES = [(str(kind), label) for kind, label in CALL_KIND_LABELS.items()]

PICO = 10**12
"""Costs are stored as whole picodollars (US dollars × 10¹², the twelve places a cost is kept
to): integer sums are exact on every database, where decimal sums in SQLite are not."""
NOBODY = 0
"""``user_id`` of a call no person's message caused."""
ANONYMOUS = 1
"""``user_id`` the calls of people who chose full privacy are folded into (no Discord id is
1): their own ids are kept nowhere."""


def _usd_pico() -> models.PositiveBigIntegerField:
    return models.PositiveBigIntegerField(default=0, help_text="US dollars × 10¹²")


class UsageDay(models.Model):
    """One day's model calls of one (guild, channel, persona, user, kind, model), in the
    guild's time zone: how many, their tokens as reported (``prompt_tokens`` includes the
    cached ones), the known cost (``usd_pico``) and how many calls had none (``unpriced_calls``:
    cost unknown, not zero) or had their tokens counted by the tokenizer (``estimated_calls``).
    ``channel_id`` is 0 for calls of no channel (a document's embedding), ``persona_name``
    empty for calls of no persona (the planner, a document's embedding), ``user_id`` `NOBODY`
    for calls no person's message caused and `ANONYMOUS` for those of people who chose full
    privacy since. Added to as calls happen, never rebuilt from
    turns."""

    guild_id = models.PositiveBigIntegerField()
    day = models.DateField()
    channel_id = models.PositiveBigIntegerField(default=0)
    persona_name = models.CharField(max_length=80, blank=True)
    user_id = models.PositiveBigIntegerField(default=NOBODY)
    kind = models.CharField(max_length=12, choices=CALL_KIND_CHOICES)
    model = models.CharField(max_length=200)
    calls = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    cached_prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    usd_pico = _usd_pico()
    unpriced_calls = models.PositiveIntegerField(default=0)
    estimated_calls = models.PositiveIntegerField(default=0)

    class Meta:
        verbose_name = "usage rollup"
        constraints = [
            models.UniqueConstraint(
                fields=[
                    "guild_id",
                    "day",
                    "channel_id",
                    "persona_name",
                    "user_id",
                    "kind",
                    "model",
                ],
                name="usage_day_key",
            ),
        ]
        indexes = [
            models.Index(fields=["guild_id", "day"], name="usage_day_guild_day"),
            models.Index(
                fields=["day"], condition=Q(unpriced_calls__gt=0), name="usage_day_unpriced"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.guild_id} {self.day} {self.kind} {self.model}: {self.calls} calls"


class SpendCounter(models.Model):
    """What one budget used in one period: a guild's (``persona_id`` 0) or one persona's, a
    day's or a calendar month's (``starts_on`` its first day, in the guild's time zone). The
    day rows of the guild are also the usage page's daily series. Reservations of calls in
    flight are `SpendReservation` rows."""

    class Period(models.TextChoices):
        DAY = "day"
        MONTH = "month"

    guild_id = models.PositiveBigIntegerField()
    persona_id = models.PositiveBigIntegerField(default=0)
    period = models.CharField(max_length=5, choices=Period.choices)
    starts_on = models.DateField()
    calls = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    cached_prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    usd_pico = _usd_pico()
    unpriced_calls = models.PositiveIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["guild_id", "persona_id", "period", "starts_on"],
                name="spend_counter_key",
            ),
            models.CheckConstraint(
                condition=Q(period__in=["day", "month"]), name="spend_counter_period_valid"
            ),
        ]
        indexes = [
            # Every guild's days at once (the operators' page).
            models.Index(
                fields=["starts_on"],
                condition=Q(persona_id=0, period="day"),
                name="spend_counter_guild_days",
            )
        ]

    def __str__(self) -> str:
        whose = f"persona {self.persona_id}" if self.persona_id else "guild"
        return f"{self.guild_id} {whose} {self.period} of {self.starts_on}"

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class SpendReservation(models.Model):
    """A model call in flight: the upper bound it holds against its guild's budgets (and
    its persona's, ``persona_id``; 0: none), for the day and month it started in, written as
    the call starts and deleted when it settles (``ticket`` names it): what the usage page
    shows as reserved, and what a process that starts no call of its own (a background task
    asking whether the budget is spent) sees of the others'. A process judges its own calls
    on its in-memory holds (`chat.services.spend.SpendLedger`). One a stopped process never
    settled lapses at ``expires_at``."""

    ticket = models.CharField(max_length=32, unique=True)
    holder = models.CharField(max_length=32, help_text="The process that holds it")
    guild_id = models.PositiveBigIntegerField()
    persona_id = models.PositiveBigIntegerField(default=0)
    day = models.DateField()
    month = models.DateField()
    tokens = models.PositiveBigIntegerField()
    usd_pico = _usd_pico()
    expires_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["guild_id", "expires_at"], name="spend_reservation_live")]

    def __str__(self) -> str:
        return f"{self.tokens} tokens reserved in {self.guild_id} until {self.expires_at}"


class UserTurnWindow(models.Model):
    """One user's recent triggers in one guild, for ``user_turns`` (the sliding window of
    `chat.pipeline.spend.user_turn_decision`): ``slots`` is ``[[message id, epoch seconds],
    …]``, at most the limit's count."""

    guild_id = models.PositiveBigIntegerField()
    user_id = models.PositiveBigIntegerField()
    slots = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["guild_id", "user_id"], name="user_turn_window_key")
        ]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.guild_id}: {len(self.slots)} recent triggers"
