"""Moderation of what a persona says, before Discord shows it (DESIGN §3b, "Moderation").

With a moderation service configured (``MODERATION_BASE_URL``: `TurnRuntime.moderation`) and the
guild's moderation on, every piece of a reply is checked before it is sent: each paragraph
(``paragraphs`` delivery), each new text of the message being edited (``edit``), the whole reply
(``whole``). The delivery calls one `ReplyModeration` per reply (`reply_moderation_start`); which
categories pass is the pure policy's (`chat.pipeline.moderation`). A withheld piece stops the
reply: the pieces already sent stand, the rest is never sent, one notice says a reply was
withheld (`reply_withhold`). With ``moderation_input`` the guild's triggering messages are checked
too, before any model is asked (`trigger_moderation_refusal`).

Every check is kept on the turn (``Turn.moderation``), by `moderation_check_record`: the one
place a check is recorded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from chat import metrics
from chat.llm.moderation import ModerationClient, ModerationOnError, ModerationUnavailable
from chat.models import Turn
from chat.pipeline.moderation import (
    GuildModeration,
    Verdict,
    allowed_categories,
    moderation_decision,
)
from chat.ports import DeliveryError, Speaker
from chat.services.turn_lifecycle import turn_withheld
from chat.services.turn_request import TurnRequest, TurnRuntime
from personas.models import MODERATION_OFF, GuildConfig

logger = logging.getLogger(__name__)


class PieceKind(StrEnum):
    """What a checked text is: a paragraph, the new text of a message being edited, a whole
    reply, or the message that triggered the turn."""

    PARAGRAPH = "paragraph"
    EDIT = "edit"
    WHOLE = "whole"
    TRIGGER = "trigger"


@dataclass(frozen=True)
class ModerationCheck:
    """One check: the ``text`` checked (a ``kind`` of piece, for reply message ``message``,
    0-based; None for a trigger), the categories the service marked and every score, the
    ``verdict`` and the categories that decided a withholding (``blocking``), how long the
    service took, and ``error`` when it failed (the verdict is then ``MODERATION_ON_ERROR``'s)."""

    kind: PieceKind
    message: int | None
    text: str
    categories: tuple[str, ...]
    scores: Mapping[str, float]
    verdict: Verdict
    blocking: tuple[str, ...]
    latency_ms: float
    error: str = ""

    @property
    def passes(self) -> bool:
        return self.verdict is Verdict.PASS

    def as_json(self) -> dict[str, Any]:
        return {
            "kind": str(self.kind),
            "message": self.message,
            "text": self.text,
            "categories": list(self.categories),
            "scores": {c: round(s, 4) for c, s in sorted(self.scores.items())},
            "verdict": str(self.verdict),
            "blocking": list(self.blocking),
            "latency_ms": round(self.latency_ms, 1),
            "error": self.error,
        }


def guild_moderation(*, guild: GuildConfig | None) -> GuildModeration:
    """A guild's moderation setting as the policy reads it (no guild: the defaults)."""
    if guild is None:
        return GuildModeration()
    setting = guild.moderation
    return GuildModeration(
        checked=setting != MODERATION_OFF,
        allowed=frozenset(setting) if isinstance(setting, list) else frozenset(),
        check_input=guild.moderation_input,
    )


@dataclass
class ReplyModeration:
    """The moderation of one turn: the service, what the channel allows, and the turn whose
    record keeps each check (`check`)."""

    client: ModerationClient
    guild: GuildModeration
    nsfw_channel: bool
    turn: Turn

    async def check(self, text: str, *, kind: PieceKind, message: int | None) -> ModerationCheck:
        """Ask the service about ``text`` and judge its answer by the channel's policy; a
        service that fails gives ``MODERATION_ON_ERROR``'s verdict (``allow``: the piece passes
        and the turn carries a warning). The check is recorded on the turn."""
        started = time.perf_counter()
        try:
            answer = await self.client.classify(text)
        except ModerationUnavailable as error:
            allowed = self.client.on_error is ModerationOnError.ALLOW
            check = ModerationCheck(
                kind=kind,
                message=message,
                text=text,
                categories=(),
                scores={},
                verdict=Verdict.PASS if allowed else Verdict.WITHHOLD,
                blocking=(),
                latency_ms=_ms_since(started),
                error=str(error),
            )
            if allowed:
                warning = (
                    "moderation could not check a piece and let it through "
                    f"(MODERATION_ON_ERROR=allow): {error}"
                )
                if warning not in self.turn.warnings:
                    self.turn.warnings = [*self.turn.warnings, warning]
        else:
            decision = moderation_decision(
                flagged=answer.categories,
                service_flagged=answer.flagged,
                nsfw_channel=self.nsfw_channel,
                guild=self.guild,
            )
            check = ModerationCheck(
                kind=kind,
                message=message,
                text=text,
                categories=tuple(sorted(answer.categories)),
                scores=answer.scores,
                verdict=decision.verdict,
                blocking=decision.blocking,
                latency_ms=_ms_since(started),
            )
        moderation_check_record(turn=self.turn, check=check)
        return check

    def withheld_reason(self, check: ModerationCheck, *, sent: int) -> str:
        """Why the reply was withheld, for the turn's record and the why page."""
        if check.kind is PieceKind.TRIGGER:
            what = "the message that triggered the turn"
        elif check.kind is PieceKind.WHOLE:
            what = "the reply"
        else:
            what = f"message {(check.message or 0) + 1} of the reply"
        if check.error:
            return (
                f"moderation could not check {what} and withholds what it cannot check "
                f"(MODERATION_ON_ERROR=withhold): {check.error}"
            )
        channel = "NSFW" if self.nsfw_channel else "not NSFW"
        allowed = sorted(allowed_categories(nsfw_channel=self.nsfw_channel, guild=self.guild))
        reason = (
            f"moderation flagged {what} as {', '.join(check.blocking)}, which this channel does "
            f"not allow ({channel}; allowed here: {', '.join(allowed) or 'none'})"
        )
        if check.kind is PieceKind.TRIGGER:
            return reason
        return f"{reason}; {sent} of its messages had been sent"


def moderation_check_record(*, turn: Turn, check: ModerationCheck) -> None:
    """Keep ``check`` on the turn's record (saved with the turn's next save). The one place a
    check is recorded: whatever counts checks belongs here."""
    record = turn.moderation or {}
    turn.moderation = {**record, "checks": [*record.get("checks", []), check.as_json()]}
    if check.error:
        metrics.moderation_verdict_counted(verdict="error")
    else:
        metrics.moderation_verdict_counted(verdict="passed" if check.passes else "flagged")


async def reply_moderation_start(
    *, runtime: TurnRuntime, request: TurnRequest, turn: Turn
) -> ReplyModeration | None:
    """The moderation of ``turn``'s reply, or None when nothing is checked: no moderation
    service, or the guild turned moderation off. Reads once whether Discord marks the channel
    NSFW (a thread: its parent), and starts the turn's moderation record."""
    client = runtime.moderation
    if client is None:
        return None
    guild = guild_moderation(guild=request.channel.guild or request.persona.guild)
    if not guild.checked:
        return None
    if turn.moderation:  # started when the trigger was checked
        nsfw = bool(turn.moderation["nsfw_channel"])
    else:
        place = await runtime.port.locate_channel(request.channel.channel_id)
        nsfw = place is not None and place.nsfw
        turn.moderation = {
            "model": client.model,
            "nsfw_channel": nsfw,
            "allowed": sorted(allowed_categories(nsfw_channel=nsfw, guild=guild)),
            "checks": [],
        }
    return ReplyModeration(client=client, guild=guild, nsfw_channel=nsfw, turn=turn)


async def trigger_moderation_refusal(
    *, runtime: TurnRuntime, request: TurnRequest, turn: Turn
) -> str | None:
    """With the guild's ``moderation_input`` on, check the message that triggered ``turn``
    before any model is asked: the reason not to answer it when it is withheld, else None
    (also None when nothing is checked, or the message has no text). A withheld trigger is
    marked on the turn's record (``trigger_withheld``): later turns leave it out of their
    history and reply targets (`chat.selectors.moderation_withheld_message_ids`)."""
    if not request.trigger.content.strip():
        return None
    guild = guild_moderation(guild=request.channel.guild or request.persona.guild)
    if not guild.check_input:
        return None
    moderation = await reply_moderation_start(runtime=runtime, request=request, turn=turn)
    if moderation is None:
        return None
    check = await moderation.check(request.trigger.content, kind=PieceKind.TRIGGER, message=None)
    if check.passes:
        return None
    turn.moderation = {**turn.moderation, "trigger_withheld": True}
    return moderation.withheld_reason(check, sent=0)


def withheld_notice(*, persona_name: str, sent: int) -> str:
    """The one notice a withheld reply gets (none of its text)."""
    if sent:
        return f"(The rest of {persona_name}'s reply was withheld by this server's moderation.)"
    return f"({persona_name}'s reply was withheld by this server's moderation.)"


async def reply_withhold(
    *,
    runtime: TurnRuntime,
    request: TurnRequest,
    turn: Turn,
    moderation: ReplyModeration,
    check: ModerationCheck,
    shown: list[str],
    written: str,
) -> None:
    """End a claimed (``delivering``) turn whose reply ``check`` withheld: the turn keeps what
    Discord shows (``shown``, one text per message sent) as its reply and what the model wrote
    (``written``, humanized as it would have been sent) as the withheld text; it ends
    ``withheld`` with the reason; then one notice goes out as the main persona, answering the
    trigger (none of the reply's text). A notice Discord refuses is logged; the turn stays
    withheld. (Like the failure notice, the notice is the product speaking: it is not
    checked, and it is not indexed as the persona's.)"""
    persona = request.persona
    turn.reply_text = "\n\n".join(shown)
    turn.moderation = {
        **turn.moderation,
        "withheld": {"message": check.message, "text": written},
    }
    if not await turn_withheld(
        turn=turn, reason=moderation.withheld_reason(check, sent=len(shown))
    ):
        return
    main = Speaker(persona_id=0, name=persona.name, is_main=True)
    try:
        await runtime.port.deliver(
            channel_id=request.channel.channel_id,
            speaker=main,
            text=withheld_notice(persona_name=persona.name, sent=len(shown)),
            reply_to=request.trigger.id,
            as_notice=True,
        )
    except DeliveryError:
        logger.warning("could not send the withheld notice for turn %s", turn.id, exc_info=True)


def _ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000
