"""Instruct templates: a built context as the prompt of a text-completion model.

A text-completion endpoint (``POST /v1/completions``: KoboldCpp, llama.cpp's server, vLLM,
text-generation-webui) continues one string. `to_instruct_prompt` writes the same items the chat
request holds as that string: each item's prose (`projections.completion_lines`: dialogue as
``Name: words``, notes without their ``[System: …]`` marks, directives left out) wrapped in the
template's sequences for its role, then the assistant sequence and the persona's ``Name:`` label
(and the prefill) for the model to continue. Stop strings end the reply where the next speaker
would begin: the template's own, and ``\\nName:`` for everyone else in the conversation.

`fit_instruct_prompt` fits that string to a budget as it is sent: its whole text counted with
the tokenizer (the template's sequences included, the chat items' annotations not), and whole
stride batches of the oldest dialogue removed until it fits, as a chat request's items are
(`truncation.py`).

Templates follow SillyTavern's instruct presets (``input_sequence``, ``output_sequence``,
``system_sequence``, their suffixes, ``stop_sequence``, ``wrap``): four are built in, and one
imported from a SillyTavern instruct preset JSON is read with `instruct_template_from_preset`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from chat.pipeline.context import TurnContext
from chat.pipeline.projections import completion_lines
from chat.pipeline.tokens import TokenCounter
from chat.pipeline.truncation import item_tokens, truncate_dialogue_history
from chat.pipeline.types import Role

STOP_STRINGS_MAX = 16
"""At most this many stop strings per request (servers cap them; llama.cpp and vLLM take many,
OpenAI's own endpoint 4)."""


@dataclass(frozen=True, slots=True)
class InstructTemplate:
    """How a text-completion model's turns are marked (SillyTavern's instruct fields).

    With ``wrap``, a newline separates each sequence from its text. ``system_same_as_user``
    marks system text as a user turn (models without a system role). ``last_output_sequence``
    (when set) replaces ``output_sequence`` for the turn the model writes.
    """

    name: str
    input_sequence: str = ""
    input_suffix: str = ""
    output_sequence: str = ""
    output_suffix: str = ""
    system_sequence: str = ""
    system_suffix: str = ""
    last_output_sequence: str = ""
    stop_sequence: str = ""
    wrap: bool = True
    system_same_as_user: bool = False
    sequences_as_stop_strings: bool = True


BUILTIN_TEMPLATES: Mapping[str, InstructTemplate] = {
    "chatml": InstructTemplate(
        name="chatml",
        input_sequence="<|im_start|>user",
        input_suffix="<|im_end|>\n",
        output_sequence="<|im_start|>assistant",
        output_suffix="<|im_end|>\n",
        system_sequence="<|im_start|>system",
        system_suffix="<|im_end|>\n",
        stop_sequence="<|im_end|>",
        wrap=True,
    ),
    "llama3": InstructTemplate(
        name="llama3",
        input_sequence="<|start_header_id|>user<|end_header_id|>\n\n",
        input_suffix="<|eot_id|>",
        output_sequence="<|start_header_id|>assistant<|end_header_id|>\n\n",
        output_suffix="<|eot_id|>",
        system_sequence="<|start_header_id|>system<|end_header_id|>\n\n",
        system_suffix="<|eot_id|>",
        stop_sequence="<|eot_id|>",
        wrap=False,
    ),
    "mistral": InstructTemplate(
        name="mistral",
        input_sequence="[INST] ",
        input_suffix=" [/INST]",
        output_sequence="",
        output_suffix="</s>",
        stop_sequence="</s>",
        wrap=False,
        system_same_as_user=True,
    ),
    "alpaca": InstructTemplate(
        name="alpaca",
        input_sequence="### Instruction:",
        input_suffix="\n\n",
        output_sequence="### Response:",
        output_suffix="\n\n",
        system_sequence="",
        system_suffix="\n\n",
        wrap=True,
    ),
}
DEFAULT_TEMPLATE = "chatml"

_PRESET_TEXT_FIELDS = (
    "input_sequence",
    "input_suffix",
    "output_sequence",
    "output_suffix",
    "system_sequence",
    "system_suffix",
    "last_output_sequence",
    "stop_sequence",
)
_PRESET_FLAG_FIELDS = ("wrap", "system_same_as_user", "sequences_as_stop_strings")


def instruct_template_from_preset(preset: Mapping[str, object]) -> InstructTemplate:
    """A SillyTavern instruct preset (its exported JSON, already validated) as a template.
    Fields it lacks keep the defaults; its other fields (macros, activation regex, names
    behaviour, story string) are not used."""
    fields: dict[str, object] = {"name": str(preset.get("name") or "imported")}
    for key in _PRESET_TEXT_FIELDS:
        if isinstance(preset.get(key), str):
            fields[key] = preset[key]
    for key in _PRESET_FLAG_FIELDS:
        if isinstance(preset.get(key), bool):
            fields[key] = preset[key]
    return InstructTemplate(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class InstructPrompt:
    """A completion model's request text: ``text`` to continue, ``stop`` strings, and the
    ``prefill`` the text ends with (the reply starts with it)."""

    text: str
    stop: tuple[str, ...]
    prefill: str = ""
    tokens: int | None = None
    """The whole text's tokens (`fit_instruct_prompt`); None: not counted."""
    removed_entries: int = 0
    """Dialogue entries `fit_instruct_prompt` removed to fit the budget."""


def fit_instruct_prompt(
    context: TurnContext,
    template: InstructTemplate,
    *,
    budget: int,
    stride: int,
    counter: TokenCounter,
    extra_batches: int = 0,
) -> InstructPrompt:
    """``context`` written as ``template``'s prompt (`to_instruct_prompt`), fitted so that
    its whole text, as sent, is at most ``budget`` tokens of ``counter``.

    The chat items' own truncation counted their annotations (``[ref_N]`` tags, ``[System:
    …]`` marks) and never the template's sequences; the prompt is fitted on its own instead,
    from the items before that truncation (`TurnContext.items_before_truncation`).

    Steps:
        1. Write the prompt and count its text.
        2. While it exceeds ``budget``, remove one more batch of ``stride`` of the oldest
           dialogue entries (`truncation.truncate_dialogue_history`: samples, system items,
           the newest request and the tail always stay; notes are re-placed) and write it
           again.
        3. Remove ``extra_batches`` more (an attempt retried on shorter history).
        When nothing more can go, the prompt is returned over budget (as a chat request keeps
        the newest request): ``tokens`` says by how much.
    """
    items = context.items_before_truncation or context.items
    removed = 0
    prompt = to_instruct_prompt(replace(context, items=items), template)
    tokens = counter.count(prompt.text)
    extra = extra_batches
    while tokens > budget or extra > 0:
        extra -= tokens <= budget
        fewer, report = truncate_dialogue_history(
            items, budget=max(0, item_tokens(items) - 1), stride=stride
        )
        if report.removed_entries == 0:
            break
        items, removed = fewer, removed + report.removed_entries
        prompt = to_instruct_prompt(replace(context, items=items), template)
        tokens = counter.count(prompt.text)
    return replace(prompt, tokens=tokens, removed_entries=removed)


def to_instruct_prompt(context: TurnContext, template: InstructTemplate) -> InstructPrompt:
    """Write ``context`` as ``template``'s prompt (see the module docstring).

    Steps:
        1. Each item with prose becomes one turn: its role's sequence, the prose, the suffix
           (system text as a user turn when the template has no system role).
        2. The model's turn opens: the last output sequence (else the output sequence), then
           ``Name:`` and the prefill.
        3. Stop strings: the template's stop sequence, its input and system sequences (when it
           uses sequences as stop strings), then ``\\nName:`` for every other speaker of the
           dialogue, at most `STOP_STRINGS_MAX`.
    """
    turns = [_turn(template, item.role, line) for item, line in completion_lines(context)]
    opening = template.last_output_sequence or template.output_sequence
    ending = f"{context.persona_name}:"
    prefill = context.prefill or ""
    if prefill:
        ending = f"{ending} {prefill}"
    turns.append(_wrapped(template, opening, ending))
    return InstructPrompt(
        text="".join(turns), stop=_stop_strings(context, template), prefill=prefill
    )


def instruct_prompt_from_messages(
    messages: Sequence[Mapping[str, object]], template: InstructTemplate
) -> InstructPrompt:
    """Chat messages (a request built as messages: the planner's, a memory summary's) as
    ``template``'s prompt: each message's text as a turn of its role, then the model's turn
    opens. A final ``assistant`` message is the prefill the model continues. Image parts and
    tool exchanges are left out (a text-completion model reads text only)."""
    turns = []
    prefill = ""
    for index, message in enumerate(messages):
        role = str(message.get("role"))
        text = _message_text(message.get("content"))
        if role == "assistant" and index == len(messages) - 1:
            prefill = text
            continue
        if role not in ("system", "user", "assistant") or not text:
            continue
        turns.append(_turn(template, Role(role), text))
    opening = template.last_output_sequence or template.output_sequence
    turns.append(_wrapped(template, opening, prefill) if opening else prefill)
    stops = [template.stop_sequence]
    if template.sequences_as_stop_strings:
        stops += [template.input_sequence, template.system_sequence]
    unique = [stop for stop in dict.fromkeys(s.strip(" ") for s in stops) if stop.strip()]
    return InstructPrompt(text="".join(turns), stop=tuple(unique), prefill=prefill)


def _message_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text", "")) for part in content if isinstance(part, dict)
        ).strip()
    return ""


def _turn(template: InstructTemplate, role: Role, text: str) -> str:
    if role is Role.SYSTEM and not template.system_same_as_user:
        return _wrapped(template, template.system_sequence, text) + template.system_suffix
    if role is Role.ASSISTANT:
        return _wrapped(template, template.output_sequence, text) + template.output_suffix
    return _wrapped(template, template.input_sequence, text) + template.input_suffix


def _wrapped(template: InstructTemplate, sequence: str, text: str) -> str:
    if not sequence:
        return text
    return f"{sequence}\n{text}" if template.wrap else f"{sequence}{text}"


def _stop_strings(context: TurnContext, template: InstructTemplate) -> tuple[str, ...]:
    stops = [template.stop_sequence]
    if template.sequences_as_stop_strings:
        stops += [template.input_sequence, template.system_sequence]
    speakers = dict.fromkeys(  # the most recent first: they are likeliest to speak next
        entry.author_name
        for entry in reversed(context.simplified_history.entries)
        if entry.author_name and entry.author_name != context.persona_name
    )
    stops += [f"\n{name}:" for name in speakers]
    unique = [stop for stop in dict.fromkeys(s.strip(" ") for s in stops) if stop.strip()]
    return tuple(unique[:STOP_STRINGS_MAX])
