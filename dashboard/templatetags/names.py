"""``{% load names %}``: ``{% guild_name id %}``, ``{% channel_name id %}``, ``{% user_name id %}``
render the name (`dashboard.names`) with the raw id in a tooltip; ``{% channel_label id %}`` the
channel's name as plain text."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils.html import format_html

from dashboard.names import NameBook, ShownName, name_book

register = template.Library()


def _book(context: template.Context) -> NameBook:
    book = context.get("names")
    return book if isinstance(book, NameBook) else name_book(context.get("request"))


def _render(shown: ShownName, kind: str) -> str:
    if not shown.discord_id:
        return format_html('<span class="name {}">{}</span>', kind, shown.text)
    title = f"{kind} id {shown.discord_id}" + ("" if shown.known else " (no name seen yet)")
    classes = (
        f"name {kind}"
        + (" hidden-user" if shown.hidden else "")
        + ("" if shown.known else " unnamed")
    )
    return format_html(
        '<span class="{}" title="{}" data-id="{}">{}</span>',
        classes,
        title,
        shown.discord_id,
        shown.text,
    )


def _id(value: Any) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


@register.simple_tag(takes_context=True)
def guild_name(context: template.Context, guild_id: Any) -> str:
    return _render(_book(context).guild(_id(guild_id)), "guild")


@register.simple_tag(takes_context=True)
def channel_name(context: template.Context, channel_id: Any) -> str:
    return _render(_book(context).channel(_id(channel_id)), "channel")


@register.simple_tag(takes_context=True)
def user_name(context: template.Context, user_id: Any, fallback: str = "") -> str:
    """The user's name; ``fallback`` (e.g. the name on their message) when none was kept."""
    shown = _book(context).user(_id(user_id))
    if not shown.known and fallback:
        shown = ShownName(shown.discord_id, fallback)
    return _render(shown, "user")


@register.simple_tag(takes_context=True)
def channel_label(context: template.Context, channel_id: Any) -> str:
    """The channel's name as plain text (for titles and options)."""
    return _book(context).channel(_id(channel_id)).text
