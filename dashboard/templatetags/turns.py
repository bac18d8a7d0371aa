"""``{% load turns %}``: ``{{ turn|trigger_excerpt }}``, the start of the turn's trigger
message (`dashboard.selectors.trigger_excerpt`); ``{% path 'dashboard:turn' turn.pk %}``, a
page's path by URL name and integer ids (`dashboard.paths.path_to`: ``{% url %}``'s answer,
cheaper on pages with hundreds of links); and ``{% kept key version %}…{% endkept %}``, a
piece rendered once and kept while its version stays the same (the overview's guild cards,
whose version digests everything they show: `dashboard.selectors.overview_shown`)."""

from __future__ import annotations

import threading
from collections import OrderedDict

from django import template

from chat.models import Turn
from dashboard import selectors
from dashboard.paths import path_to

register = template.Library()


@register.filter
def trigger_excerpt(turn: Turn) -> str:
    """The excerpt `selectors.with_excerpts` gave the turn, else read from its record."""
    excerpt = getattr(turn, "excerpt", None)
    return excerpt if excerpt is not None else selectors.trigger_excerpt(turn=turn)


@register.simple_tag
def message_url(guild_id: int | None, channel_id: int, message_id: int | str | None) -> str:
    """The message's link in Discord (empty without a message)."""
    if not message_id:
        return ""
    return f"https://discord.com/channels/{guild_id or '@me'}/{channel_id}/{message_id}"


@register.simple_tag
def path(name: str, *ids: int) -> str:
    return path_to(name, *ids)


KEPT_PIECES = 5_000
_kept: OrderedDict[tuple[str, str], tuple[str, str]] = OrderedDict()
_kept_lock = threading.Lock()


class KeptNode(template.Node):
    """Renders its content once per (template, key) and version; the same version again gets
    the kept HTML. An empty version is never kept."""

    def __init__(self, nodelist, key, version) -> None:
        self.nodelist, self.key, self.version = nodelist, key, version

    def render(self, context: template.Context) -> str:
        version = str(self.version.resolve(context) or "")
        if not version:
            return self.nodelist.render(context)
        key = (self.origin.name if self.origin else "", str(self.key.resolve(context)))
        with _kept_lock:
            hit = _kept.get(key)
            if hit is not None and hit[0] == version:
                _kept.move_to_end(key)
                return hit[1]
        html = self.nodelist.render(context)
        with _kept_lock:
            _kept[key] = (version, html)
            if len(_kept) > KEPT_PIECES:
                _kept.popitem(last=False)
        return html


@register.tag("kept")
def kept(parser: template.base.Parser, token: template.base.Token) -> KeptNode:
    """``{% kept key version %}…{% endkept %}``."""
    bits = token.split_contents()
    if len(bits) != 3:
        raise template.TemplateSyntaxError("{% kept %} takes a key and a version")
    nodelist = parser.parse(("endkept",))
    parser.delete_first_token()
    return KeptNode(nodelist, parser.compile_filter(bits[1]), parser.compile_filter(bits[2]))


def kept_forget() -> None:
    """Forget every kept piece (tests compare a kept render with a fresh one)."""
    with _kept_lock:
        _kept.clear()
