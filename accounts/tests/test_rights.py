"""The one place that decides rights, and keeping them as Discord says: the gateway's view of
members and roles, and the refresh of ``users/@me/guilds`` with the stored token."""

from __future__ import annotations

import pytest
from allauth.socialaccount.models import SocialToken
from asgiref.sync import sync_to_async
from django.contrib.auth.models import AnonymousUser, Group, User
from django.test import Client

from accounts.models import GuildRight, GuildRole
from accounts.roles import ADMINISTRATOR, MANAGE_GUILD, MANAGE_MESSAGES, guild_role
from accounts.selectors import MODERATORS_GROUP, GuildRights, guild_rights
from accounts.services import guild_rights_observe, rights_refresh
from accounts.tasks import guild_rights_refresh_task
from accounts.tests.discord_login import discord_login
from accounts.tests.people import discord_person
from chat.models import Turn
from chat.sandbox.demo import (
    DEMO_GUILD_ID,
    DEMO_HELPER_ROLE_ID,
    DEMO_MODERATOR_ROLE_ID,
    DEMO_USER_IDS,
)
from personas.models import GuildConfig

ALICE, BOB, CAROL = (DEMO_USER_IDS[name] for name in ("alice", "bob", "carol"))
GUILD = 1100000000000000001
OTHER = 1100000000000000002


@pytest.mark.parametrize(
    ("bits", "owner", "role"),
    [
        (ADMINISTRATOR, False, GuildRole.ADMIN),
        (MANAGE_GUILD, False, GuildRole.ADMIN),
        (MANAGE_MESSAGES, False, GuildRole.MODERATOR),
        (MANAGE_MESSAGES | MANAGE_GUILD, False, GuildRole.ADMIN),
        (0, True, GuildRole.ADMIN),
        (1 << 10 | 1 << 11, False, None),
        (0, False, None),
    ],
)
def test_a_role_follows_from_discords_permission_bits(bits, owner, role):
    assert guild_role(bits, owner=owner) == role


@pytest.mark.django_db
def test_the_rights_of_each_kind_of_person():
    assert guild_rights(user=AnonymousUser()) == GuildRights()
    staff = User.objects.create_user("op", is_staff=True)
    assert guild_rights(user=staff).operator and guild_rights(user=staff).may_change(OTHER)
    moderator = User.objects.create_user("mo")
    moderator.groups.add(Group.objects.get_or_create(name=MODERATORS_GROUP)[0])
    rights = guild_rights(user=moderator)
    assert rights.may_view(OTHER) and not rights.may_change(OTHER)
    person = discord_person(1, {GUILD: GuildRole.ADMIN, OTHER: GuildRole.MODERATOR})
    rights = guild_rights(user=person)
    assert rights.may_change(GUILD) and rights.may_view(OTHER) and not rights.may_change(OTHER)
    assert not rights.may_view(3) and rights.guild_ids == frozenset({GUILD, OTHER})
    person.is_active = False
    assert guild_rights(user=person) == GuildRights()


@pytest.mark.django_db
def test_a_scoped_queryset_starts_from_the_persons_guilds():
    Turn.objects.create(guild_id=GUILD, channel_id=1, persona_name="a", reason="mention")
    Turn.objects.create(guild_id=OTHER, channel_id=2, persona_name="b", reason="mention")
    mine = GuildRights(roles={GUILD: GuildRole.MODERATOR})
    assert list(mine.scope(Turn.objects.all()).values_list("guild_id", flat=True)) == [GUILD]
    assert GuildRights().scope(Turn.objects.all()).count() == 0
    assert GuildRights(operator=True).scope(Turn.objects.all()).count() == 2


@pytest.fixture
def configured(db) -> None:
    for guild_id in (GUILD, OTHER):
        GuildConfig.objects.create(guild_id=guild_id, name=f"guild {guild_id}")


def test_the_gateway_takes_a_right_and_gives_another(
    configured, django_capture_on_commit_callbacks
):
    person = discord_person(7, {GUILD: GuildRole.ADMIN, OTHER: GuildRole.MODERATOR})
    [change] = guild_rights_observe(
        guild_id=GUILD, permissions={7: MANAGE_MESSAGES, 8: MANAGE_GUILD}
    )
    assert change.changed == {GUILD} and not change.ended
    assert guild_rights(user=person).role(GUILD) == GuildRole.MODERATOR
    with django_capture_on_commit_callbacks() as published:
        guild_rights_observe(guild_id=OTHER, permissions={7: None})
    assert not guild_rights(user=person).may_view(OTHER)
    assert len(published) == 1  # the person's sockets are told
    assert guild_rights_observe(guild_id=99, permissions={7: MANAGE_GUILD}) == []  # not configured


def test_losing_the_last_right_ends_every_session(configured):
    person = discord_person(7, {GUILD: GuildRole.ADMIN})
    client = Client()
    client.force_login(person)
    assert client.get("/").status_code == 200
    [change] = guild_rights_observe(guild_id=GUILD, permissions={7: 0})
    assert change.ended and not GuildRight.objects.exists()
    response = client.get("/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


# --- the refresh with the stored token (Celery beat) -------------------------------------------


async def _logged_in(discord, user_id: int) -> User:
    response = await discord_login(Client(), user_id)
    assert response.status_code == 302
    return await sync_to_async(User.objects.get)(socialaccount__uid=str(user_id))


@sync_to_async
def _roles(user: User) -> dict[int, str]:
    return dict(GuildRight.objects.filter(user=user).values_list("guild_id", "role"))


async def test_the_refresh_reads_a_role_taken_in_discord(discord):
    alice = await _logged_in(discord, ALICE)
    discord.sandbox.member_role_add(DEMO_GUILD_ID, ALICE, DEMO_HELPER_ROLE_ID)
    discord.sandbox.member_role_remove(DEMO_GUILD_ID, ALICE, DEMO_MODERATOR_ROLE_ID)
    change = await sync_to_async(rights_refresh)(user=alice)
    assert change.changed == {DEMO_GUILD_ID}
    assert await _roles(alice) == {DEMO_GUILD_ID: GuildRole.MODERATOR}


async def test_an_expired_token_is_refreshed_first(discord):
    carol = await _logged_in(discord, CAROL)
    discord.sandbox.oauth.expire_user(CAROL)
    token = await sync_to_async(SocialToken.objects.get)(account__user=carol)
    discord.sandbox.member_remove(DEMO_GUILD_ID, CAROL)
    change = await sync_to_async(rights_refresh)(user=carol)
    assert change.ended and await _roles(carol) == {}
    renewed = await sync_to_async(SocialToken.objects.get)(account__user=carol)
    assert renewed.token != token.token and renewed.token_secret != token.token_secret


async def test_a_revoked_token_takes_every_right_and_ends_the_sessions(discord):
    alice = await _logged_in(discord, ALICE)
    discord.sandbox.oauth.revoke_user(ALICE)
    change = await sync_to_async(rights_refresh)(user=alice)
    assert change.ended and await _roles(alice) == {}
    assert not await sync_to_async(SocialToken.objects.filter(account__user=alice).exists)()


@pytest.mark.parametrize("status", [429, 503])
async def test_discord_not_answering_keeps_the_rights_until_the_next_refresh(discord, status):
    alice = await _logged_in(discord, ALICE)
    discord.inject_fault(
        "GET", "/users/@me/guilds", status, retry_after=1 if status == 429 else None
    )
    assert await sync_to_async(rights_refresh)(user=alice) is None
    assert await _roles(alice) == {DEMO_GUILD_ID: GuildRole.ADMIN}


async def test_the_beat_task_refreshes_everyone_signed_in(discord):
    await _logged_in(discord, ALICE)
    await _logged_in(discord, CAROL)
    discord.sandbox.member_remove(DEMO_GUILD_ID, CAROL)
    counts = await sync_to_async(guild_rights_refresh_task)()
    assert counts == {"read": 2, "changed": 1, "ended": 1, "unanswered": 0}
