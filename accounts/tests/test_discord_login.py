"""Log in with Discord through the sandbox's OAuth2 pages: who gets in, with which rights, and
every way a login can fail leaving nothing behind."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from allauth.socialaccount.models import SocialAccount, SocialToken
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client

from accounts.models import GuildRight, GuildRole
from accounts.tests.discord_login import callback, consent, discord_login, login_start
from chat.sandbox.demo import DEMO_GUILD_ID, DEMO_USER_IDS

ALICE, BOB, CAROL = (DEMO_USER_IDS[name] for name in ("alice", "bob", "carol"))

pytestmark = pytest.mark.django_db(transaction=True)


@sync_to_async
def rights_of(discord_id: int) -> dict[int, str]:
    account = SocialAccount.objects.get(provider="discord", uid=str(discord_id))
    return dict(GuildRight.objects.filter(user=account.user).values_list("guild_id", "role"))


@sync_to_async
def nothing_made() -> bool:
    return not (
        User.objects.filter(username__startswith="discord-").exists()
        or SocialAccount.objects.exists()
        or SocialToken.objects.exists()
        or GuildRight.objects.exists()
    )


async def logged_in(client: Client) -> bool:
    return (await sync_to_async(client.get)("/")).status_code == 200


async def test_the_login_page_offers_discord_and_keeps_the_staff_form(discord):
    page = await sync_to_async(Client().get)("/accounts/login/")
    html = page.content.decode()
    assert 'action="/accounts/discord/login/"' in html and "Log in with Discord" in html
    assert 'name="username"' in html and 'name="password"' in html


async def test_the_authorize_url_asks_for_identify_and_guilds_with_a_state(discord):
    url = await login_start(Client())
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == discord.oauth_authorize_url
    assert set(query["scope"][0].split()) == {"identify", "guilds"}
    assert query["response_type"] == ["code"] and len(query["state"][0]) >= 12
    assert query["redirect_uri"] == ["http://testserver/accounts/discord/login/callback/"]


async def test_an_admin_in_discord_logs_in_as_admin_of_that_guild(discord):
    client = Client()
    response = await discord_login(client, ALICE)
    assert response.status_code == 302 and response["Location"] == "/"
    assert await rights_of(ALICE) == {DEMO_GUILD_ID: GuildRole.ADMIN}
    assert await logged_in(client)
    user = await sync_to_async(User.objects.get)(socialaccount__uid=str(ALICE))
    assert (user.username, user.email, user.is_staff, user.has_usable_password()) == (
        f"discord-{ALICE}",
        "",
        False,
        False,
    )
    assert await sync_to_async(SocialToken.objects.filter(account__user=user).exists)()


async def test_manage_messages_makes_a_moderator(discord):
    client = Client()
    assert (await discord_login(client, CAROL)).status_code == 302
    assert await rights_of(CAROL) == {DEMO_GUILD_ID: GuildRole.MODERATOR}


async def test_someone_with_no_right_anywhere_is_not_logged_in_and_nothing_is_made(discord):
    client = Client()
    response = await discord_login(client, BOB)
    assert response.status_code == 403
    assert b"neither Manage Server nor Manage Messages" in response.content
    assert await nothing_made() and not await logged_in(client)


async def test_a_forged_state_is_refused(discord):
    client = Client()
    await login_start(client)
    response = await sync_to_async(client.get)(
        "/accounts/discord/login/callback/?code=anything&state=forged-state"
    )
    assert response.status_code == 400 and b"did not start here" in response.content
    assert await nothing_made() and not await logged_in(client)


async def test_a_replayed_state_is_refused(discord):
    first = Client()
    back = await consent(await login_start(first), ALICE)
    assert (await callback(first, back)).status_code == 302
    again = await callback(first, back)
    assert again.status_code == 400 and b"did not start here" in again.content
    stranger = Client()
    assert (await callback(stranger, back)).status_code == 400
    assert not await logged_in(stranger)


async def test_a_code_made_for_another_redirect_url_is_refused(discord):
    client = Client()
    url = await login_start(client)
    state = parse_qs(urlsplit(url).query)["state"][0]
    back = await consent(url, ALICE, redirect_uri="http://elsewhere.example/callback")
    code = parse_qs(urlsplit(back).query)["code"][0]
    response = await sync_to_async(client.get)(
        f"/accounts/discord/login/callback/?code={code}&state={state}"
    )
    assert response.status_code == 400
    assert b"made for another redirect URL" in response.content
    assert await nothing_made() and not await logged_in(client)


async def test_cancelling_on_discord_logs_nobody_in(discord):
    client = Client()
    response = await callback(client, await consent(await login_start(client), None))
    assert response.status_code == 400 and b"You cancelled" in response.content
    assert await nothing_made()


@pytest.mark.parametrize(
    ("method", "route", "status", "says", "answers"),
    [
        ("GET", "/users/@me", 401, b"revoked or has expired", 502),
        ("GET", "/users/@me/guilds", 429, b"rate limiting users/@me/guilds (429). Try again", 503),
        ("GET", "/users/@me/guilds", 502, b"failed to answer users/@me/guilds (502)", 502),
        ("POST", "/oauth2/token", 503, b"failed to answer oauth2/token (503)", 502),
    ],
)
async def test_discord_failing_during_login_ends_on_a_clear_page(
    discord, method, route, status, says, answers
):
    client = Client()
    back = await consent(await login_start(client), ALICE)
    discord.inject_fault(method, route, status, retry_after=3 if status == 429 else None)
    response = await callback(client, back)
    assert response.status_code == answers
    assert says in response.content
    assert await nothing_made() and not await logged_in(client)


async def test_a_token_revoked_before_use_is_refused(discord):
    client = Client()
    back = await consent(await login_start(client), ALICE)
    real_exchange = discord.sandbox.oauth.exchange

    def exchange_then_revoke(form, authorization):
        grant = real_exchange(form, authorization)
        discord.sandbox.oauth.revoke_user(ALICE)
        return grant

    discord.sandbox.oauth.exchange = exchange_then_revoke
    response = await callback(client, back)
    assert response.status_code == 502 and b"revoked or has expired" in response.content
    assert await nothing_made()


async def test_a_discord_user_is_never_matched_to_a_staff_account(discord):
    staff = await sync_to_async(User.objects.create_user)(
        "alice", email="alice@example.com", password="pw", is_staff=True
    )
    await sync_to_async(User.objects.create_user)(f"discord-{ALICE}", password="pw")
    client = Client()
    assert (await discord_login(client, ALICE)).status_code == 302
    person = await sync_to_async(User.objects.get)(socialaccount__uid=str(ALICE))
    assert person.pk != staff.pk and not person.is_staff
    assert person.username not in ("alice", f"discord-{ALICE}")


async def test_a_logged_in_staff_user_cannot_connect_their_discord(discord):
    staff = await sync_to_async(User.objects.create_user)("ada", password="pw", is_staff=True)
    client = Client()
    await sync_to_async(client.force_login)(staff)
    response = await discord_login(client, ALICE, process="connect")
    assert response.status_code == 403 and b"cannot be connected" in response.content
    assert not await sync_to_async(SocialAccount.objects.exists)()


async def test_a_second_login_keeps_one_person_and_reads_the_rights_again(discord):
    first = Client()
    assert (await discord_login(first, ALICE)).status_code == 302
    discord.sandbox.member_role_remove(DEMO_GUILD_ID, ALICE, _moderators_role(discord))
    discord.sandbox.member_role_add(DEMO_GUILD_ID, ALICE, _helpers_role(discord))
    second = Client()
    assert (await discord_login(second, ALICE)).status_code == 302
    assert await rights_of(ALICE) == {DEMO_GUILD_ID: GuildRole.MODERATOR}
    assert await sync_to_async(SocialAccount.objects.count)() == 1


async def test_the_login_is_not_offered_when_it_is_not_configured(transactional_db, settings):
    settings.DISCORD_LOGIN_ENABLED = False
    client = Client()
    page = await sync_to_async(client.get)("/accounts/login/")
    assert b"Log in with Discord" not in page.content
    assert (await sync_to_async(client.post)("/accounts/discord/login/")).status_code == 404


def _moderators_role(server) -> int:
    from chat.sandbox.demo import DEMO_MODERATOR_ROLE_ID

    return DEMO_MODERATOR_ROLE_ID


def _helpers_role(server) -> int:
    from chat.sandbox.demo import DEMO_HELPER_ROLE_ID

    return DEMO_HELPER_ROLE_ID


async def test_opening_the_login_link_asks_before_leaving_for_discord(discord):
    page = await sync_to_async(Client().get)("/accounts/discord/login/")
    assert page.status_code == 200 and b"Continue to Discord" in page.content
