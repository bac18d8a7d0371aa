"""Each community sees only itself: for a person who administers guild A, every route of the
project (pages, partials, JSON, downloads, replay, why, websockets) answers "not found" for
guild B's objects, exactly as for objects that do not exist, and every list shows A only."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connections
from django.urls import reverse

from accounts.models import GuildRole
from accounts.tests.people import client_of, discord_person
from chat.models import Turn
from dashboard.tests.tenancy import (
    CHANNEL_A,
    CHANNEL_B,
    DM_CHANNEL,
    GUILD_A,
    GUILD_B,
    PERSON,
    SECRETS,
    Route,
    every_route,
    route_leaks,
    socket_leaks,
    two_guilds,
)
from personas.models import ConfigChange, GuildConfig, ModelPrice, Persona

pytestmark = pytest.mark.django_db


def test_every_route_answers_not_found_for_another_guilds_objects():
    tenancy = two_guilds()
    assert route_leaks(tenancy) == []


def test_the_walk_finds_a_view_that_forgot_to_scope_its_lookup(settings):
    tenancy = two_guilds()
    settings.ROOT_URLCONF = "dashboard.tests.leaky_urls"
    problems = route_leaks(tenancy)
    assert problems and all(p.startswith("leaky_name: {'GET': 200") for p in problems)


def test_the_walk_covers_routes_it_does_not_know_how_to_fill(settings):
    tenancy = two_guilds()
    del tenancy.b["memory_id"]
    problems = route_leaks(tenancy)
    assert any(
        p.startswith("dashboard:memory_edit: no guild-B value for ['memory_id']") for p in problems
    )


def test_the_persons_own_guild_opens(db):
    tenancy = two_guilds()
    opened = {}
    for route in every_route():
        name = route.name
        if not name.startswith("dashboard:") or not route.parameters:
            continue
        if any(p not in tenancy.a for p in route.parameters):
            continue
        response = tenancy.client.get(route.path(tenancy.a))
        if response.status_code != 405:
            opened[name] = response.status_code
    assert opened and all(status not in (403, 404) for status in opened.values()), opened
    assert {"dashboard:persona", "dashboard:turn", "dashboard:audit"} <= opened.keys()


@pytest.mark.django_db(transaction=True)
async def test_every_socket_answers_not_found_for_another_guilds_channel():
    tenancy = await sync_to_async(two_guilds)()
    session = tenancy.client.cookies[settings.SESSION_COOKIE_NAME].value
    assert await socket_leaks(tenancy, session) == []
    await sync_to_async(connections.close_all)()  # sync_to_async's thread's, before the drop


def test_lists_show_the_persons_guilds_only():
    tenancy = two_guilds()
    overview = tenancy.client.get("/").content.decode()
    assert "Day Larks Club" in overview and "Night Owls Lodge" not in overview
    turns = tenancy.client.get("/turns/").content.decode()
    assert "A-ONLY reply" in turns and "B-ONLY reply" not in turns
    why = tenancy.client.get("/why/").content.decode()
    assert "A-ONLY message" in why and "B-ONLY message" not in why


def test_a_dm_turn_belongs_to_the_guild_of_the_persona_that_answered_it():
    tenancy = two_guilds()
    mine = Turn.objects.create(
        guild_id=None,
        channel_id=DM_CHANNEL + 1,
        persona=Persona.objects.get(name="Larkin"),
        persona_name="Larkin",
        reason="dm",
        status=Turn.Status.REPLIED,
        reply_text="A-ONLY DM reply",
    )
    assert tenancy.client.get(f"/turns/{mine.pk}/").status_code == 200
    assert tenancy.client.get(f"/turns/{tenancy.b['dm_turn_id']}/").status_code == 404
    listed = tenancy.client.get("/turns/").content.decode()
    assert "A-ONLY DM reply" in listed and "B-ONLY DM reply" not in listed
    moderator_of_b = client_of(discord_person(1300000000000000888, {GUILD_B: GuildRole.MODERATOR}))
    assert moderator_of_b.get(f"/turns/{tenancy.b['dm_turn_id']}/").status_code == 200
    assert moderator_of_b.get(f"/turns/{mine.pk}/").status_code == 404


def test_the_configuration_download_holds_the_persons_guilds_only():
    tenancy = two_guilds()
    exported = json.loads(tenancy.client.get(reverse("dashboard:config_export")).content)
    assert [g["id"] for g in exported["guilds"]] == [str(GUILD_A)]


def test_an_upload_that_touches_another_guild_is_refused_whole_naming_it():
    tenancy = two_guilds()
    exported = json.loads(tenancy.client.get(reverse("dashboard:config_export")).content)
    exported["guilds"][0]["name"] = "Renamed Larks"
    exported["guilds"].append({"id": str(GUILD_B), "name": "Taken Over"})
    upload = SimpleUploadedFile("both.json", json.dumps(exported).encode())
    response = tenancy.client.post(reverse("dashboard:config_import"), {"file": upload})
    assert response.status_code == 400
    page = response.content.decode()
    assert "guilds[1].id" in page and f"{GUILD_B} is not a guild you may change" in page
    names = set(GuildConfig.objects.values_list("name", flat=True))
    assert names == {"Day Larks Club", "Night Owls Lodge"}
    assert not ConfigChange.objects.exists()


def test_an_upload_of_the_persons_own_guild_is_imported():
    tenancy = two_guilds()
    exported = json.loads(tenancy.client.get(reverse("dashboard:config_export")).content)
    exported["guilds"][0]["name"] = "Renamed Larks"
    upload = SimpleUploadedFile("mine.json", json.dumps(exported).encode())
    response = tenancy.client.post(reverse("dashboard:config_import"), {"file": upload})
    assert response.status_code == 200
    assert GuildConfig.objects.get(guild_id=GUILD_A).name == "Renamed Larks"
    change = ConfigChange.objects.get()
    assert (change.actor, change.actor_discord_id, change.via) == (
        tenancy.person,
        1300000000000000777,
        "mine.json",
    )


def test_a_guild_admins_upload_with_a_price_table_is_refused_whole():
    tenancy = two_guilds()
    exported = json.loads(tenancy.client.get(reverse("dashboard:config_export")).content)
    assert "prices" not in exported  # the price table is the operators'
    exported["guilds"][0]["name"] = "Renamed Larks"
    exported["prices"] = [
        {"model": "gpt-4o-mini", "usd_per_million": {"input": "0.01", "output": "0.02"}}
    ]
    upload = SimpleUploadedFile("cheap.json", json.dumps(exported).encode())
    response = tenancy.client.post(reverse("dashboard:config_import"), {"file": upload})
    assert response.status_code == 400
    assert "only operators set prices" in response.content.decode()
    assert GuildConfig.objects.get(guild_id=GUILD_A).name == "Day Larks Club"
    assert not ModelPrice.objects.exists()


def test_a_moderator_of_a_guild_sees_it_and_changes_nothing():
    two_guilds()
    moderator = client_of(discord_person(1300000000000000999, {GUILD_A: GuildRole.MODERATOR}))
    page = moderator.get(f"/guilds/{GUILD_A}/")
    assert page.status_code == 200 and "moderator (read-only)" in page.content.decode()
    response = moderator.post(
        f"/guilds/{GUILD_A}/", {"name": "Hijacked", "message_fetch_limit": 50}
    )
    assert response.status_code == 403
    assert GuildConfig.objects.get(guild_id=GUILD_A).name == "Day Larks Club"
    assert moderator.post(f"/guilds/{GUILD_B}/", {"name": "Hijacked"}).status_code == 404


def test_a_person_with_no_right_left_gets_the_403_page():
    two_guilds()
    nobody = client_of(discord_person(1300000000000000555, {}))
    assert nobody.get("/").status_code == 403
    assert nobody.get(f"/guilds/{GUILD_A}/").status_code == 403


def test_a_greeting_goes_only_to_a_channel_of_the_persons_guild():
    tenancy = two_guilds()
    larkin = Persona.objects.get(name="Larkin")
    url = reverse("dashboard:persona_greet", args=[GUILD_A, larkin.pk])
    response = tenancy.client.post(url, {"channel_id": "1200000000000000202", "text": "hi"})
    assert response.status_code == 302
    assert not Turn.objects.filter(reason="greeting").exists()
    messages = [str(m) for m in response.wsgi_request._messages]
    assert messages == ["Greeting: that channel is not one of this guild's."]
    assert CHANNEL_A  # the guild's own channel is the one offered


def test_routes_are_routes():
    assert Route("guilds/<int:guild_id>/", "x").path({"guild_id": GUILD_A}) == f"/guilds/{GUILD_A}/"
    assert not set(SECRETS) & {"Day Larks Club"}


@pytest.mark.django_db(transaction=True)
async def test_an_open_socket_closes_once_its_guild_is_no_longer_the_persons():
    from channels.testing import WebsocketCommunicator

    from accounts.services import guild_rights_observe
    from botproject.asgi import application

    tenancy = await sync_to_async(two_guilds)()
    await sync_to_async(
        lambda: tenancy.person.guild_rights.create(
            guild_id=GUILD_B, role=GuildRole.MODERATOR, permissions=1 << 13, source="login"
        )
    )()
    session = tenancy.client.cookies[settings.SESSION_COOKIE_NAME].value
    headers = [
        (b"origin", b"http://localhost"),
        (b"host", b"localhost"),
        (b"cookie", f"{settings.SESSION_COOKIE_NAME}={session}".encode()),
    ]
    sockets = {}
    for channel in (CHANNEL_A, CHANNEL_B):
        sockets[channel] = WebsocketCommunicator(
            application, f"/ws/channels/{channel}/", headers=headers
        )
        connected, _ = await sockets[channel].connect()
        assert connected
        assert (await sockets[channel].receive_output(timeout=5))["type"] == "websocket.send"

    await sync_to_async(guild_rights_observe)(guild_id=GUILD_B, permissions={PERSON: None})
    assert await sockets[CHANNEL_B].receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": 4404,
    }
    assert (await sockets[CHANNEL_A].receive_output(timeout=5))["type"] == "websocket.send"

    await sync_to_async(guild_rights_observe)(guild_id=GUILD_A, permissions={PERSON: 0})
    assert await sockets[CHANNEL_A].receive_output(timeout=5) == {
        "type": "websocket.close",
        "code": 4403,
    }
    await sync_to_async(connections.close_all)()  # sync_to_async's thread's, before the drop
