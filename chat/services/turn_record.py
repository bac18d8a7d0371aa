"""What a turn's record holds: the context it was built from and the model exchange (put on the
`Turn` object; `chat.services.turn_lifecycle` saves it), the channel's window anchor, and the
scrubbing of a user's lines. `window_report` is the window as the dashboard shows it.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from django.db.models import Q

from chat.llm.turn_completion import TurnCompletion
from chat.models import ChannelWindowAnchor, Turn
from chat.pipeline.items import ContextItem
from chat.pipeline.simplify import EntryKind, hidden_user_ids
from chat.ports import DeliveryError
from chat.services.memory_recall import recalled_record
from chat.services.turn_request import PreparedTurn
from chat.shards import ShardSet

LEFT_OUT_AFTER_TRIGGER = "newer than the trigger: answered in its own turn"
LEFT_OUT_TRUNCATED = "removed by truncation to fit the token budget"
LEFT_OUT_HIDDEN = "full privacy or blacklisted: never shown"
LEFT_OUT_BLOCKED = "blocked for this persona: shown as a notice"
LEFT_OUT_EMPTY = "nothing to show (no text, media or cards)"


def window_report(*, prepared: PreparedTurn) -> dict[str, Any]:
    """The window a turn read, as the dashboard shows it (JSON-ready; ids as strings).

    Keys: ``anchor_message_id`` (the oldest message of the selected window, None when it is
    empty), ``message_ids`` (the window, oldest first), ``rest_reason`` (why it was read over
    REST; None: reused), ``refs`` (message id → its ``ref_N``/``media_N`` key) and ``left_out``
    (``[{"reason", "count"}]``: how many of the window's messages did not reach the prompt as
    themselves, and why, and how many of the channel's newer messages wait for their own
    turns). Counts only: the text of a hidden user is never part of it.
    """
    context, turn_input = prepared.context, prepared.turn_input
    history = turn_input.history
    entries = context.simplified_history.entries
    shown = {i for e in entries if e.kind != EntryKind.BLOCKED for i in e.message_ids}
    blocked = {i for e in entries if e.kind == EntryKind.BLOCKED for i in e.message_ids}
    removed = set(context.truncation.removed_message_ids)
    hidden = hidden_user_ids(turn_input.privacy, turn_input.blacklisted_user_ids)
    counts: dict[str, int] = {}
    if after_trigger := int(str(prepared.window.get("after_trigger") or 0)):
        counts[LEFT_OUT_AFTER_TRIGGER] = after_trigger
    for message in history:
        if message.id in shown and message.id not in removed:
            continue
        if message.id > turn_input.trigger_id:
            reason = LEFT_OUT_AFTER_TRIGGER
        elif message.id in removed:
            reason = LEFT_OUT_TRUNCATED
        elif message.accountable_user_id in hidden:
            reason = LEFT_OUT_HIDDEN
        elif message.id in blocked:
            reason = LEFT_OUT_BLOCKED
        else:
            reason = LEFT_OUT_EMPTY
        counts[reason] = counts.get(reason, 0) + 1
    return {
        "anchor_message_id": str(history[0].id) if history else None,
        "message_ids": [str(m.id) for m in history],
        "rest_reason": str(prepared.rest_reason) if prepared.rest_reason else None,
        "refs": {str(snowflake): key for key, snowflake in context.message_ids.items()},
        "left_out": [{"reason": reason, "count": n} for reason, n in counts.items()],
    }


def context_items_json(
    *, items: Sequence[ContextItem], authors: Mapping[int, int] | None = None
) -> list[dict[str, Any]]:
    """The context's items as JSON (the turn record keeps them, the preview shows them): tag,
    role, text, tokens and the source message ids as strings; with ``authors`` (message id →
    accountable user id) also each item's ``author_ids``, so a user's lines can be found and
    redacted later (`turn_records_scrub`)."""
    rows = []
    for item in items:
        row = {
            "tag": str(item.tag),
            "role": str(item.role),
            "text": item.text,
            "tokens": item.tokens,
            "source_ids": [str(i) for i in item.source_ids],
        }
        if authors is not None:
            row["author_ids"] = sorted({str(authors[i]) for i in item.source_ids if i in authors})
        rows.append(row)
    return rows


def turn_context_record(*, turn: Turn, prepared: PreparedTurn) -> None:
    """What the turn was built from: items, request, truncation, tools, timings."""
    context = prepared.context
    given = prepared.turn_input
    authors = {m.id: m.accountable_user_id for m in (*given.history, *given.reply_targets.values())}
    turn.context_items = context_items_json(items=context.items, authors=authors)
    turn.request = prepared.body
    turn.window = {**prepared.window, **window_report(prepared=prepared)}
    turn.cache_prefix_end = context.cacheable_prefix_end
    turn.truncation = _jsonable(asdict(context.truncation))
    turn.tool_allowlist = list(context.tools)
    turn.recalled = recalled_record(
        memories=prepared.recalled, after=prepared.context.memories_after
    )
    turn.prefill = context.prefill or ""
    turn.warnings = list(context.warnings)
    turn.lorebook = context.lore.as_record()
    turn.history_ms = prepared.history_ms
    turn.participant_ms = prepared.participant_ms
    for field_name, ms in prepared.participant_timings.items():
        setattr(turn, field_name, ms)
    turn.build_ms = prepared.build_ms


def turn_completion_record(*, turn: Turn, completion: TurnCompletion) -> None:
    """The model exchange: one JSON object per model call (the tools' own calls after the
    attempts; each with its kind and cost), the summed token usage (None when the provider
    reported none), the exact body of the final attempt, the reply, the error and the
    completion's warnings after the context's."""
    turn.attempts = [record.as_json() for record in (*completion.attempts, *completion.tool_calls)]
    turn.prompt_tokens = completion.usage.prompt_tokens
    turn.completion_tokens = completion.usage.completion_tokens
    turn.cached_prompt_tokens = completion.usage.cached_prompt_tokens
    turn.request = completion.request or turn.request
    turn.llm_ms = completion.llm_ms - completion.meter_ms
    turn.limits_ms = (turn.limits_ms or 0.0) + completion.meter_ms
    turn.reply_text = completion.reply_text
    turn.error = str(completion.error) if completion.error is not None else ""
    turn.warnings = [*turn.warnings, *completion.warnings]


def turn_refusal_record(*, turn: Turn, failure: DeliveryError | None) -> None:
    """Keep on the turn what Discord refused it (the code, the channel, the permission by
    name), when ``failure`` says (a 403 Missing Permissions or Missing Access)."""
    if failure is not None and failure.refusal is not None:
        turn.discord_refusal = failure.refusal.as_record()


def _jsonable(value: object) -> object:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, int) and value > 2**53:
        return str(value)
    return value


def window_anchor_store(
    *,
    channel_id: int,
    anchor_id: int,
    limit: int,
    guild_id: int | None,
    reanchor_due: bool = False,
) -> None:
    """Store the channel's anchor (the guild's, None for a DM). ``reanchor_due``: the worker's
    windows were dropped while the turn that chose it ran, so its next turn chooses anew."""
    ChannelWindowAnchor.objects.update_or_create(
        channel_id=channel_id,
        defaults={
            "anchor_message_id": anchor_id,
            "limit": limit,
            "guild_id": guild_id,
            "reanchor_due": reanchor_due,
        },
    )


def window_anchors_reanchor_due(*, shards: ShardSet, before: dt.datetime) -> int:
    """A worker dropped its history windows at ``before`` (its gateway connected, reconnected
    or disconnected): the anchors of the channels on its ``shards`` stored before then are due
    a new anchor, as its own next read of each will choose (DESIGN §5). Inspection (the
    preview, replay, ``/prompt``) reads the row, so it shows the window the worker's next turn
    will read. An anchor stored since is left alone (a turn already chose it afresh). Returns
    how many rows were marked."""
    rows = ChannelWindowAnchor.objects.filter(updated_at__lt=before, reanchor_due=False)
    return shards.filter(rows).update(reanchor_due=True)


def ms_since(*, started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 2)


# --- Forgetting a user ---------------------------------------------------------------------------

REDACTED = "[deleted: this person chose full privacy]"


@dataclass(frozen=True)
class TurnScrub:
    """What `turn_records_scrub` did: the turns whose prompt record lost a user's lines."""

    turn_ids: frozenset[int]


def turn_records_scrub(*, user_id: int, guild_id: int) -> TurnScrub:
    """Replace ``user_id``'s lines with `REDACTED` in the stored turns of the guild and of
    direct messages (where the strictest level a user holds in any guild applies).

    A context item is theirs when it renders a message of theirs (``author_ids``; a record
    written before authors were kept: when it renders the turn's trigger and they triggered
    it). Its text is replaced in the items and wherever the request body quotes it, so the
    record keeps its shape (roles, order, token counts). Call it inside the caller's
    transaction."""
    mine = str(user_id)
    changed = set()
    turns = Turn.objects.filter(Q(guild_id=guild_id) | Q(guild_id__isnull=True))
    for turn in turns.select_for_update().iterator(chunk_size=200):
        items = turn.context_items
        quoted = []
        for item in items:
            if _is_theirs(item, turn, mine) and item.get("text") and item["text"] != REDACTED:
                quoted.append(item["text"])
                item["text"] = REDACTED
        if not quoted:
            continue
        turn.context_items = items
        turn.request = _redact(turn.request, sorted(quoted, key=len, reverse=True))
        turn.save(update_fields=["prompt_record"])
        changed.add(turn.id)
    return TurnScrub(frozenset(changed))


def turn_records_redact(*, guild_id: int, texts: list[str]) -> frozenset[int]:
    """Replace each of ``texts`` (a cleared short-term memory's summary or notes) with
    `REDACTED` wherever the guild's stored turns quote it; returns the turns changed."""
    wanted = sorted({t for t in texts if t}, key=len, reverse=True)
    changed = set()
    if not wanted:
        return frozenset()
    for turn in Turn.objects.filter(guild_id=guild_id).select_for_update().iterator(chunk_size=200):
        record = turn.prompt_record
        redacted = _redact(record, wanted)
        if redacted != record:
            turn.prompt_record = redacted
            turn.save(update_fields=["prompt_record"])
            changed.add(turn.id)
    return frozenset(changed)


def _is_theirs(item: dict[str, Any], turn: Turn, user_id: str) -> bool:
    if "author_ids" in item:
        return user_id in item["author_ids"]
    trigger = str(turn.trigger_message_id) if turn.trigger_message_id else None
    return (
        trigger is not None
        and str(turn.trigger_author_id) == user_id
        and trigger in item.get("source_ids", [])
    )


def _redact(value: Any, texts: list[str]) -> Any:
    """``value`` (a request body) with each of ``texts`` replaced by `REDACTED` in every
    string it holds."""
    if isinstance(value, str):
        for text in texts:
            value = value.replace(text, REDACTED)
        return value
    if isinstance(value, list):
        return [_redact(v, texts) for v in value]
    if isinstance(value, dict):
        return {k: _redact(v, texts) for k, v in value.items()}
    return value
