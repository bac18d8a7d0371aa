"""Storing a turn's model exchange on its ``Turn`` row."""

from __future__ import annotations

from chat.llm.attempts import TurnCompletion
from chat.models import Turn


def turn_record_completion(*, turn: Turn, completion: TurnCompletion) -> None:
    """Write ``completion`` onto ``turn`` and save those fields only.

    Sets ``attempts`` (one JSON object per model call), the summed ``prompt_tokens``,
    ``completion_tokens`` and ``cached_prompt_tokens`` (``None`` when the provider reported
    none), ``request`` (the exact body of the final attempt), ``llm_ms``, ``reply_text`` and
    ``error``; appends the completion's warnings to those already on the turn. ``status`` is
    left to the caller, which knows whether the reply was delivered. Synchronous ORM: wrap it
    in ``sync_to_async`` from async code.
    """
    turn.attempts = [record.as_json() for record in completion.attempts]
    turn.prompt_tokens = completion.usage.prompt_tokens
    turn.completion_tokens = completion.usage.completion_tokens
    turn.cached_prompt_tokens = completion.usage.cached_prompt_tokens
    turn.request = completion.request
    turn.llm_ms = completion.llm_ms
    turn.reply_text = completion.reply_text
    turn.error = str(completion.error) if completion.error is not None else ""
    turn.warnings = [*turn.warnings, *completion.warnings]
    turn.save(
        update_fields=[
            "attempts",
            "prompt_tokens",
            "completion_tokens",
            "cached_prompt_tokens",
            "request",
            "llm_ms",
            "reply_text",
            "error",
            "warnings",
        ]
    )
