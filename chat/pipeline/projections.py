"""A built `TurnContext` projected for one model attempt (seed 002, "Per-attempt resolution").

The same context serves every attempt, fallbacks included; only the projection differs:

- `to_openai_messages`: Chat Completions messages. System content first (persona prompt,
  short-term memory), then every other item in order. Images become ``image_url`` parts for a vision
  model; a blind model gets a notice instead, which names the image tool only when this attempt
  offers it. The prefill becomes a final ``assistant`` message ``Name: text`` where the model
  takes one, else an instruction.
- `completion_lines`: each item's prose for a text-completion model: no references,
  reactions, media hints or directives; `instruct.to_instruct_prompt` wraps it in an instruct
  template and opens the persona's turn with its ``Name:`` label.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from chat.pipeline.context import TurnContext
from chat.pipeline.items import ContextItem, ItemTag, MediaDescriptor, system_note_content
from chat.pipeline.tools import ToolName
from chat.pipeline.types import Role

OpenAIMessage = dict[str, Any]
_WITHOUT_PROSE = frozenset({ItemTag.TAIL_DIRECTIVE, ItemTag.PARTICIPANTS})
_MARKED = frozenset(
    {
        ItemTag.PRESET_PROMPT,
        ItemTag.CONTEXT_NOTE_INJECTION,
        ItemTag.DATE_SPACER,
        ItemTag.SHORT_TERM_MEMORY,
        ItemTag.MEMORY,
        ItemTag.MEMORY_SHOWN,
        ItemTag.LOREBOOK,
    }
)
"""Items whose text may be a `system_note` (short-term memory and lorebook entries only when
placed at depth; their system-block forms are not marked, and `system_note_content` leaves them
as they are)."""


@dataclass(frozen=True, slots=True)
class AttemptProfile:
    """What one model attempt can take.

    Attributes:
        model: The model name.
        supports_vision: Images may be sent as ``image_url`` parts.
        supports_prefill: A trailing ``assistant`` message is continued, not answered.
        tools: The tools this attempt exposes (the turn's allowlist, minus any the model or
            provider cannot call).
        merge_same_role: Merge adjacent messages of one role (providers that require
            alternating roles).
    """

    model: str
    supports_vision: bool = False
    supports_prefill: bool = False
    tools: frozenset[str] = field(default_factory=frozenset)
    merge_same_role: bool = False


def to_openai_messages(context: TurnContext, attempt: AttemptProfile) -> list[OpenAIMessage]:
    """Project ``context`` into Chat Completions messages for ``attempt``.

    Steps:
        1. One ``system`` message joining the leading system-role items (blank-line
           separated).
        2. One message per remaining item, its media resolved for the attempt (a system item
           a preset places later, such as its post-history instructions, stays a ``system``
           message where it is).
        3. The prefill, as a final ``assistant`` message or an instruction.
        4. Adjacent same-role messages merged, when the attempt asks for it.

    Returns:
        A new list of plain dicts, ready to serialize.
    """
    items = context.items
    leading = next((n for n, item in enumerate(items) if item.role is not Role.SYSTEM), len(items))
    system = [item.text for item in items[:leading]]
    messages: list[OpenAIMessage] = []
    if system:
        messages.append({"role": "system", "content": "\n\n".join(system)})
    messages += [_message(item, attempt) for item in items[leading:]]
    if context.prefill is not None:
        messages.append(_prefill_message(context.persona_name, context.prefill, attempt))
    return _merge_same_role(messages) if attempt.merge_same_role else messages


def completion_lines(context: TurnContext) -> list[tuple[ContextItem, str]]:
    """Every item that has prose, with it: configuration as written, a note, spacer, placed
    memory or lorebook entry without its ``[System: …]`` marks, a dialogue entry as its words
    under its label (`dialogue.RenderedDialogue.completion_texts`). Items without prose
    (directives, the participant note, hidden runs, media-only messages) are left out."""
    entries = context.dialogue.completion_texts()
    lines = []
    for item in context.items:
        if item.tag is ItemTag.DIALOGUE_HISTORY:
            line = entries.get(item.source_ids, "")
        elif item.tag in _WITHOUT_PROSE:
            line = ""
        else:
            line = system_note_content(item.text) if item.tag in _MARKED else item.text
        if line:
            lines.append((item, line))
    return lines


def _message(item: ContextItem, attempt: AttemptProfile) -> OpenAIMessage:
    if not item.media:
        return {"role": item.role.value, "content": item.text}
    if attempt.supports_vision:
        parts: list[dict[str, Any]] = [{"type": "text", "text": item.text}]
        parts += [{"type": "image_url", "image_url": {"url": image.url}} for image in item.media]
        return {"role": item.role.value, "content": parts}
    notices = " ".join(_blind_notice(image, attempt.tools) for image in item.media)
    return {"role": item.role.value, "content": f"{item.text} {notices}"}


def _blind_notice(image: MediaDescriptor, tools: frozenset[str]) -> str:
    """What a model that cannot see ``image`` is told, naming a tool only if it is offered."""
    tool = (
        ToolName.PROCESS_GIF
        if image.is_gif and ToolName.PROCESS_GIF in tools
        else ToolName.ANALYZE_IMAGE
    )
    if tool in tools:
        return f"[System: you cannot see {image.key} directly; call {tool} with {image.key}.]"
    return f"[System: {image.key} cannot be shown to you.]"


def _prefill_message(persona_name: str, prefill: str, attempt: AttemptProfile) -> OpenAIMessage:
    if attempt.supports_prefill:
        return {"role": "assistant", "content": f"{persona_name}: {prefill}"}
    return {"role": "user", "content": f'[System: Begin your reply with "{prefill}".]'}


def _merge_same_role(messages: list[OpenAIMessage]) -> list[OpenAIMessage]:
    merged: list[OpenAIMessage] = []
    for message in messages:
        if merged and merged[-1]["role"] == message["role"]:
            previous = merged[-1]
            merged[-1] = {
                "role": message["role"],
                "content": _join_content(previous["content"], message["content"]),
            }
        else:
            merged.append(message)
    return merged


def _join_content(first: str | list[Any], second: str | list[Any]) -> str | list[Any]:
    """Join two contents with a newline; text stays text, anything with parts becomes parts."""
    if isinstance(first, str) and isinstance(second, str):
        return f"{first}\n{second}"
    return [*_as_parts(first), *_as_parts(second)]


def _as_parts(content: str | list[Any]) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else content
