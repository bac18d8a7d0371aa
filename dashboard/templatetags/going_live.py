"""``{% load going_live %}``: the going-live parts of the overview, the guild page and the
add-a-guild page (`dashboard.going_live`), each rendered from its own partial."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils import timezone

from dashboard import going_live
from personas.models import GuildConfig

register = template.Library()


def _shared(context: template.Context) -> dict[str, Any]:
    return {"is_admin": context.get("is_admin", False), "csrf_token": context.get("csrf_token")}


@register.inclusion_tag("dashboard/_deployment.html", takes_context=True)
def deployment_card(context: template.Context) -> dict[str, Any]:
    """The latest deployment check, its failing lines linked to their guild or channel, the
    invite link, the turns Discord refused, and (admins) "Check now"."""
    status = going_live.deployment_status(now=timezone.now(), rights=context["rights"])
    return {**_shared(context), "status": status}


@register.inclusion_tag("dashboard/_guild_presence.html", takes_context=True)
def guild_presence(context: template.Context, guild: GuildConfig) -> dict[str, Any]:
    """On a guild's page: that the bot is not in it, with the invite link."""
    presence = going_live.guild_presence(guild=guild, now=timezone.now())
    return {**_shared(context), "guild": guild, "presence": presence}


@register.inclusion_tag("dashboard/_bot_guild_choices.html", takes_context=True)
def bot_guild_choices(context: template.Context) -> dict[str, Any]:
    """On the add-a-guild page: the guilds the bot is in that are not configured, by name."""
    return {**_shared(context), "choices": going_live.unconfigured_bot_guilds(now=timezone.now())}
