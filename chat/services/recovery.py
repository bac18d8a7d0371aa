"""Crash recovery: the turns a stopped or killed worker left running or delivering are settled
before the next worker answers anything, and again while it runs for turns begun before it took
the shards over (the previous holder may have left them so after the first pass)."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from dataclasses import dataclass

from asgiref.sync import sync_to_async

from chat import selectors
from chat.models import Turn
from chat.ports import DeliveryError, DiscordPort, Speaker
from chat.services.turn_lifecycle import turn_aborted, turn_replied, turns_abort_interrupted

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reconciled:
    """What `turns_reconcile_interrupted` found: turns aborted, and delivering turns whose
    reply was (``replied``) or was not (``unsent``) on Discord."""

    aborted: int = 0
    replied: int = 0
    unsent: int = 0


async def turns_reconcile_interrupted(
    *,
    port: DiscordPort,
    on_shard: Callable[[int | None], bool],
    started_before: dt.datetime | None = None,
) -> Reconciled:
    """Settle the turns a stopped or killed worker left behind, in guilds ``on_shard`` accepts
    (None: DMs), before this worker answers anything; with ``started_before``, only turns
    begun before then (a worker that took the shards over at that moment settles what the
    previous holder left after the start-up pass: none of them can be its own).

    - ``running`` turns end ``aborted``: nothing was sent, their triggers are still unread, so
      they run again.
    - ``delivering`` turns are checked against the channel (`DiscordPort.find_delivery`): a
      reply that is there makes the turn ``replied`` and is indexed, so it is not sent again;
      a reply that is not there makes it ``aborted``, and the trigger runs again. A streamed
      reply whose pieces were recorded is ``replied`` with what was sent (the pieces on
      record, and any sent but not recorded yet): it is neither continued nor sent again. A channel
      that cannot be read leaves the turn ``delivering`` for the next start (never a guess that
      could answer twice).
    """
    aborted = await sync_to_async(_turns_abort_running)(on_shard, started_before)
    replied = unsent = 0
    delivering = await sync_to_async(selectors.turns_delivering)(
        on_shard=on_shard, started_before=started_before
    )
    for turn in delivering:
        persona = turn.persona
        speaker = Speaker(
            persona_id=persona.id if persona else 0,
            name=turn.persona_name,
            is_main=bool(persona and persona.is_main),
            avatar_url=persona.avatar_url if persona else "",
        )
        if turn.trigger_message_id is None:
            continue  # only a turn answering a message is claimed: nothing here to look for
        try:
            found = await port.find_delivery(
                channel_id=turn.channel_id, speaker=speaker, reply_to=turn.trigger_message_id
            )
        except DeliveryError:
            logger.warning("turn %s: its channel cannot be read; reconciled later", turn.id)
            continue
        indexed = await sync_to_async(selectors.indexed_message_ids)(
            message_ids=[item.message_id for item in found]
        )
        recorded = [int(i) for i in turn.delivered_message_ids]
        sent = [i for i in found if i.message_id not in indexed or i.message_id in recorded]
        if sent or recorded:
            ids = sorted({*recorded, *(item.message_id for item in sent)})
            turn.delivered_message_ids = [str(i) for i in ids]
            if recorded:
                turn.error = (
                    f"the worker stopped while the reply was being delivered: {len(ids)} "
                    "messages were sent, the rest was not"
                )
            await turn_replied(turn=turn, delivered=sent)
            replied += 1
        else:
            await turn_aborted(turn=turn, reason="the worker stopped before the reply was sent")
            unsent += 1
    return Reconciled(aborted=aborted, replied=replied, unsent=unsent)


def _turns_abort_running(
    on_shard: Callable[[int | None], bool], started_before: dt.datetime | None
) -> int:
    running = Turn.objects.filter(status=Turn.Status.RUNNING)
    if started_before is not None:
        running = running.filter(created_at__lt=started_before)
    stale = [
        turn_id for turn_id, guild_id in running.values_list("id", "guild_id") if on_shard(guild_id)
    ]
    return turns_abort_interrupted(turn_ids=stale, reason="the worker stopped during the turn")
