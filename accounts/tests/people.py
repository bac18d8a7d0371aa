"""Dashboard people for tests: someone who logged in with Discord, with given rights."""

from __future__ import annotations

from collections.abc import Mapping

from allauth.socialaccount.models import SocialAccount
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import GuildRight, GuildRole, RightSource
from accounts.roles import MANAGE_GUILD, MANAGE_MESSAGES


def discord_person(discord_id: int, roles: Mapping[int, GuildRole], *, name: str = "") -> User:
    """A person who logged in with Discord as ``discord_id``, with ``roles`` per guild."""
    user = User.objects.create_user(f"discord-{discord_id}", first_name=name or str(discord_id))
    user.set_unusable_password()
    user.save()
    SocialAccount.objects.create(
        user=user, provider="discord", uid=str(discord_id), extra_data={"id": str(discord_id)}
    )
    for guild_id, role in roles.items():
        bits = MANAGE_GUILD if role == GuildRole.ADMIN else MANAGE_MESSAGES
        GuildRight.objects.create(
            user=user, guild_id=guild_id, role=role, permissions=bits, source=RightSource.LOGIN
        )
    return user


def client_of(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client
