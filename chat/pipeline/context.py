"""One persona turn's prompt: `build_turn_context` (seed 000, "Build Context").

The shell (a service) reads the channel, selects the history window, gathers configuration and
memories, and passes them in a `TurnInput`; this module returns a `TurnContext`: the tagged
items, the prefill, the tool allowlist and everything the turn record keeps. Nothing here reads
the clock, the database or Discord.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

from chat.pipeline.depth_items import (
    in_configuration,
    lore_at_depth,
    memories_shown_earlier,
    short_term_memory_at_depth,
    with_recalled_memories,
)
from chat.pipeline.dialogue import RenderedDialogue, date_label, render_dialogue
from chat.pipeline.directives import (
    EMOJI_LOOKBACK,
    QueuedReply,
    resolve_prefill,
    tail_directives,
)
from chat.pipeline.items import ContextItem, ItemTag, system_note
from chat.pipeline.lorebook import (
    NO_ACTIVATION,
    CompiledLorebook,
    LoreActivation,
    LorePosition,
    activate_lorebooks,
    lore_budget,
)
from chat.pipeline.macros import MacroContext, expand_macros, names_the_user
from chat.pipeline.markup import HIDDEN_USER_NAME, markup_free, render_markup
from chat.pipeline.memory import SHORT_TERM_MEMORY_HEADER
from chat.pipeline.notes import active_context_notes, context_note_items, place_notes
from chat.pipeline.participants import (
    ParticipantContext,
    participant_note,
    prepare_participant_context,
)
from chat.pipeline.presets import (
    ChatPreset,
    PromptParts,
    preset_items,
    reassemble,
    varies_per_turn,
)
from chat.pipeline.prompt_cache import cacheable_prefix_end
from chat.pipeline.simplify import (
    EntryKind,
    SimplifiedEntry,
    SimplifiedHistory,
    blocked_user_ids,
    build_simplified_history,
    hidden_user_ids,
)
from chat.pipeline.tokens import TokenCounter, count_item_tokens
from chat.pipeline.tools import admit_tools
from chat.pipeline.truncation import (
    TruncationReport,
    context_budget,
    truncate_dialogue_history,
)
from chat.pipeline.types import (
    ContextNote,
    HistoryMessage,
    NameDirectory,
    PersonaProfile,
    PrivacyLevel,
    Role,
    UserBlock,
)
from chat.pipeline.window import history_window_stride, normalize_fetch_limit

REUNION_MIN_GAP = timedelta(days=3)
"""How long a person must have been away from a persona for the reunion note."""


@dataclass(frozen=True, slots=True)
class TurnInput:
    """Everything one persona turn needs, gathered by the shell.

    Attributes:
        persona: The persona speaking.
        history: The selected history window (`window.select_anchored_history`), oldest first.
        trigger_id: The message this turn answers. History after it is left out.
        now: The turn's time (block expiry is judged against it).
        timezone: The guild's timezone, a `tzinfo` or an IANA name such as ``"Asia/Tokyo"``.
        token_counter: The tokenizer (`tokens.O200kTokenCounter` in production).
        personas: Every persona in the guild, the active one included.
        reply_targets: Reply targets and thread starters fetched from outside the window, by id.
        is_queued_turn: The trigger waited in the queue behind another turn.
        later_queued_trigger_ids: Newer triggers still waiting for their own turns.
        fetch_limit: The configured ``message_fetch_limit`` (normalized here: 20..100, else 80).
        media_window: How many of the newest messages may show media (capped by the limit).
        names: Member, channel and role names for mention markup.
        privacy: Users' privacy levels; FULL hides a user entirely.
        blacklisted_user_ids: Users the bot ignores; hidden like FULL privacy.
        blocks: The guild's blocks and mutes (only this persona's active blocks apply).
        channel_note: The channel's context note, if configured.
        global_note: The guild-wide context note, used only when neither the persona nor the
            channel has one.
        memories: Recalled long-term memories, as prompt lines (`recall.memory_line`), best
            first. They are shown after the dialogue, never in the system block: they change
            with every turn, and the provider's prompt cache stops at the first change.
        memories_shown: What earlier turns of this persona recalled: the message each showed
            its memories after (`TurnContext.memories_after`) → those sets of lines
            (`depth_items.memories_shown_earlier` keeps each set where it was, so a memory
            enters the cached prefix after the turn that recalled it). ``memories`` holds none
            of these lines again.
        short_term_memory_text: The short-term memory as the prompt shows it
            (`memory.visible_memory_text`: the caller has already left out an expired one);
            None when there is none.
        short_term_memory_depth: The memory's saved depth: None puts it in the system block
            after the system prompt; a number places it in the dialogue like a context note at
            that depth.
        configured_tools: Tools whose outside service is configured.
        tool_schema_tokens: What each tool's definition costs in a request's ``tools`` list,
            in tokens of ``token_counter`` (by tool name); the offered tools' cost is taken
            from the budget (DESIGN §5, "Budget"). A tool missing here costs nothing.
        follow_up_tools: Tools the persona's reply that the trigger replies to was offered
            (seed 000's follow-up admission; `tools.admit_tools`).
        notice_bodies: Minimal notices' bodies by memory id (`simplify.build_simplified_history`).
        autonomous: The channel is autonomous (admits the sticker tool, `tools.admit_tools`).
        tools_enabled: The persona's tools switch; off, the turn offers no tool at all.
        short_term_memory_maintenance_due: Short-term memory maintenance is due
            (`memory.short_term_memory_maintenance_due`).
        verbatim_tool_nudge: Inject the verbatim tool-calling nudge (custom endpoints).
        reunion_note: A precomputed note for a returning user; None for none (then
            ``reunion_last_seen`` decides).
        reunion_last_seen: When the trigger's author last addressed this persona (its recorded
            presence, before this turn); at least `REUNION_MIN_GAP` before ``now``, the turn
            gets a reunion note naming that day. None: no presence recorded.
        impersonated_user_id: A user the persona speaks as this turn; None when not.
        preset: A SillyTavern Chat Completion preset (the persona's, else the guild's): the
            prompt is reassembled in its order (`presets.py`); None: this product's order.
        lorebooks: The persona's lorebook, then the guild's (compiled once per book,
            `lorebook.compile_lorebook`); their entries fire on the newest messages.
        previous: The channel's previous context for this persona (None when cold). A warm
            build reuses what still fits: simplification resumes from its history (same
            settings, its messages a prefix of this window), unchanged entries keep their
            rendered items, and known texts keep their token counts.
    """

    persona: PersonaProfile
    history: tuple[HistoryMessage, ...]
    trigger_id: int
    now: datetime
    timezone: tzinfo | str
    token_counter: TokenCounter
    personas: tuple[PersonaProfile, ...] = ()
    reply_targets: Mapping[int, HistoryMessage] = field(default_factory=dict)
    is_queued_turn: bool = False
    later_queued_trigger_ids: frozenset[int] = frozenset()
    fetch_limit: object = 80
    media_window: int = 80
    names: NameDirectory = field(default_factory=NameDirectory)
    privacy: Mapping[int, PrivacyLevel] = field(default_factory=dict)
    blacklisted_user_ids: frozenset[int] = frozenset()
    blocks: tuple[UserBlock, ...] = ()
    channel_note: ContextNote | None = None
    global_note: ContextNote | None = None
    memories: tuple[str, ...] = ()
    memories_shown: Mapping[int, tuple[tuple[str, ...], ...]] = field(default_factory=dict)
    short_term_memory_text: str | None = None
    short_term_memory_depth: int | None = None
    configured_tools: frozenset[str] = frozenset()
    tool_schema_tokens: Mapping[str, int] = field(default_factory=dict)
    follow_up_tools: frozenset[str] = frozenset()
    notice_bodies: Mapping[int, str] = field(default_factory=dict)
    autonomous: bool = False
    tools_enabled: bool = True
    short_term_memory_maintenance_due: bool = False
    verbatim_tool_nudge: bool = False
    reunion_note: str | None = None
    reunion_last_seen: datetime | None = None
    impersonated_user_id: int | None = None
    lorebooks: tuple[CompiledLorebook, ...] = ()
    preset: ChatPreset | None = None
    previous: TurnContext | None = None


@dataclass(frozen=True, slots=True)
class TurnContext:
    """A built prompt and what the turn record keeps about it.

    Attributes:
        persona_name: The persona speaking.
        items: The prompt, in order, each item tagged and counted.
        prefill: The expanded prefill; None when the persona has none. Not among ``items``:
            each model attempt decides how to send it (`projections.py`).
        tools: The tool allowlist.
        tool_reasons: Why each tool in ``tools`` is offered.
        cacheable_prefix_end: ``items[:cacheable_prefix_end]`` is expected to repeat unchanged
            on the channel's next turn (see `cacheable_prefix_end`).
        truncation: What budget truncation removed.
        participants: Who takes part in the visible conversation.
        warnings: Problems worth recording on the turn (e.g. the budget could not be met).
        token_counter: Which tokenizer counted ``items``.
        simplified_history: The simplified history, for the next turn to resume from.
        dialogue: The rendered dialogue entries, for the next turn to reuse.
        lore: Which lorebook entries fired, on which key, and which were left out.
        items_before_truncation: The counted items before budget truncation (``items`` itself
            when nothing was removed): a text-completion prompt is fitted from these, counted
            as it is sent (`instruct.fit_instruct_prompt`).
    """

    persona_name: str
    items: tuple[ContextItem, ...]
    prefill: str | None
    tools: tuple[str, ...]
    tool_reasons: Mapping[str, str]
    cacheable_prefix_end: int
    truncation: TruncationReport
    participants: ParticipantContext
    warnings: tuple[str, ...]
    token_counter: str
    simplified_history: SimplifiedHistory
    dialogue: RenderedDialogue
    lore: LoreActivation = NO_ACTIVATION
    memories_after: int | None = None
    """The message the recalled memories follow (`depth_items.with_recalled_memories`)."""
    items_before_truncation: tuple[ContextItem, ...] = ()

    @property
    def message_ids(self) -> Mapping[str, int]:
        """Every issued ``ref_N``/``media_N`` key and its snowflake (built on each access: a
        kept context stores only its id map)."""
        return self.simplified_history.id_map.as_mapping()

    @property
    def total_tokens(self) -> int:
        return sum(item.tokens for item in self.items)


def build_turn_context(turn: TurnInput) -> TurnContext:
    """Build one persona turn's prompt.

    Steps:
        1. Normalize the fetch limit, resolve the timezone, and render Discord markup in the
           configured text (prompts, notes, memories may mention people by id).
        2. End the history at the trigger: later messages (other queued triggers among them)
           wait for their own turns.
        3. Simplify it: hidden users dropped, blocked runs as notices, ``ref_N``/``media_N``
           issued, same-author runs merged (`simplify.build_simplified_history`), resuming
           from ``turn.previous_history`` when it fits.
        4. Resolve participants (`participants.prepare_participant_context`).
        5. Admit tools from the triggering entry (`tools.admit_tools`).
        6. Activate the lorebooks on the newest visible messages (`lorebook.py`). Assemble
           items: constant lorebook entries around the system prompt, short-term memory,
           samples, dialogue history with its spacers and the memories earlier turns showed,
           notes and the other fired entries, recalled memories, the participants note, tail
           directives.
        7. Count tokens (a warm build counts only new texts).
        8. Truncate to the persona's budget in stride batches.
        9. Mark the cacheable prefix on what survives.
        10. Resolve the prefill.

    Raises:
        zoneinfo.ZoneInfoNotFoundError: when ``turn.timezone`` names no known timezone.
    """
    limit = normalize_fetch_limit(turn.fetch_limit)
    timezone = ZoneInfo(turn.timezone) if isinstance(turn.timezone, str) else turn.timezone
    hidden = hidden_user_ids(turn.privacy, turn.blacklisted_user_ids)
    turn = _with_configured_markup_rendered(turn, hidden)
    persona, previous = turn.persona, turn.previous
    simplified = build_simplified_history(
        _up_to(turn.history, turn.trigger_id),
        reply_targets=turn.reply_targets,
        names=turn.names,
        hidden_user_ids=hidden,
        blocked_user_ids=blocked_user_ids(turn.blocks, persona.name, turn.now),
        timezone=timezone,
        resume_from=previous.simplified_history if previous else None,
        notice_bodies=turn.notice_bodies,
    )
    entries = simplified.entries
    participants = prepare_participant_context(
        entries,
        personas=turn.personas,
        member_names=turn.names.users,
        hidden_user_ids=hidden,
        previous=previous.participants if previous else None,
        reused_entries=simplified.kept_entries,
    )
    trigger = next(
        (entry for entry in reversed(entries) if turn.trigger_id in entry.message_ids), None
    )
    warnings = [] if trigger else ["the triggering message is not visible to this persona"]
    admission = admit_tools(
        tools_enabled=turn.tools_enabled,
        deliberate_tool_mode=persona.deliberate_tool_mode,
        trigger=trigger,
        configured_tools=turn.configured_tools,
        short_term_memory_maintenance_due=turn.short_term_memory_maintenance_due,
        is_queued_turn=turn.is_queued_turn,
        follow_up_tools=turn.follow_up_tools,
        autonomous=turn.autonomous,
    )
    macros = MacroContext(
        bot=next((p.name for p in turn.personas if p.is_main), persona.name),
        char=persona.name,
        user=trigger.author_name if trigger else HIDDEN_USER_NAME,
        tools=frozenset(admission.tools),
    )

    dialogue = render_dialogue(
        entries,
        persona=persona,
        impersonated_user_id=turn.impersonated_user_id,
        macros=macros,
        timezone=timezone,
        media_window=turn.media_window,
        fetch_limit=limit,
        previous=previous.dialogue if previous else None,
        counter=turn.token_counter,
    )
    notes = active_context_notes(
        persona_note=persona.context_note,
        channel_note=turn.channel_note,
        global_note=turn.global_note,
        verbatim_tool_nudge=turn.verbatim_tool_nudge,
        reunion_note=turn.reunion_note or _reunion_note(turn, trigger, timezone),
    )
    lore = _activate_lore(turn, entries)
    configuration = _configuration_items(turn, macros, lore)
    preset_in_order, preset_at_depth = (
        ({}, ())
        if turn.preset is None
        else preset_items(
            turn.preset, macros, now=turn.now.astimezone(timezone), seed=str(turn.trigger_id)
        )
    )
    notes_at_depth = (
        *short_term_memory_at_depth(turn.short_term_memory_text, turn.short_term_memory_depth),
        *context_note_items(notes, macros),
        *preset_at_depth,
    )
    history = memories_shown_earlier(dialogue.items, turn.memories_shown)
    after_prefix = (
        _entries_after_prefix(place_notes(history, notes_at_depth))
        if any(not in_configuration(hit) for hit in lore.inserted)
        else 0  # no entry goes after the prefix: it is not needed
    )
    lore_in_dialogue = lore_at_depth(lore, macros, after_prefix=after_prefix)
    conversation, memories_after = with_recalled_memories(
        place_notes(history, (*notes_at_depth, *lore_in_dialogue)), turn.memories
    )
    participants_text = participant_note(participants)
    if participants_text:
        conversation += (
            ContextItem(
                tag=ItemTag.PARTICIPANTS,
                role=Role.USER,
                text=system_note(participants_text),
            ),
        )
    tail = tail_directives(
        _own_recent_prose(dialogue),
        macros=macros,
        reasoning_in_think_tags=persona.model.reasoning_in_think_tags,
        queued=_queued_reply(turn, trigger, simplified),
    )
    varying = list(configuration.naming_the_user)
    if turn.preset is None:
        items = (*configuration.items(), *conversation, *tail)
    else:
        parts = PromptParts(
            before_char=configuration.before_char,
            system_prompt=configuration.system_prompt,
            after_char=configuration.after_char,
            short_term_memory=configuration.short_term_memory,
            samples=configuration.samples,
            dialogue=conversation,
            tail=tuple(tail),
        )
        items = reassemble(turn.preset, parts, preset_in_order)
        varying += [
            preset_in_order[index]
            for index, prompt in enumerate(turn.preset.prompts)
            if index in preset_in_order and varies_per_turn(prompt.content)
        ]
    naming_the_user_from = _first_of(items, varying)
    # The dialogue's items are counted already (by `render_dialogue`, with this tokenizer):
    # only what every turn makes anew is counted here.
    counted = count_item_tokens(
        items, turn.token_counter, _known_token_counts(turn), keep_counts=True
    )
    tool_tokens = sum(turn.tool_schema_tokens.get(name, 0) for name in admission.tools)
    budget = context_budget(persona.model.context_window, persona.model.max_output_tokens)
    kept, truncation = truncate_dialogue_history(
        counted, budget=max(0, budget - tool_tokens), stride=history_window_stride(limit)
    )
    if truncation.warning:
        warnings.append(truncation.warning)

    return TurnContext(
        persona_name=persona.name,
        items=kept,
        prefill=resolve_prefill(persona.prefill, macros),
        tools=admission.tools,
        tool_reasons=admission.reasons,
        cacheable_prefix_end=cacheable_prefix_end(kept, varying_from=naming_the_user_from),
        truncation=truncation,
        participants=participants,
        warnings=tuple(warnings),
        token_counter=turn.token_counter.name,
        simplified_history=simplified,
        dialogue=dialogue,
        lore=lore,
        memories_after=memories_after,
        items_before_truncation=kept if truncation.batches == 0 else counted,
    )


def _up_to(history: tuple[HistoryMessage, ...], trigger_id: int) -> tuple[HistoryMessage, ...]:
    """``history`` without the messages after the trigger (the same tuple when there are none:
    a kept context shares it with the window)."""
    if not history or history[-1].id <= trigger_id:
        return history
    return tuple(message for message in history if message.id <= trigger_id)


def _own_recent_prose(dialogue: RenderedDialogue) -> list[str]:
    """The words of the persona's newest `EMOJI_LOOKBACK` messages, oldest first: all the
    tail directives read of its own past."""
    own: list[str] = []
    for rendered in reversed(dialogue.entries):
        if rendered.role is Role.ASSISTANT:
            own.append(rendered.entry.prose)
            if len(own) == EMOJI_LOOKBACK:
                break
    own.reverse()
    return own


def _known_token_counts(turn: TurnInput) -> dict[str, int]:
    """The token counts the previous context holds for the items every turn makes anew
    (configuration, notes, directives), by text; empty when it was counted by another
    tokenizer. Its dialogue items need none: those a turn reuses carry their counts
    (`count_item_tokens`'s ``keep_counts``), and a re-rendered entry's text is new."""
    previous = turn.previous
    if previous is None or previous.token_counter != turn.token_counter.name:
        return {}
    return {item.text: item.tokens for item in previous.items if item.tag not in _DIALOGUE_ITEMS}


_DIALOGUE_ITEMS = frozenset({ItemTag.DIALOGUE_HISTORY, ItemTag.DATE_SPACER})


@dataclass(frozen=True, slots=True)
class _Configuration:
    """The configuration items by slot, and those whose template names the turn's user."""

    before_char: tuple[ContextItem, ...] = ()
    system_prompt: tuple[ContextItem, ...] = ()
    after_char: tuple[ContextItem, ...] = ()
    short_term_memory: tuple[ContextItem, ...] = ()
    samples: tuple[ContextItem, ...] = ()
    naming_the_user: tuple[ContextItem, ...] = ()

    def items(self) -> tuple[ContextItem, ...]:
        return (
            *self.before_char,
            *self.system_prompt,
            *self.after_char,
            *self.short_term_memory,
            *self.samples,
        )


def _configuration_items(
    turn: TurnInput, macros: MacroContext, lore: LoreActivation
) -> _Configuration:
    """Constant lorebook entries placed before the character definitions, the system prompt,
    those placed after it, and the short-term memory (system role), then the sample dialogue as
    written; and those whose template says ``{user}``.

    Completion models read the same text: configuration is prose already.
    """
    persona = turn.persona
    naming: list[ContextItem] = []

    def item(tag: ItemTag, role: Role, template: str, text: str) -> ContextItem:
        made = ContextItem(tag=tag, role=role, text=text)
        if names_the_user(template):
            naming.append(made)
        return made

    def lore_at(position: LorePosition) -> tuple[ContextItem, ...]:
        return tuple(
            item(
                ItemTag.LOREBOOK,
                Role.SYSTEM,
                hit.entry.content,
                _expanded(hit.entry.content, macros).strip(),
            )
            for hit in lore.inserted
            if in_configuration(hit) and hit.entry.position is position
        )

    before = lore_at(LorePosition.BEFORE_CHAR)
    system_prompt = _expanded(persona.system_prompt, macros).strip()
    prompt = (
        (item(ItemTag.SYSTEM_PROMPT, Role.SYSTEM, persona.system_prompt, system_prompt),)
        if system_prompt
        else ()
    )
    after = lore_at(LorePosition.AFTER_CHAR)
    short_term_memory: tuple[ContextItem, ...] = ()
    if (
        turn.short_term_memory_text
        and turn.short_term_memory_text.strip()
        and turn.short_term_memory_depth is None
    ):
        short_term_memory = (
            item(
                ItemTag.SHORT_TERM_MEMORY,
                Role.SYSTEM,
                "",
                f"{SHORT_TERM_MEMORY_HEADER}\n{turn.short_term_memory_text.strip()}",
            ),
        )
    samples = tuple(
        item(
            ItemTag.SAMPLE_DIALOGUE,
            sample.role,
            sample.content,
            _expanded(sample.content, macros),
        )
        for sample in persona.sample_dialogue
    )
    return _Configuration(before, prompt, after, short_term_memory, samples, tuple(naming))


@functools.lru_cache(maxsize=512)
def _expanded(template: str, macros: MacroContext) -> str:
    """`expand_macros` of a configured template (the system prompt, a sample, a lorebook
    entry), remembered: the channel's next turn expands the same ones, for the same people."""
    return expand_macros(template, macros)


def _first_of(items: Sequence[ContextItem], wanted: Sequence[ContextItem]) -> int | None:
    """The index of the first of ``items`` that is one of ``wanted`` (the same object)."""
    ids = {id(item) for item in wanted}
    return next((n for n, item in enumerate(items) if id(item) in ids), None)


def _activate_lore(turn: TurnInput, entries: Sequence[SimplifiedEntry]) -> LoreActivation:
    """The turn's lorebook activation over the visible messages' words (blocked notices and
    hidden users are not scanned: they are not in the prompt either), seeded with the
    trigger's id so a preview rolls as its turn does."""
    if not turn.lorebooks:
        return NO_ACTIVATION
    messages = [
        entry.prose for entry in entries if entry.kind is not EntryKind.BLOCKED and entry.prose
    ]
    return activate_lorebooks(
        turn.lorebooks,
        messages=messages,
        seed=str(turn.trigger_id),
        budget=lore_budget(turn.persona.model.context_window, turn.lorebooks),
        token_counter=turn.token_counter,
    )


def _entries_after_prefix(dialogue: Sequence[ContextItem]) -> int:
    """How many dialogue entries follow the cacheable prefix's end within ``dialogue``."""
    end = cacheable_prefix_end(dialogue)
    return sum(1 for item in dialogue[end:] if item.tag is ItemTag.DIALOGUE_HISTORY)


def _with_configured_markup_rendered(turn: TurnInput, hidden: frozenset[int]) -> TurnInput:
    """The turn with mentions in every configured text rendered as names (`markup.py`)."""

    changed = False

    def render(text: str) -> str:
        nonlocal changed
        if markup_free(text):
            return text
        rendered = render_markup(text, turn.names, hidden)
        if rendered != text:
            changed = True
            return rendered
        return text

    def render_note(note: ContextNote | None) -> ContextNote | None:
        if note is None:
            return None
        text = render(note.text)
        return note if text is note.text else replace(note, text=text)

    persona = turn.persona
    samples = tuple(
        sample
        if (content := render(sample.content)) is sample.content
        else replace(sample, content=content)
        for sample in persona.sample_dialogue
    )
    system_prompt, prefill = render(persona.system_prompt), render(persona.prefill)
    persona_note = render_note(persona.context_note)
    if changed:
        persona = replace(
            persona,
            system_prompt=system_prompt,
            sample_dialogue=samples,
            prefill=prefill,
            context_note=persona_note,
        )
    channel_note, global_note = render_note(turn.channel_note), render_note(turn.global_note)
    memories = tuple(render(memory) for memory in turn.memories)
    memories_shown = {
        message_id: tuple(tuple(render(line) for line in lines) for lines in sets)
        for message_id, sets in turn.memories_shown.items()
    }
    stm = turn.short_term_memory_text
    short_term_memory_text = None if stm is None else render(stm)
    reunion_note = None if turn.reunion_note is None else render(turn.reunion_note)
    if not changed:  # most configured text holds no markup: the turn is kept as it is
        return turn
    return replace(
        turn,
        persona=persona,
        channel_note=channel_note,
        global_note=global_note,
        memories=memories,
        memories_shown=memories_shown,
        short_term_memory_text=short_term_memory_text,
        reunion_note=reunion_note,
    )


def _reunion_note(turn: TurnInput, trigger: SimplifiedEntry | None, timezone: tzinfo) -> str | None:
    """The reunion note for a person back after `REUNION_MIN_GAP` or more (seed 002): it
    names the day they last talked with the persona (an absolute date keeps the prompt cache).
    A turn answering another persona's message gets none."""
    last_seen = turn.reunion_last_seen
    if trigger is None or trigger.persona_name is not None or last_seen is None:
        return None
    if turn.now - last_seen < REUNION_MIN_GAP:
        return None
    day = date_label(last_seen.astimezone(timezone).date())
    return f"{trigger.author_name} is back; the last time they talked with you was {day}."


def _queued_reply(
    turn: TurnInput, trigger: SimplifiedEntry | None, simplified: SimplifiedHistory
) -> QueuedReply | None:
    """Guidance for a queued turn whose trigger is visible; None otherwise."""
    trigger_key = simplified.id_map.message_key(turn.trigger_id)
    if not turn.is_queued_turn or trigger is None or trigger_key is None:
        return None
    waiting = sum(1 for message_id in turn.later_queued_trigger_ids if message_id > turn.trigger_id)
    return QueuedReply(trigger_key=trigger_key, author_name=trigger.author_name, waiting=waiting)
