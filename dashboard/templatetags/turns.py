"""``{% load turns %}``: ``{{ turn|trigger_excerpt }}``, the start of the turn's trigger
message (`dashboard.selectors.trigger_excerpt`), and ``{% path 'dashboard:turn' turn.pk %}``,
a page's path by URL name and integer ids (`dashboard.paths.path_to`: ``{% url %}``'s answer,
cheaper on pages with hundreds of links)."""

from __future__ import annotations

from django import template

from chat.models import Turn
from dashboard import selectors
from dashboard.paths import path_to

register = template.Library()


@register.filter
def trigger_excerpt(turn: Turn) -> str:
    """The excerpt `selectors.with_excerpts` gave the turn, else read from its record."""
    excerpt = getattr(turn, "excerpt", None)
    return excerpt if excerpt is not None else selectors.trigger_excerpt(turn)


@register.simple_tag
def message_url(guild_id: int | None, channel_id: int, message_id: int | str | None) -> str:
    """The message's link in Discord (empty without a message)."""
    if not message_id:
        return ""
    return f"https://discord.com/channels/{guild_id or '@me'}/{channel_id}/{message_id}"


@register.simple_tag
def path(name: str, *ids: int) -> str:
    return path_to(name, *ids)
