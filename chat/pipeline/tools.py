"""Which tools a turn offers (seed 000, "Deliberate Tool Mode admission"; DESIGN §5, "Tools").

With Deliberate Tool Mode off, a turn offers every available tool. With it on (the default), a
tool is offered only when the turn gives a reason:

- a keyword in the triggering entry's words (``gif`` → process_gif …);
- media on the triggering entry — and only that entry, so older media never keeps a tool
  exposed: a text file → read_file, a non-emoji image → analyze_image, a GIF also
  process_gif, a YouTube link → process_youtube_video;
- short-term memory maintenance being due → update_short_term_memory;
- an autonomous channel → send_sticker (seed 000's "autonomous sticker" tool: where the
  persona joins in on its own, it may answer with one of the guild's stickers);
- ``remember`` (long-term memory) on words that announce a fact worth keeping ("remember",
  "my birthday", "i like" …); it needs a guild (configured per turn: never in a DM);
- a follow-up: the trigger replies to this persona's reply, and that reply's turn offered the
  tool (a question about what a tool found keeps the tool at hand).

Either way a tool needing an outside service is never offered until that service is configured.
The catalogue names only tools the model access layer implements (`chat.llm.tools.TOOL_DEFINITIONS`)
or that need a service this product does not configure yet (never offered).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from chat.pipeline.simplify import SimplifiedEntry


class ToolName(StrEnum):
    """Every tool a turn can be offered; the model access layer implements the ones whose
    dependencies it has (`chat.llm.tools.TOOL_DEFINITIONS`)."""

    READ_FILE = "read_file"
    REVEAL_MESSAGE_METADATA = "reveal_message_metadata"
    UPDATE_SHORT_TERM_MEMORY = "update_short_term_memory"
    REMEMBER = "remember"
    ANALYZE_IMAGE = "analyze_image"
    PROCESS_GIF = "process_gif"
    PROCESS_YOUTUBE_VIDEO = "process_youtube_video"
    SEND_STICKER = "send_sticker"
    WEB_SEARCH = "web_search"


YOUTUBE_LINK = re.compile(
    r"https?://(?:www\.|m\.)?(?:youtube\.com/(?:watch\?\S*v=|shorts/|live/)|youtu\.be/)[\w-]+"
)


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool the pipeline knows. ``keywords`` admit it under Deliberate Tool Mode (whole
    words or phrases, case-insensitive)."""

    name: ToolName
    needs_configuration: bool
    keywords: tuple[str, ...]


TOOL_CATALOGUE: tuple[ToolSpec, ...] = (
    ToolSpec(ToolName.READ_FILE, False, ("file", "document", "attachment", "read this")),
    ToolSpec(
        ToolName.REVEAL_MESSAGE_METADATA,
        False,
        ("when did", "what time", "timestamp", "metadata", "who sent", "message id"),
    ),
    ToolSpec(
        ToolName.UPDATE_SHORT_TERM_MEMORY, False, ("remember", "don't forget", "keep in mind")
    ),
    ToolSpec(
        ToolName.REMEMBER,
        True,
        (
            "remember",
            "don't forget",
            "keep in mind",
            "note that",
            "for the record",
            "my name is",
            "i like",
            "i love",
            "i hate",
            "my birthday",
            "i live",
            "i work",
        ),
    ),
    ToolSpec(ToolName.ANALYZE_IMAGE, True, ("image", "picture", "photo", "screenshot", "look at")),
    ToolSpec(ToolName.PROCESS_GIF, True, ("gif",)),
    ToolSpec(ToolName.PROCESS_YOUTUBE_VIDEO, True, ("youtube", "video")),
    ToolSpec(ToolName.SEND_STICKER, True, ()),
    ToolSpec(ToolName.WEB_SEARCH, True, ("search", "look up", "google")),
)
_KEYWORD_PATTERNS = {
    tool.name: re.compile(
        r"(?<!\w)(?:" + "|".join(re.escape(word) for word in tool.keywords) + r")(?!\w)",
        re.IGNORECASE,
    )
    for tool in TOOL_CATALOGUE
    if tool.keywords
}


@dataclass(frozen=True, slots=True)
class ToolAdmission:
    """The tool allowlist (catalogue order) and, per tool, why it was offered."""

    tools: tuple[str, ...]
    reasons: Mapping[str, str]


def admit_tools(
    *,
    tools_enabled: bool = True,
    deliberate_tool_mode: bool,
    trigger: SimplifiedEntry | None,
    configured_tools: AbstractSet[str],
    short_term_memory_maintenance_due: bool,
    is_queued_turn: bool,
    follow_up_tools: AbstractSet[str] = frozenset(),
    autonomous: bool = False,
) -> ToolAdmission:
    """Decide the turn's tool allowlist.

    Steps:
        0. Tools off for the persona (``tools_enabled`` False): nothing is offered.
        1. Available: tools needing no configuration, plus configured ones.
        2. Wanted: everything (mode off), else the reasons the module docstring lists.
        3. Offered: available ∩ wanted.

    Args:
        tools_enabled: The persona's tools switch.
        deliberate_tool_mode: The persona's Deliberate Tool Mode toggle.
        trigger: The triggering message's history entry; None when it is not visible.
        configured_tools: Names of tools whose outside service is configured.
        short_term_memory_maintenance_due: Short-term memory maintenance is due for this channel.
        is_queued_turn: The turn answers a queued trigger (no tool depends on it today: the
            queued turn's reply is its answer, and no tool sends replies).
        follow_up_tools: The tools the turn offered whose reply the trigger replies to (empty
            when it replies to none of this persona's replies).
        autonomous: The turn speaks in an autonomous channel (the planner chose it).

    Returns:
        A `ToolAdmission`.
    """
    if not tools_enabled:
        return ToolAdmission(tools=(), reasons=MappingProxyType({}))
    available = [
        tool.name
        for tool in TOOL_CATALOGUE
        if not tool.needs_configuration or tool.name in configured_tools
    ]
    if deliberate_tool_mode:
        wanted = _deliberate_reasons(trigger, short_term_memory_maintenance_due)
        if autonomous:
            wanted[ToolName.SEND_STICKER] = "an autonomous channel"
        for name in sorted(follow_up_tools):
            wanted.setdefault(name, "a follow-up to a reply that offered it")
    else:
        wanted = dict.fromkeys(available, "Deliberate Tool Mode is off")
    reasons: dict[str, str] = {name: wanted[name] for name in available if name in wanted}
    return ToolAdmission(tools=tuple(reasons), reasons=MappingProxyType(reasons))


def _deliberate_reasons(
    trigger: SimplifiedEntry | None, short_term_memory_maintenance_due: bool
) -> dict[str, str]:
    """Why each tool is wanted under Deliberate Tool Mode; media reasons win over keywords."""
    reasons: dict[str, str] = {}
    if short_term_memory_maintenance_due:
        reasons[ToolName.UPDATE_SHORT_TERM_MEMORY] = "short-term memory maintenance is due"
    if trigger is None:
        return reasons
    prose = trigger.prose
    for name, pattern in _KEYWORD_PATTERNS.items():
        match = pattern.search(prose)
        if match:
            reasons.setdefault(name, f"keyword {match[0].lower()!r} in the trigger")
    if trigger.documents:
        reasons[ToolName.READ_FILE] = "a file on the triggering message"
    if trigger.images:
        reasons[ToolName.ANALYZE_IMAGE] = "an image on the triggering message"
    if any(image.is_gif for image in trigger.images):
        reasons[ToolName.PROCESS_GIF] = "a GIF on the triggering message"
    if YOUTUBE_LINK.search(prose):
        reasons[ToolName.PROCESS_YOUTUBE_VIDEO] = "a YouTube link in the trigger"
    return reasons
