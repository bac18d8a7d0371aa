"""A persona greets a channel: an admin's first message (a card's ``first_mes`` or a greeting
they write), posted as the persona and recorded as a turn.

The greeting answers no message, so the turn has no trigger and asks no model; it is a turn all
the same (reason ``greeting``), so moderators find it with the others, and its messages are
indexed as the persona's: the persona's later turns read the greeting as its own line.
"""

from __future__ import annotations

import time

from chat.models import Turn
from chat.pipeline.triggers import TurnReason
from chat.ports import DeliveryError, DiscordPort
from chat.services.turn_delivery import persona_speaker
from chat.services.turn_lifecycle import turn_failed, turn_replied, turn_start_unprompted
from chat.services.turn_record import ms_since
from personas.models import Persona

GREETING_MAX = 4_000
"""Characters of one greeting (at most two Discord messages)."""


async def persona_greet(
    *, port: DiscordPort, persona: Persona, channel_id: int, text: str, by: str = ""
) -> Turn:
    """Post ``text`` as ``persona`` in ``channel_id`` and return its `Turn`.

    Steps: record the turn (reason ``greeting``; ``by`` names who asked, for the record),
    deliver as the persona (the bot account for the main persona, else its webhook), record
    the delivered messages as the persona's (``turn.started`` and ``turn.finished`` go out).
    A delivery Discord refuses ends the turn ``failed`` with the error; nothing raises for it.

    Raises:
        ValueError: ``text`` is blank or longer than `GREETING_MAX`.
    """
    text = text.strip()
    if not text or len(text) > GREETING_MAX:
        raise ValueError(f"a greeting has 1 to {GREETING_MAX:,} characters")
    turn = await turn_start_unprompted(
        persona=persona,
        channel_id=channel_id,
        reason=TurnReason.GREETING,
        reason_detail={"by": by} if by else {},
        reply_text=text,
    )
    started = time.perf_counter()
    try:
        delivered = await port.deliver(
            channel_id=channel_id,
            speaker=persona_speaker(persona=persona),
            text=text,
            reply_to=None,
        )
    except DeliveryError as error:
        turn.deliver_ms = ms_since(started=started)
        await turn_failed(turn=turn, error=f"delivery failed: {error}")
    else:
        turn.deliver_ms = ms_since(started=started)
        turn.delivered_message_ids = [str(item.message_id) for item in delivered]
        await turn_replied(turn=turn, delivered=delivered)
    return turn
