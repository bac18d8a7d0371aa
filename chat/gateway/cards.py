"""What a card (an embed or a Components V2 container) is, recognised at the gateway boundary.

Seed 002 keeps diagnostic embeds and unshared dice rolls out of every prompt (and out of reply
quotes), and shows shared dice rolls like any card; seed 000 turns this bot's own cards into
system notices. Discord marks none of these, so the gateway reads the card's words:

- a link preview (an embed Discord made from a URL: type ``link``, ``article``, ``image``,
  ``video`` …) is always an ordinary card;
- a **diagnostic** card names itself so in its title, footer or a field name: ``debug``,
  ``diagnostic(s)``, ``latency``, ``ping``, ``uptime``, ``metrics``, ``heartbeat``;
- a **dice roll** says it is one (🎲, or ``roll``/``rolls``/``rolled``/``rolling`` in its title,
  footer or a field name) and shows dice notation (``d20``, ``2d6+3``) anywhere; it is
  **unshared** when it says the roller kept it to themselves (``hidden``, ``secret``,
  ``private``, ``blind``, ``GM only``), else shared;
- any other card is this bot's **system notice** when this bot posted it, else ordinary; a
  notice of this bot's made of a title and the footer ``memory #N`` alone is a
  **minimal-verbosity** notice (`minimal_notice_memory`): prompts restore the memory's
  current text as its body.

These rules hold for every author: a dice bot's roll is a roll, and so is one of ours.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from chat.pipeline.types import CardKind

DIAGNOSTIC_WORDS = re.compile(
    r"(?<!\w)(?:debug|diagnostics?|latency|ping|uptime|metrics|heartbeat)(?!\w)", re.IGNORECASE
)
ROLL_WORDS = re.compile(r"🎲|(?<!\w)roll(?:s|ed|ing)?(?!\w)", re.IGNORECASE)
DICE_NOTATION = re.compile(r"(?<![\w.])\d{0,3}d(?:\d{1,4}|%)(?!\w)", re.IGNORECASE)
MEMORY_FOOTER = re.compile(r"memory #(\d{1,12})", re.IGNORECASE)
UNSHARED_WORDS = re.compile(
    r"(?<!\w)(?:hidden|secret|private|blind|gm[ -]only)(?!\w)", re.IGNORECASE
)


def card_kind(*, own: bool, preview: bool, labels: Sequence[str], body: Sequence[str]) -> CardKind:
    """The kind of one card.

    Args:
        own: This bot posted the card.
        preview: Discord made the card from a link (an embed whose type is not ``rich``).
        labels: What names the card: its title, footer and field names (a container: its
            first text display).
        body: Everything else it says: description and field values (a container: the rest).
    """
    if preview:
        return CardKind.ORDINARY
    label = "\n".join(labels)
    if DIAGNOSTIC_WORDS.search(label):
        return CardKind.DIAGNOSTIC
    if ROLL_WORDS.search(label) and DICE_NOTATION.search("\n".join((label, *body))):
        hidden = UNSHARED_WORDS.search("\n".join((label, *body)))
        return CardKind.UNSHARED_DICE_ROLL if hidden else CardKind.DICE_ROLL
    return CardKind.SYSTEM_NOTICE if own else CardKind.ORDINARY


def minimal_notice_memory(
    *, title: str, description: str, field_count: int, footer: str
) -> int | None:
    """The memory id a minimal-verbosity notice card confirms: a title, no description or
    fields, and the footer ``memory #N``; None for any other card."""
    match = MEMORY_FOOTER.fullmatch(footer.strip())
    if match is None or not title or description or field_count:
        return None
    return int(match[1])
