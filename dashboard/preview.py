"""The prompt preview: the exact request a persona turn would send now, without sending it.

`preview_prepare` runs `chat.services.turns.turn_prepare` with ``dry_run=True`` on a dry-run
runtime over a REST-only Discord port (`chat.runtime`: a logged-in, never-connected client, and
no model client at all), so it reads the channel the way the worker does and renders the same
body, and changes nothing: no anchor, no row, no event, no model call. The window starts at the
channel's stored anchor, read as the worker's next turn will read it (re-anchored only when the
row says the worker dropped its windows since), and the runtime's capabilities (the vision
model, the transcript service, …) come from the same settings as the worker's.

With a hypothetical message (``as_user_id`` and ``text``), that message is the trigger: it is
added to the channel's history as its newest message, exactly where the real message would be
when the user sent it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.conf import settings

from chat import selectors
from chat.llm.attempts import AttemptRunner, request_body
from chat.llm.turn_completion import TurnCompletion
from chat.models import Turn
from chat.pipeline.items import ItemTag
from chat.pipeline.snowflakes import snowflake_at
from chat.pipeline.triggers import TriggerDecision, TurnReason, trigger_decision
from chat.pipeline.truncation import context_budget
from chat.pipeline.types import Author, HistoryMessage
from chat.ports import DiscordPort, DiscordUnavailable, RestDiscordPort, messages_fetch
from chat.runtime import discord_rest_port, dry_run_runtime, llm_client_from_settings
from chat.selectors import ChannelConfiguration
from chat.services.memory_recall import recalled_record
from chat.services.turn_record import context_items_json, window_report
from chat.services.turn_request import PreparedTurn, TurnRequest, TurnRuntime
from chat.services.turns import turn_prepare
from chat.why import rule_label, verdict_sentence
from dashboard import selectors as dashboard_selectors
from personas.models import Persona

T = TypeVar("T")
MENTION = re.compile(r"<@!?(\d+)>")

__all__ = ["DiscordUnavailable", "PreviewError", "PreviewResult", "preview_prepare"]


class PreviewError(Exception):
    """The preview cannot be made; the message says why (shown to the moderator)."""


@dataclass(frozen=True)
class PreviewResult:
    """A dry-run prepared turn and what the preview page shows about it.

    ``triggered_by`` is the reason the trigger rules give this persona for the trigger (None:
    they would not answer it; the preview still shows what it would send). ``hypothetical_id``
    is the id given to the hypothetical message (None without one). ``trigger`` is the
    message answered and the worker's trigger decision for it.
    """

    prepared: PreparedTurn
    triggered_by: str | None
    hypothetical_id: int | None
    then_result: Any = None
    trigger: PreviewTrigger | None = None

    def decision_json(self) -> dict[str, Any] | None:
        """The trigger decision for the previewed message: who answers, in order, and this
        persona's verdict (its rule, why not, as a sentence)."""
        if self.trigger is None:
            return None
        message = self.trigger.message
        decision = self.trigger.decision
        verdict = decision.verdict(self.prepared.request.persona.name)
        return {
            "message_id": str(message.id),
            "answers": [t.persona_name for t in decision.answers],
            "rule": rule_label(verdict) if verdict else "",
            "silence": str(verdict.silence) if verdict and verdict.silence else None,
            "why": verdict_sentence(verdict, message) if verdict else "",
        }

    def as_json(self) -> dict[str, Any]:
        """DESIGN §3's preview JSON: request, items, tokens, cache_prefix_end, tools; and the
        recalled long-term memories with their scores and why (`memory_recall.recalled_record`)."""
        context = self.prepared.context
        items = [
            {"index": index, **item}
            for index, item in enumerate(context_items_json(items=context.items))
        ]
        return {
            "request": self.prepared.body,
            "items": items,
            "tokens": self.tokens(),
            "cache_prefix_end": context.cacheable_prefix_end,
            "tools": list(context.tools),
            "truncation": {
                "batches": context.truncation.batches,
                "removed_entries": context.truncation.removed_entries,
                "removed_message_ids": [str(i) for i in context.truncation.removed_message_ids],
                "warning": context.truncation.warning,
            },
            "window": {**self.prepared.window, **window_report(prepared=self.prepared)},
            "recalled": recalled_record(
                memories=self.prepared.recalled, after=self.prepared.context.memories_after
            ),
            "lorebook": context.lore.as_record(),
            "chat_preset": self._preset_json(),
            "triggered_by": self.triggered_by,
            "decision": self.decision_json(),
        }

    def _preset_json(self) -> dict[str, Any] | None:
        """The SillyTavern preset the prompt was reassembled with (its name and the order of
        its prompts and markers), None: this product's own order."""
        preset = self.prepared.turn_input.preset
        if preset is None:
            return None
        return {"name": preset.name, "order": [prompt.identifier for prompt in preset.prompts]}

    def tokens(self) -> dict[str, Any]:
        """Tokens per section (item tag), the total, and the persona's budget; for a
        text-completion model also ``prompt_text``, the prompt's whole text as sent (what it
        was fitted to the budget by: `instruct.fit_instruct_prompt`)."""
        context = self.prepared.context
        by_tag: dict[str, int] = {str(tag): 0 for tag in ItemTag}
        for item in context.items:
            by_tag[str(item.tag)] += item.tokens
        persona = self.prepared.turn_input.persona
        tokens = {
            "total": context.total_tokens,
            "budget": context_budget(persona.model.context_window, persona.model.max_output_tokens),
            "by_tag": {tag: n for tag, n in by_tag.items() if n},
            "counter": context.token_counter,
        }
        if isinstance(self.prepared.body.get("prompt"), str):
            counter = self.prepared.turn_input.token_counter
            tokens["prompt_text"] = counter.count(self.prepared.body["prompt"])
        return tokens


async def preview_prepare(
    *,
    channel_id: int,
    persona_name: str,
    as_user_id: int | None = None,
    text: str | None = None,
    trigger_message_id: int | None = None,
    window_message_ids: frozenset[int] | None = None,
    pinned_anchor_id: int | None = None,
    now: dt.datetime,
    then: Callable[[PreparedTurn], Awaitable[T]] | None = None,
) -> PreviewResult:
    """Prepare a dry-run turn of ``persona_name`` in the channel.

    Steps:
        1. Read the channel's configuration at ``now`` (`preview_configuration`).
        2. Log in a REST-only port, taught which messages the personas delivered.
        3. The trigger (`preview_trigger`): the hypothetical message (``as_user_id`` says
           ``text`` now, `hypothetical_message`), else the message ``trigger_message_id``,
           else the channel's newest message; and the trigger decision the worker would make.
        4. `turn_prepare(dry_run=True)` on a dry-run runtime (`preview_runtime`) whose history
           read includes the hypothetical message.

    A replay passes ``trigger_message_id`` (the recorded turn's trigger),
    ``window_message_ids`` (the window it read) and ``pinned_anchor_id`` (where that window
    started): the history is that window again, read from Discord, from the same anchor
    whatever the channel's anchor is now. ``then`` is awaited with the prepared turn while
    the port is still open (a replay asks the model there); its result is
    `PreviewResult.then_result`.

    Raises `PreviewError` (unknown channel or persona, nothing to answer) or
    `DiscordUnavailable` (no token, login refused).
    """
    configuration, persona = await sync_to_async(preview_configuration)(
        channel_id=channel_id, persona_name=persona_name, now=now
    )
    async with discord_rest_port() as port:
        if configuration.guild_id is not None:
            await port.load_directory(configuration.guild_id)  # names and stickers, as the worker
        hypothetical = None
        if as_user_id is not None and text:
            guild_id = configuration.guild_id or 0
            name = await port.member_name(guild_id=guild_id, user_id=as_user_id)
            author = Author(id=as_user_id, display_name=name or str(as_user_id))
            hypothetical = hypothetical_message(
                channel_id=channel_id, author=author, text=text, now=now
            )
        trigger = await preview_trigger(
            port=port,
            configuration=configuration,
            hypothetical=hypothetical,
            message_id=trigger_message_id,
        )
        verdict = trigger.decision.verdict(persona.name)
        answers = verdict is not None and verdict.answers
        runtime = preview_runtime(
            port=port, now=now, hypothetical=hypothetical, window_message_ids=window_message_ids
        )
        addressed = verdict.addressed if verdict is not None else None
        request = TurnRequest(
            configuration=configuration,
            persona=persona,
            trigger=trigger.message,
            reason=addressed.reason if addressed else TurnReason.TRIGGER_WORD,
            reason_detail={"rule": str(addressed.reason), "detail": addressed.detail}
            if addressed
            else {},
            pinned_anchor_id=pinned_anchor_id,
        )
        prepared = await turn_prepare(runtime=runtime, request=request, dry_run=True)
        then_result = await then(prepared) if then is not None else None
    return PreviewResult(
        prepared=prepared,
        triggered_by=str(verdict.addressed.reason) if answers and verdict.addressed else None,
        hypothetical_id=hypothetical.id if hypothetical else None,
        then_result=then_result,
        trigger=trigger,
    )


def preview_configuration(
    *, channel_id: int, persona_name: str, now: dt.datetime
) -> tuple[ChannelConfiguration, Persona]:
    """The channel's configuration at ``now`` (its guild: the configuration row, else what
    ingest recorded) and the persona called ``persona_name`` in it.

    Raises `PreviewError` when the channel's guild is not configured or has no such enabled
    persona."""
    guild_id = dashboard_selectors.channel_configured_guild(channel_id=channel_id)
    configuration = selectors.channel_configuration(
        channel_id=channel_id, guild_id=guild_id, now=now
    )
    if configuration is None:
        raise PreviewError(f"channel {channel_id} is not in a configured guild")
    persona = configuration.persona_named(persona_name)
    if persona is None:
        names = ", ".join(p.name for p in configuration.personas) or "none"
        raise PreviewError(f"no enabled persona {persona_name!r} here (personas: {names})")
    return configuration, persona


def hypothetical_message(
    *, channel_id: int, author: Author, text: str, now: dt.datetime
) -> HistoryMessage:
    """The message ``author`` would post in the channel if they sent ``text`` at ``now``: the
    smallest snowflake of that instant, and the mentions Discord would parse from the text."""
    return HistoryMessage(
        id=snowflake_at(now),
        channel_id=channel_id,
        author=author,
        content=text,
        created_at=now,
        mention_ids=tuple(dict.fromkeys(int(i) for i in MENTION.findall(text))),
    )


@dataclass(frozen=True)
class PreviewTrigger:
    """The message the previewed turn answers and the trigger decision the worker would make
    for it (every persona's verdict)."""

    message: HistoryMessage
    decision: TriggerDecision


async def preview_trigger(
    *,
    port: DiscordPort,
    configuration: ChannelConfiguration,
    hypothetical: HistoryMessage | None,
    message_id: int | None,
) -> PreviewTrigger:
    """Choose the trigger — ``hypothetical``, else message ``message_id`` read from Discord,
    else the channel's newest message — and decide it as the worker does (the same gathering
    step, `selectors.trigger_inputs`, and `trigger_decision`).

    Raises `PreviewError` when that message cannot be read or the channel has none."""
    channel_id = configuration.channel_id
    trigger = hypothetical
    if trigger is None and message_id is not None:
        trigger = await port.fetch_message(channel_id, message_id)
        if trigger is None:
            raise PreviewError(f"message {message_id} can no longer be read")
    if trigger is None:
        newest = sorted(await port.fetch_history(channel_id, 1), key=lambda m: m.id)
        if not newest:
            raise PreviewError("the channel has no message to answer yet")
        trigger = newest[-1]
    [facts] = await sync_to_async(selectors.trigger_inputs)(
        configuration=configuration, messages=[trigger], bot_user_id=port.bot_user_id
    )
    return PreviewTrigger(message=trigger, decision=trigger_decision(facts))


def preview_runtime(
    *,
    port: RestDiscordPort,
    now: dt.datetime,
    hypothetical: HistoryMessage | None = None,
    window_message_ids: frozenset[int] | None = None,
) -> TurnRuntime:
    """A dry-run `TurnRuntime` (`chat.runtime.dry_run_runtime`: no model client, the
    settings' capabilities) over ``port`` at the fixed instant ``now``, with a window registry
    of its own (no gateway: the stored anchor says where the window starts) whose history read
    is the channel's with ``hypothetical`` as its newest message, or (``window_message_ids``)
    a recorded window read again."""

    async def fetch_history(channel: int, limit: int) -> list[HistoryMessage]:
        messages = await port.fetch_history(channel, limit)
        if window_message_ids is not None:
            return await _recorded_window(port, channel, messages, window_message_ids)
        if hypothetical is None:
            return messages
        newest = sorted((*messages, hypothetical), key=lambda m: m.id)
        return newest[-limit:]

    return dry_run_runtime(port=port, now=now, fetch_history=fetch_history)


async def _recorded_window(
    port: DiscordPort,
    channel_id: int,
    newest: list[HistoryMessage],
    wanted: frozenset[int],
) -> list[HistoryMessage]:
    """The recorded window's messages that still exist: from ``newest`` where they are there,
    the older ones fetched one by one (`messages_fetch`)."""
    found = {m.id: m for m in newest if m.id in wanted}
    missing = sorted(wanted - found.keys())
    for message in await messages_fetch(port, [(channel_id, i) for i in missing]):
        if message is not None:
            found[message.id] = message
    return [found[i] for i in sorted(found)]


async def message_fetch(*, channel_id: int, message_id: int) -> HistoryMessage | None:
    """One message read from Discord over the REST port, attributed as the worker attributes
    it; None when there is no Discord to read (no token) or the message cannot be read."""
    try:
        async with discord_rest_port() as port:
            return await port.fetch_message(channel_id, message_id)
    except DiscordUnavailable:
        return None


@dataclass(frozen=True)
class ReplayResult:
    """A recorded turn prepared again for ``persona`` on ``model`` as a dry run: the new
    request, its line diff against the recorded one, and the model's reply when it was asked
    (``reply`` None: not asked; ``error`` the model's failure). Nothing is delivered."""

    persona: str
    model: str
    request: dict[str, Any]
    diff: tuple[str, ...]
    asked_model: bool
    reply: str | None
    error: str | None
    window_reused: bool


async def turn_replay(
    *, turn: Turn, persona_name: str, model: str, ask_model: bool, now: dt.datetime
) -> ReplayResult:
    """Replay ``turn`` (its trigger, and the window it recorded) as ``persona_name`` on
    ``model`` (empty: the persona's own). The model is called only with ``ask_model``, and
    then with ``LLM_BASE_URL``; the reply is shown, never delivered, and no row is written.

    Raises `PreviewError` / `DiscordUnavailable` like `preview_prepare`.
    """
    if turn.trigger_message_id is None:
        raise PreviewError("this turn has no trigger message to replay")
    recorded = (turn.window or {}).get("message_ids") or []
    window_ids = frozenset(int(i) for i in recorded) or None
    anchor = (turn.window or {}).get("anchor_message_id") if window_ids else None
    if ask_model and not settings.LLM_BASE_URL:
        raise PreviewError("LLM_BASE_URL is not set: there is no model to ask")

    async def run(prepared: PreparedTurn) -> tuple[dict[str, Any], TurnCompletion | None]:
        models = prepared.models
        if model:
            models = (dataclasses.replace(models[0], name=model), *models[1:])
        # Stream as the recorded request did, so the diff shows what the replay changed.
        stream = bool(turn.request.get("stream", True))
        body = request_body(
            models=models, render=prepared.render, toolbox=prepared.toolbox, stream=stream
        )
        completion = None
        if ask_model:
            async with llm_client_from_settings() as client:
                runner = AttemptRunner(client=client, stream=stream)
                completion = await runner.complete_turn(
                    models=models,
                    render=prepared.render,
                    persona_name=prepared.request.persona.name,
                    toolbox=prepared.toolbox,
                )
        return body, completion

    result = await preview_prepare(
        channel_id=turn.channel_id,
        persona_name=persona_name,
        trigger_message_id=turn.trigger_message_id,
        window_message_ids=window_ids,
        pinned_anchor_id=int(anchor) if anchor else None,
        now=now,
        then=run,
    )
    body, completion = result.then_result
    # Keys sorted on both sides: the database stores JSON objects in its own key order.
    diff = difflib.unified_diff(
        json.dumps(turn.request, indent=1, ensure_ascii=False, sort_keys=True).splitlines(),
        json.dumps(body, indent=1, ensure_ascii=False, sort_keys=True).splitlines(),
        fromfile=f"turn {turn.id} ({turn.persona_name})",
        tofile=f"replay ({result.prepared.request.persona.name})",
        lineterm="",
    )
    return ReplayResult(
        persona=result.prepared.request.persona.name,
        model=body.get("model", ""),
        request=body,
        diff=tuple(diff),
        asked_model=ask_model,
        reply=completion.reply_text if completion else None,
        error=str(completion.error) if completion and completion.error else None,
        window_reused=window_ids is not None,
    )
