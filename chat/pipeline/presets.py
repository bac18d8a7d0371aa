"""SillyTavern Chat Completion presets: a persona's prompt reassembled in the preset's order.

A preset (`ChatPreset`) is SillyTavern's ``prompts`` in its ``prompt_order``: prompts with text
(``main``, ``nsfw``, ``enhanceDefinitions``, ``jailbreak`` — the post-history instructions — and
custom ones with a role, placed in order or at a depth in the chat) and markers that stand for
parts of the prompt. `reassemble` maps the markers onto this product's tagged items (seed 002:
dialogue items map to the ``chatHistory`` marker):

- ``charDescription``: the persona's system prompt, then its short-term memory;
- ``worldInfoBefore`` / ``worldInfoAfter``: constant lorebook entries before / after the
  character definitions;
- ``dialogueExamples``: the sample dialogue;
- ``chatHistory``: the dialogue (entries, spacers, notes, keyed lorebook entries), recalled
  memories and the participants note;
- ``charPersonality``, ``scenario``, ``personaDescription``: nothing (a card's personality and
  scenario are part of the system prompt; users have no persona description here).

Tail directives stay last. A preset without ``chatHistory`` still gets the dialogue, at the end
(a reply needs it). Macros in a prompt's text resolve as SillyTavern's do: ``{{char}}``,
``{{user}}``, ``{{time}}`` (``3:05 PM``), ``{{date}}`` (``December 1, 2026``), in the guild's
timezone at the turn's time (passed in: the pipeline reads no clock), and ``{{random::a::b}}`` /
``{{random:a,b}}`` (one of them, chosen by a generator seeded with the turn and the prompt, so
a preview chooses as its turn does).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from chat.pipeline.items import ContextItem, ItemTag
from chat.pipeline.macros import MacroContext, expand_macros, names_the_user
from chat.pipeline.types import Role

MARKERS = frozenset(
    {
        "charDescription",
        "charPersonality",
        "scenario",
        "personaDescription",
        "worldInfoBefore",
        "worldInfoAfter",
        "dialogueExamples",
        "chatHistory",
    }
)
CHAT_HISTORY = "chatHistory"
_RANDOM = re.compile(r"\{\{random(?:::(?P<double>.*?)|:(?P<single>[^:].*?))\}\}", re.IGNORECASE)
_TIME = re.compile(r"\{\{time\}\}", re.IGNORECASE)
_DATE = re.compile(r"\{\{date\}\}", re.IGNORECASE)
_VARYING = re.compile(r"\{\{(?:time|random)\b", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class PresetPrompt:
    """One enabled prompt of a preset, in order. ``marker``: it stands for items (its
    ``identifier`` says which); else ``content`` is sent with ``role``, in place or, with
    ``depth`` set, at that depth in the chat (SillyTavern's in-chat injection)."""

    identifier: str
    content: str = ""
    role: Role = Role.SYSTEM
    marker: bool = False
    depth: int | None = None
    name: str = ""


@dataclass(frozen=True, slots=True)
class ChatPreset:
    name: str
    prompts: tuple[PresetPrompt, ...]


@dataclass(frozen=True, slots=True)
class PromptParts:
    """A built prompt's items by what produced them, for `reassemble`."""

    before_char: tuple[ContextItem, ...]
    system_prompt: tuple[ContextItem, ...]
    after_char: tuple[ContextItem, ...]
    short_term_memory: tuple[ContextItem, ...]
    samples: tuple[ContextItem, ...]
    dialogue: tuple[ContextItem, ...]
    """Entries, spacers and everything placed among them, then recalled memories and the
    participants note."""
    tail: tuple[ContextItem, ...]


DEFAULT_ORDER_IDS = (100001, 100000)
"""SillyTavern's ``prompt_order`` lists: 100001 is the one its current versions edit, 100000
the older global one; a preset with neither uses its first list."""


def chat_preset_from_sillytavern(data: Mapping[str, object], *, name: str = "") -> ChatPreset:
    """A SillyTavern Chat Completion preset (its exported JSON, already validated) as the
    prompts to send, in order: the ``prompt_order`` list's enabled entries that name a prompt
    of ``prompts``. A prompt with ``injection_position`` 1 goes at its ``injection_depth`` in
    the chat; a prompt without a ``role`` is a system prompt."""
    prompts = {
        str(prompt.get("identifier")): prompt
        for prompt in _dicts(data.get("prompts"))
        if prompt.get("identifier") is not None
    }
    orders = {order.get("character_id"): order for order in _dicts(data.get("prompt_order"))}
    chosen = next((orders[i] for i in DEFAULT_ORDER_IDS if i in orders), None)
    if chosen is None:
        chosen = next(iter(orders.values()), {"order": []})
    result = []
    for entry in _dicts(chosen.get("order")):
        prompt = prompts.get(str(entry.get("identifier")))
        if prompt is None or entry.get("enabled", True) is False:
            continue
        identifier = str(prompt["identifier"])
        in_chat = prompt.get("injection_position") == 1
        depth = prompt.get("injection_depth", 4)
        role = str(prompt["role"]) if prompt.get("role") in ("user", "assistant") else "system"
        result.append(
            PresetPrompt(
                identifier=identifier,
                content=str(prompt.get("content") or ""),
                role=Role(role),
                marker=bool(prompt.get("marker")) or identifier in MARKERS,
                depth=int(depth) if in_chat and isinstance(depth, int) else None,
                name=str(prompt.get("name") or identifier),
            )
        )
    return ChatPreset(name=name or str(data.get("name") or "preset"), prompts=tuple(result))


def _dicts(value: object) -> list[Mapping[str, object]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def expand_preset_macros(template: str, macros: MacroContext, *, now: datetime, seed: str) -> str:
    """A preset prompt's text with SillyTavern's macros resolved (module docstring); ``now`` is
    the turn's time in the guild's timezone. Never raises."""
    text = _RANDOM.sub(lambda match: _choice(match, seed), template)
    text = _TIME.sub(now.strftime("%I:%M %p").lstrip("0"), text)
    text = _DATE.sub(f"{now:%B} {now.day}, {now.year}", text)
    return expand_macros(text, macros)


def _choice(match: re.Match[str], seed: str) -> str:
    if match["double"] is not None:
        options = match["double"].split("::")
    else:
        options = [option.strip() for option in match["single"].split(",")]
    chosen: str = random.Random(f"{seed}\x00{match.start()}").choice(options)
    return chosen


def varies_per_turn(template: str) -> bool:
    """Whether a prompt's text changes from turn to turn (the person answered, the time, a
    random choice): it then ends the cacheable prefix."""
    return names_the_user(template) or bool(_VARYING.search(template))


def preset_items(
    preset: ChatPreset, macros: MacroContext, *, now: datetime, seed: str
) -> tuple[dict[int, ContextItem], tuple[ContextItem, ...]]:
    """The preset's own prompts as items: those placed in order (by their index in
    ``preset.prompts``) and those placed at a depth in the chat (system text as a
    ``[System: …]`` note, like the other notes). Prompts empty once expanded are left out."""
    in_order: dict[int, ContextItem] = {}
    at_depth = []
    for index, prompt in enumerate(preset.prompts):
        if prompt.marker:
            continue
        text = expand_preset_macros(prompt.content, macros, now=now, seed=f"{seed}:{index}")
        text = text.strip()
        if not text:
            continue
        if prompt.depth is not None:
            system = prompt.role is Role.SYSTEM
            role, shown = (Role.USER, f"[System: {text}]") if system else (prompt.role, text)
            at_depth.append(
                ContextItem(tag=ItemTag.PRESET_PROMPT, role=role, text=shown, depth=prompt.depth)
            )
        else:
            in_order[index] = ContextItem(tag=ItemTag.PRESET_PROMPT, role=prompt.role, text=text)
    return in_order, tuple(at_depth)


def reassemble(
    preset: ChatPreset, parts: PromptParts, in_order: Mapping[int, ContextItem]
) -> tuple[ContextItem, ...]:
    """The prompt in the preset's order (module docstring): each marker's items, each of the
    preset's own prompts (``in_order``, as `preset_items` gave them), then the tail
    directives."""
    by_marker = {
        "charDescription": (*parts.system_prompt, *parts.short_term_memory),
        "worldInfoBefore": parts.before_char,
        "worldInfoAfter": parts.after_char,
        "dialogueExamples": parts.samples,
        CHAT_HISTORY: parts.dialogue,
    }
    items: list[ContextItem] = []
    placed_history = False
    for index, prompt in enumerate(preset.prompts):
        if prompt.marker:
            items += by_marker.get(prompt.identifier, ())
            placed_history = placed_history or prompt.identifier == CHAT_HISTORY
        elif index in in_order:
            items.append(in_order[index])
    if not placed_history:
        items += parts.dialogue
    return (*items, *parts.tail)
