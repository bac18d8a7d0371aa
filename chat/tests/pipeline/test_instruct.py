"""Instruct templates: the same items a chat request holds, as a text-completion prompt."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chat.pipeline.context import build_turn_context
from chat.pipeline.instruct import (
    BUILTIN_TEMPLATES,
    fit_instruct_prompt,
    instruct_template_from_preset,
    to_instruct_prompt,
)
from chat.pipeline.projections import completion_lines
from chat.pipeline.tokens import O200kTokenCounter
from chat.tests.factories import BOB, KAITO, TOMORI, TOMORI_PERSONA, message, turn_input

HISTORY = [
    message(1, "morning all", author=BOB),
    message(2, "morning!", author=TOMORI, minutes=1),
    message(3, "kaito here", author=KAITO, minutes=2),
    message(4, "Tomori, a poem?", minutes=3),
]
PERSONA = replace(TOMORI_PERSONA, system_prompt="You are {char}.", prefill="Well,")


def _context():
    return build_turn_context(turn_input(HISTORY, persona=PERSONA))


def test_chatml_wraps_each_item_in_its_roles_sequence_and_opens_the_personas_turn():
    prompt = to_instruct_prompt(_context(), BUILTIN_TEMPLATES["chatml"])
    assert prompt.text.startswith("<|im_start|>system\nYou are Tomori.<|im_end|>\n")
    assert "<|im_start|>user\nBob: morning all<|im_end|>\n" in prompt.text
    assert "<|im_start|>assistant\nTomori: morning!<|im_end|>\n" in prompt.text
    assert prompt.text.endswith("<|im_start|>assistant\nTomori: Well,")
    assert prompt.prefill == "Well,"


def test_stop_strings_are_the_templates_then_the_other_speakers_labels_newest_first():
    prompt = to_instruct_prompt(_context(), BUILTIN_TEMPLATES["chatml"])
    assert prompt.stop[:3] == ("<|im_end|>", "<|im_start|>user", "<|im_start|>system")
    speakers = [stop for stop in prompt.stop if stop.startswith("\n")]
    assert speakers[0] == f"\n{HISTORY[-1].author.display_name}:"
    assert "\nBob:" in speakers and "\nTomori:" not in speakers


@pytest.mark.parametrize("name", sorted(BUILTIN_TEMPLATES))
def test_every_builtin_holds_the_same_prose_as_the_completion_projection(name):
    context = _context()
    prompt = to_instruct_prompt(context, BUILTIN_TEMPLATES[name])
    for _item, line in completion_lines(context):
        assert line.strip() in prompt.text


def test_mistral_has_no_system_role_and_alpaca_wraps_with_newlines():
    mistral = to_instruct_prompt(_context(), BUILTIN_TEMPLATES["mistral"]).text
    assert mistral.startswith("[INST] You are Tomori. [/INST]")
    alpaca = to_instruct_prompt(_context(), BUILTIN_TEMPLATES["alpaca"]).text
    assert "### Instruction:\nBob: morning all\n\n" in alpaca
    assert alpaca.endswith("### Response:\nTomori: Well,")


def test_a_sillytavern_instruct_preset_is_read():
    preset = {
        "name": "Vicuna-ish",
        "input_sequence": "USER:",
        "output_sequence": "ASSISTANT:",
        "system_sequence": "SYSTEM:",
        "input_suffix": "\n",
        "output_suffix": "\n",
        "system_suffix": "\n",
        "stop_sequence": "</s>",
        "wrap": False,
        "macro": True,
        "names_behavior": "force",
        "activation_regex": "",
    }
    template = instruct_template_from_preset(preset)
    assert (template.name, template.wrap, template.stop_sequence) == ("Vicuna-ish", False, "</s>")
    prompt = to_instruct_prompt(_context(), template)
    assert prompt.text.startswith("SYSTEM:You are Tomori.\nUSER:Bob: morning all\n")
    assert prompt.text.endswith("ASSISTANT:Tomori: Well,")
    assert prompt.stop[0] == "</s>"


def _long_context(context_window: int):
    history = [
        message(n, f"line {n}: the rehearsal runs late", author=BOB if n % 2 else KAITO, minutes=n)
        for n in range(1, 41)
    ]
    persona = replace(
        PERSONA,
        prefill="",
        model=replace(PERSONA.model, context_window=context_window, max_output_tokens=100),
    )
    return build_turn_context(turn_input(history, persona=persona, fetch_limit=40))


def test_the_fitted_prompt_is_within_budget_and_loses_history_in_whole_stride_batches():
    counter = O200kTokenCounter()
    context = _long_context(16000)
    template = BUILTIN_TEMPLATES["llama3"]
    whole = counter.count(to_instruct_prompt(context, template).text)

    fitted = {
        budget: fit_instruct_prompt(context, template, budget=budget, stride=12, counter=counter)
        for budget in (250, 400, 600, 900, whole)
    }

    for budget, prompt in fitted.items():
        assert prompt.tokens == counter.count(prompt.text) <= budget
        assert prompt.text.endswith("Tomori:") and "line 40:" in prompt.text
        kept = sum(f"line {n}:" in prompt.text for n in range(1, 41))
        assert kept + prompt.removed_entries == 40
        assert prompt.removed_entries % 12 == 0 or kept == 1  # whole batches, or all it can
    removed = [prompt.removed_entries for prompt in fitted.values()]
    assert removed == sorted(removed, reverse=True) and removed[-1] == 0


def test_the_prompt_is_fitted_from_the_history_before_the_chat_items_truncation():
    context = _long_context(700)  # the chat items are cut to a budget of 540
    counter = O200kTokenCounter()
    assert context.truncation.removed_entries > 0

    fitted = fit_instruct_prompt(
        context,
        instruct_template_from_preset({"name": "plain"}),
        budget=540,
        stride=12,
        counter=counter,
    )

    assert fitted.removed_entries < context.truncation.removed_entries
    assert fitted.tokens <= 540
