"""Each attempt's request fits its own model: a fallback with a smaller context window gets the
history truncated to its own budget."""

from __future__ import annotations

from chat.llm.attempts import AttemptPlan
from chat.llm.base import ModelSpec
from chat.pipeline.context import build_turn_context
from chat.pipeline.truncation import context_budget
from chat.pipeline.types import ModelSettings, PersonaProfile
from chat.services.turn_input import turn_renderer
from chat.tests.factories import ALICE, BOB, message, turn_input

PERSONA = PersonaProfile(
    name="Tomori", model=ModelSettings(context_window=16000, max_output_tokens=200)
)


def test_a_fallback_with_a_smaller_context_window_gets_its_own_budget():
    history = [
        message(n, f"message number {n} " * 8, author=BOB if n % 2 else ALICE, minutes=n)
        for n in range(1, 41)
    ]
    context = build_turn_context(turn_input(history, persona=PERSONA, fetch_limit=40))
    render = turn_renderer(context=context, limit=40, budget=context_budget(16000, 200))

    roomy = render(AttemptPlan(model=ModelSpec("big", max_output_tokens=200)))
    small = render(
        AttemptPlan(model=ModelSpec("small", max_output_tokens=200, context_window=1000))
    )

    assert context.truncation.removed_entries == 0
    assert len(small) < len(roomy)
    assert small[-2:] == roomy[-2:]  # the newest request and the closing directive stay
    small_text = sum(len(str(m["content"])) for m in small)
    assert small_text // 4 <= context_budget(1000, 200)
