"""The rights Discord gives each person who logs in with Discord, per guild.

A person is a Django user made by the first "Log in with Discord" (django-allauth's
``SocialAccount`` ties it to the Discord user id). Their rights are rows of `GuildRight`, one
per configured guild where Discord says they may manage: written at login from
``users/@me/guilds``, kept fresh by the worker's gateway (member and role events) and by
Celery beat's refresh with the stored token (`accounts.services`). Pages read them
(`accounts.selectors.guild_rights`); nothing on a page's path asks Discord.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class GuildRole(models.TextChoices):
    """What a person may do in one guild: an admin changes its configuration, a moderator
    sees and inspects it."""

    ADMIN = "admin", "admin"
    MODERATOR = "moderator", "moderator"


class RightSource(models.TextChoices):
    """Where a right was read last."""

    LOGIN = "login", "users/@me/guilds at login"
    REFRESH = "refresh", "users/@me/guilds, refreshed with the stored token"
    GATEWAY = "gateway", "the worker's gateway (members and roles)"


class GuildRight(models.Model):
    """One person's role in one configured guild, as Discord last said it. No row: the guild
    does not exist for them. ``permissions`` are the guild-level permission bits it was read
    from (Discord's integer)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="guild_rights"
    )
    guild_id = models.PositiveBigIntegerField()
    role = models.CharField(max_length=9, choices=GuildRole.choices)
    permissions = models.PositiveBigIntegerField(default=0)
    source = models.CharField(max_length=8, choices=RightSource.choices)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["user", "guild_id"]
        constraints = [
            models.UniqueConstraint(fields=["user", "guild_id"], name="guild_right_one_per_guild"),
            models.CheckConstraint(
                condition=Q(role__in=GuildRole.values), name="guild_right_role_valid"
            ),
        ]
        indexes = [models.Index(fields=["guild_id"], name="guild_right_guild")]

    def __str__(self) -> str:
        return f"{self.user_id}: {self.role} of {self.guild_id}"
