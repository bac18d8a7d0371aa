"""A turn a limit refused before any model was called (DESIGN §3b): recorded with why, and
answered in the channel without a model.

- A user past ``user_turns``: a ⏳ reaction on their message.
- A spent budget: the first refused trigger in a channel gets one short notice from the main
  persona (the guild's ``limits.notice``, else `DEFAULT_NOTICE`); the later ones a 💤
  reaction, until a turn of the channel calls a model again (the budget renewed, or an admin
  raised it).

The turn ends ``refused`` (`chat.services.turn_lifecycle.turn_refused`) with the reason as its
error and, in ``reason_detail``, which limit (``limit``: ``budget`` or ``user_turns``) and
whether it sent the notice (``notice``): what the why page and the next refusal read.
"""

from __future__ import annotations

import datetime as dt
import logging
from zoneinfo import ZoneInfo

from asgiref.sync import sync_to_async
from django.db.models import Max, Q

from chat.llm.metering import Refusal
from chat.models import PlannerStep, Turn
from chat.ports import DeliveryError, Speaker
from chat.selectors import ChannelConfiguration
from chat.services.spend import DEFAULT_NOTICE, guild_limits_from_stored
from chat.services.turn_lifecycle import turn_refused
from chat.services.turn_request import TurnRequest, TurnRuntime

logger = logging.getLogger(__name__)

WAITING = "⏳"
"""The reaction a user past ``user_turns`` gets on the message no model answered."""
RESTING = "💤"
"""The reaction a trigger gets when a spent budget's notice was already sent in its channel."""
NOTICE_LOOKBACK = dt.timedelta(days=31)
"""How far back a channel's turns are read to tell whether its notice was sent."""


async def turn_refuse(
    *, runtime: TurnRuntime, request: TurnRequest, turn: Turn, refusal: Refusal
) -> None:
    """End ``turn`` refused by the limit ``refusal`` names, answered as that limit is."""
    if refusal.limit == "user_turns":
        await turn_refuse_user_turns(
            runtime=runtime, request=request, turn=turn, reason=refusal.reason
        )
    else:
        await turn_refuse_budget(runtime=runtime, request=request, turn=turn, refusal=refusal)


async def turn_refuse_user_turns(
    *, runtime: TurnRuntime, request: TurnRequest, turn: Turn, reason: str
) -> None:
    """End ``turn`` refused (a user past ``user_turns``) and react ⏳ to its trigger."""
    turn.reason_detail = {**turn.reason_detail, "limit": "user_turns"}
    await turn_refused(turn=turn, reason=f"a limit said no: {reason}")
    await _react(runtime, request.channel.channel_id, request.trigger.id, WAITING)


async def turn_refuse_budget(
    *, runtime: TurnRuntime, request: TurnRequest, turn: Turn, refusal: Refusal
) -> None:
    """End ``turn`` refused (a spent budget); the channel's first such turn since a model was
    last called there sends the notice, the later ones react 💤."""
    channel_id = request.channel.channel_id
    notice = await sync_to_async(budget_notice_due)(
        channel_id=channel_id, now=runtime.clock(), turn_id=turn.id
    )
    turn.reason_detail = {**turn.reason_detail, "limit": "budget", "notice": notice}
    await turn_refused(turn=turn, reason=f"a limit said no: {refusal.reason}")
    if notice:
        await budget_notice_send(
            runtime=runtime,
            configuration=request.configuration,
            refusal=refusal,
            reply_to=request.trigger.id,
        )
    else:
        await _react(runtime, channel_id, request.trigger.id, RESTING)


def budget_notice_due(*, channel_id: int, now: dt.datetime, turn_id: int | None = None) -> bool:
    """Whether a spent budget's notice is due in the channel: none was sent (by a refused turn
    or planner step) since a turn or planner step there last asked a model. ``turn_id``, the
    turn asking, is left out; only the `NOTICE_LOOKBACK` before ``now`` is read."""
    floor = now - NOTICE_LOOKBACK
    turns = Turn.objects.filter(channel_id=channel_id, created_at__gte=floor)
    if turn_id is not None:
        turns = turns.exclude(id=turn_id)
    refused = Q(status=Turn.Status.REFUSED)
    found = turns.aggregate(
        notice=Max("created_at", filter=refused & Q(reason_detail__notice=True)),
        called=Max("created_at", filter=~refused),
    )
    steps = PlannerStep.objects.filter(channel_id=channel_id, created_at__gte=floor)
    planned = steps.aggregate(
        notice=Max("created_at", filter=Q(action__notice=True)),
        called=Max("created_at", filter=~Q(action__has_key="refused")),
    )
    sent = _latest(found["notice"], planned["notice"])
    called = _latest(found["called"], planned["called"])
    return sent is None or (called is not None and called > sent)


def _latest(*stamps: dt.datetime | None) -> dt.datetime | None:
    return max((t for t in stamps if t is not None), default=None)


async def budget_notice_send(
    *,
    runtime: TurnRuntime,
    configuration: ChannelConfiguration,
    refusal: Refusal,
    reply_to: int | None,
) -> None:
    """Send the spent budget's notice in the channel from its main persona (through the bot
    account, silent, as the product's notices are)."""
    if not configuration.personas:
        return
    main = configuration.personas[0]
    guild = configuration.settings.guild or main.guild
    text = budget_notice_text(
        configured=guild_limits_from_stored(stored=guild.limits).notice,
        persona=main.name,
        renews_at=refusal.renews_at,
        zone=ZoneInfo(guild.timezone),
    )
    try:
        await runtime.port.deliver(
            channel_id=configuration.channel_id,
            speaker=Speaker(persona_id=main.id, name=main.name, is_main=True),
            text=text,
            reply_to=reply_to,
            as_notice=True,
        )
    except DeliveryError:
        logger.warning("could not send the budget notice in %s", configuration.channel_id)


def budget_notice_text(
    *, configured: str, persona: str, renews_at: dt.datetime | None, zone: ZoneInfo
) -> str:
    """The notice: the guild's text, else `DEFAULT_NOTICE`; ``{persona}`` becomes the main
    persona's name and ``{renews}`` when the budget renews, in the guild's time zone."""
    renews = (
        f"at {renews_at.astimezone(zone):%Y-%m-%d %H:%M} {zone.key}"
        if renews_at is not None
        else "when an admin raises it"
    )
    text = configured.strip() or DEFAULT_NOTICE
    return text.replace("{persona}", persona).replace("{renews}", renews)


async def _react(runtime: TurnRuntime, channel_id: int, message_id: int, emoji: str) -> None:
    try:
        await runtime.port.react(channel_id, message_id, emoji)
    except DeliveryError:
        logger.warning("could not react %s in %s", emoji, channel_id)
