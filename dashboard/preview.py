"""The prompt preview: the exact request a persona turn would send now, without sending it.

`preview_prepare` runs `chat.services.turns.turn_prepare` with ``dry_run=True`` on a dry-run
runtime over a REST-only Discord port (`chat.runtime`: a logged-in, never-connected client, and
no model client at all), so it reads the channel the way the worker does and renders the same
body, and changes nothing: no anchor, no row, no event, no model call.

With a hypothetical message (``as_user_id`` and ``text``), that message is the trigger: it is
added to the channel's history as its newest message, exactly where the real message would be
when the user sent it.
"""

from __future__ import annotations

import asyncio
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
from chat.llm.attempts import AttemptRunner, TurnCompletion, request_body
from chat.models import Turn
from chat.pipeline.items import ItemTag
from chat.pipeline.triggers import TurnReason, reactive_triggers
from chat.pipeline.truncation import context_budget
from chat.pipeline.types import Author, HistoryMessage
from chat.ports import DiscordPort, DiscordUnavailable
from chat.runtime import discord_rest_port, dry_run_runtime, llm_client_from_settings
from chat.selectors import ChannelConfiguration
from chat.services.turn_record import window_report
from chat.services.turn_request import PreparedTurn, TurnRequest
from chat.services.turns import turn_prepare
from personas.models import ChannelConfig

T = TypeVar("T")
DISCORD_EPOCH_MS = 1_420_070_400_000
MENTION = re.compile(r"<@!?(\d+)>")

__all__ = ["DiscordUnavailable", "PreviewError", "PreviewResult", "preview_prepare"]


class PreviewError(Exception):
    """The preview cannot be made; the message says why (shown to the moderator)."""


@dataclass(frozen=True)
class PreviewResult:
    """A dry-run prepared turn and what the preview page shows about it.

    ``triggered_by`` is the reason the trigger rules give this persona for the trigger (None:
    they would not answer it; the preview still shows what it would send). ``hypothetical_id``
    is the id given to the hypothetical message (None without one).
    """

    prepared: PreparedTurn
    triggered_by: str | None
    hypothetical_id: int | None
    then_result: Any = None

    def as_json(self) -> dict[str, Any]:
        """DESIGN §3's preview JSON: request, items, tokens, cache_prefix_end, tools."""
        context = self.prepared.context
        items = [
            {
                "index": index,
                "tag": str(item.tag),
                "role": str(item.role),
                "text": item.text,
                "tokens": item.tokens,
                "source_ids": [str(i) for i in item.source_ids],
            }
            for index, item in enumerate(context.items)
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
            "window": window_report(self.prepared),
            "triggered_by": self.triggered_by,
        }

    def tokens(self) -> dict[str, Any]:
        """Tokens per section (item tag), the total, and the persona's budget."""
        context = self.prepared.context
        by_tag: dict[str, int] = {str(tag): 0 for tag in ItemTag}
        for item in context.items:
            by_tag[str(item.tag)] += item.tokens
        persona = self.prepared.turn_input.persona
        return {
            "total": context.total_tokens,
            "budget": context_budget(persona.model.context_window, persona.model.max_output_tokens),
            "by_tag": {tag: n for tag, n in by_tag.items() if n},
            "counter": context.token_counter,
        }


def snowflake_at(moment: dt.datetime) -> int:
    """The smallest Discord snowflake of ``moment`` (what a message sent then would exceed)."""
    return (int(moment.timestamp() * 1000) - DISCORD_EPOCH_MS) << 22


async def preview_prepare(
    *,
    channel_id: int,
    persona_name: str,
    as_user_id: int | None = None,
    text: str | None = None,
    trigger_message_id: int | None = None,
    window_message_ids: frozenset[int] | None = None,
    now: dt.datetime,
    then: Callable[[PreparedTurn], Awaitable[T]] | None = None,
) -> PreviewResult:
    """Prepare a dry-run turn of ``persona_name`` in the channel.

    Steps:
        1. Find the channel's guild (its configuration row, else what ingest recorded) and read
           its configuration at ``now``.
        2. Log in a REST-only port, taught which messages the personas delivered.
        3. The trigger: the hypothetical message (``as_user_id`` says ``text`` now), else the
           channel's newest message.
        4. `turn_prepare(dry_run=True)` with a fresh window registry whose history read
           includes the hypothetical message.

    A replay passes ``trigger_message_id`` (the recorded turn's trigger) and
    ``window_message_ids`` (the window it read): the history is that window again, read from
    Discord. ``then`` is awaited with the prepared turn while the port is still open (a replay
    asks the model there); its result is `PreviewResult.then_result`.

    Raises `PreviewError` (unknown channel or persona, nothing to answer) or
    `DiscordUnavailable` (no token, login refused).
    """
    guild_id = await sync_to_async(_channel_guild_id)(channel_id)
    configuration = await sync_to_async(selectors.channel_configuration)(
        channel_id=channel_id, guild_id=guild_id, now=now
    )
    if configuration is None:
        raise PreviewError(f"channel {channel_id} is not in a configured guild")
    persona = configuration.persona_named(persona_name)
    if persona is None:
        names = ", ".join(p.name for p in configuration.personas) or "none"
        raise PreviewError(f"no enabled persona {persona_name!r} here (personas: {names})")
    async with discord_rest_port() as port:
        hypothetical = None
        if as_user_id is not None and text:
            name = await port.member_name(guild_id=guild_id or 0, user_id=as_user_id)
            hypothetical = HistoryMessage(
                id=snowflake_at(now),
                channel_id=channel_id,
                author=Author(id=as_user_id, display_name=name or str(as_user_id)),
                content=text,
                created_at=now,
                mention_ids=tuple(dict.fromkeys(int(i) for i in MENTION.findall(text))),
            )

        async def fetch_history(channel: int, limit: int) -> list[HistoryMessage]:
            messages = await port.fetch_history(channel, limit)
            if window_message_ids is not None:
                return await _recorded_window(port, channel, messages, window_message_ids)
            if hypothetical is None:
                return messages
            newest = sorted((*messages, hypothetical), key=lambda m: m.id)
            return newest[-limit:]

        trigger = hypothetical
        if trigger is None and trigger_message_id is not None:
            trigger = await port.fetch_message(channel_id, trigger_message_id)
            if trigger is None:
                raise PreviewError(f"message {trigger_message_id} can no longer be read")
        if trigger is None:
            newest = sorted(await port.fetch_history(channel_id, 1), key=lambda m: m.id)
            if not newest:
                raise PreviewError("the channel has no message to answer yet")
            trigger = newest[-1]
        reason = await sync_to_async(_reason_for)(configuration, persona.name, trigger, port)
        runtime = dry_run_runtime(port=port, now=now, fetch_history=fetch_history)
        request = TurnRequest(
            configuration=configuration,
            persona=persona,
            trigger=trigger,
            reason=TurnReason(reason) if reason else TurnReason.TRIGGER_WORD,
        )
        prepared = await turn_prepare(runtime=runtime, request=request, dry_run=True)
        then_result = await then(prepared) if then is not None else None
    return PreviewResult(
        prepared=prepared,
        triggered_by=reason,
        hypothetical_id=hypothetical.id if hypothetical else None,
        then_result=then_result,
    )


async def _recorded_window(
    port: DiscordPort,
    channel_id: int,
    newest: list[HistoryMessage],
    wanted: frozenset[int],
) -> list[HistoryMessage]:
    """The recorded window's messages that still exist: from ``newest`` where they are there,
    the older ones fetched one by one (at most four at a time)."""
    found = {m.id: m for m in newest if m.id in wanted}
    gate = asyncio.Semaphore(4)

    async def fetch(message_id: int) -> HistoryMessage | None:
        async with gate:
            return await port.fetch_message(channel_id, message_id)

    missing = sorted(wanted - found.keys())
    for message in await asyncio.gather(*(fetch(i) for i in missing)):
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


def _channel_guild_id(channel_id: int) -> int | None:
    """The guild of a configured channel, else the one recorded at ingest; None: unknown (the
    configuration lookup then answers "not configured")."""
    row = ChannelConfig.objects.filter(channel_id=channel_id).select_related("guild").first()
    if row is not None:
        return row.guild.guild_id
    known = selectors.channel_guild_id(channel_id=channel_id)
    return known.guild_id if known is not None else None


def _reason_for(
    configuration: ChannelConfiguration,
    persona_name: str,
    trigger: HistoryMessage,
    port: DiscordPort,
) -> str | None:
    """Why the trigger rules would have ``persona_name`` answer ``trigger`` (None: they would
    not)."""
    standing = selectors.user_standing(user_ids=[trigger.accountable_user_id])
    replied = selectors.replied_persona_names(
        message_ids=[trigger.reference.message_id] if trigger.reference else []
    )
    triggers = reactive_triggers(
        message=trigger,
        personas=[selectors.trigger_persona(p) for p in configuration.personas],
        bot_user_id=port.bot_user_id,
        is_dm=configuration.guild_id is None,
        replied_persona_name=replied.get(trigger.reference.message_id)
        if trigger.reference
        else None,
        silenced_for={
            b.persona_name for b in configuration.blocks if b.user_id == trigger.author.id
        },
        author_blacklisted=trigger.accountable_user_id in standing.blacklisted,
    )
    return next((str(t.reason) for t in triggers if t.persona_name == persona_name), None)


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
