"""The dashboard's going-live parts: the last deployment check on the overview (failing lines
linked to their guild or channel, "Check now" for admins), the turns Discord refused, a guild
page of a guild the bot is not in, adding a guild the bot is in by name, and the workers'
Connected column."""

from __future__ import annotations

import re

from django.urls import reverse
from django.utils import timezone

from chat.heartbeats import worker_heartbeat_record
from chat.models import DiscordName, DoctorReport, Turn
from chat.pipeline.going_live import ChannelDuties, Check, invite_permissions, invite_url
from chat.services.doctor import Examination, doctor_report_finish
from personas.models import GuildConfig

GUILD = 1100000000000000001
GENERAL = 1100000000000000101
APP = 1100000000000000900


def text(response) -> str:
    return re.sub(r"\s+", " ", response.content.decode())


def finished_report(*checks: Check, invite: str = "") -> DoctorReport:
    report = DoctorReport.objects.create(origin=DoctorReport.Origin.SCHEDULE)
    return doctor_report_finish(
        report=report,
        examination=Examination(
            checks=checks, application_id=APP, invite_url=invite, bot_guilds={GUILD: "Café"}
        ),
        now=timezone.now(),
    )


def test_the_overview_says_no_check_has_run_yet(guild, admin_client):
    page = text(admin_client.get("/"))

    assert "Going live" in page and "No check has run yet" in page


def test_the_overview_links_each_failing_line_to_its_guild_or_channel(guild, moderator_client):
    finished_report(
        Check("token", True, "Discord accepts it: the bot is Tomori"),
        Check(f"guild {guild.name}", False, "the bot is not in it", guild_id=guild.guild_id),
        Check("#general (Café)", False, "missing Send Messages", GUILD, GENERAL),
        Check("redis", False, "no answer to PING: check REDIS_URL"),
        invite=invite_url(application_id=APP, permissions=2048),
    )

    page = text(moderator_client.get("/"))

    assert '<a href="/guilds/1100000000000000001/">guild' in page
    assert f'<a href="/channels/{GENERAL}/">#general (Café)</a>: missing Send Messages' in page
    assert "FAIL</span> redis: no answer to PING" in page
    assert "3 failed</span>, 1 passed" in page
    assert f"client_id={APP}&amp;scope=bot%20applications.commands&amp;permissions=2048" in page
    assert "Check now" not in page  # moderators read only


def test_an_admin_asks_for_a_check_and_the_card_polls_until_it_is_done(
    guild, admin_client, moderator_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as queued:
        response = admin_client.post(reverse("dashboard:deployment_check"))

    assert response.status_code == 302 and len(queued) == 1
    report = DoctorReport.objects.get()
    assert (report.ok, report.origin, report.requested_by) == (None, "dashboard", "ada")
    card = text(admin_client.get(reverse("dashboard:deployment")))
    assert 'hx-trigger="every 2s"' in card and "is running" in card and "by ada" in card
    assert moderator_client.post(reverse("dashboard:deployment_check")).status_code == 403

    doctor_report_finish(
        report=report,
        examination=Examination(checks=(Check("redis", True, "answers PING"),)),
        now=timezone.now(),
    )

    card = text(admin_client.get(reverse("dashboard:deployment")))
    assert "every 2s" not in card and "every check passed" in card


def test_an_htmx_check_now_answers_the_card(
    guild, admin_client, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks():
        response = admin_client.post(reverse("dashboard:deployment_check"), HTTP_HX_REQUEST="true")

    assert response.status_code == 200
    assert 'id="deployment"' in text(response) and "is running" in text(response)


def test_the_overview_lists_the_turns_discord_refused(guild, admin_client):
    turn = Turn.objects.create(
        guild_id=GUILD,
        channel_id=GENERAL,
        persona_name="Tomori",
        reason="mention",
        status=Turn.Status.FAILED,
        discord_refusal={
            "code": 50013,
            "reason": "Missing Permissions",
            "permission": "Send Messages",
            "channel_id": str(GENERAL),
            "channel_name": "general",
        },
    )

    page = text(admin_client.get("/"))
    turn_page = text(admin_client.get(f"/turns/{turn.pk}/"))

    assert f'<a href="/turns/{turn.pk}/">Send Messages in #general</a>' in page
    assert "1 turn (50013)" in page
    assert "Discord refused this turn" in turn_page
    assert "Missing Permissions (50013)</strong>: the bot lacks <strong>Send Messages" in turn_page


def test_a_guild_page_says_when_the_bot_is_not_in_it_with_the_invite_link(guild, admin_client):
    worker_heartbeat_record(
        holder="w1", shard_ids=[0], shard_count=1, latencies={}, guild_ids=[1100000000000000002]
    )
    finished_report(Check("token", True, "ok"))

    page = text(admin_client.get(reverse("dashboard:guild", args=[guild.guild_id])))

    alters = tuple(sorted(p.name for p in guild.personas.all() if not p.is_main and p.enabled))
    permissions = invite_permissions([ChannelDuties(alter_personas=alters)])
    assert "The bot is not in this server" in page
    link = invite_url(application_id=APP, permissions=permissions).replace("&", "&amp;")
    assert f'<a class="invite" href="{link}">' in page


def test_a_guild_page_says_nothing_when_the_bot_is_in_it(guild, admin_client):
    worker_heartbeat_record(
        holder="w1", shard_ids=[0], shard_count=1, latencies={}, guild_ids=[guild.guild_id]
    )

    page = text(admin_client.get(reverse("dashboard:guild", args=[guild.guild_id])))

    assert "The bot is not in this server" not in page


def test_adding_a_guild_offers_the_guilds_the_bot_is_in_by_name(guild, admin_client):
    other = 1400000000000000001
    worker_heartbeat_record(
        holder="w1", shard_ids=[0], shard_count=1, latencies={}, guild_ids=[guild.guild_id, other]
    )
    DiscordName.objects.create(kind=DiscordName.Kind.GUILD, discord_id=other, name="Tea Room")

    page = text(admin_client.get(reverse("dashboard:guild_new")))
    [form] = re.findall(r'<form method="post" class="inline">.*?</form>', page)
    fields = dict(re.findall(r'name="(\w+)" value="([^"]*)"', form))
    fields.pop("csrfmiddlewaretoken")
    added = admin_client.post(reverse("dashboard:guild_new"), fields)

    assert "Add Tea Room" in form and guild.name not in form
    assert added.status_code == 302
    assert GuildConfig.objects.get(guild_id=other).name == "Tea Room"


def test_the_connected_column_names_the_shards(db, admin_client):
    worker_heartbeat_record(holder="w1", shard_ids=[0], shard_count=1, latencies={}, guild_ids=[])
    worker_heartbeat_record(
        holder="w2", shard_ids=[2, 3], shard_count=4, latencies={}, guild_ids=[]
    )

    page = text(admin_client.get("/"))

    assert "<td>shard 0 of 1<br>" in page
    assert "<td>shards 2, 3 of 4<br>" in page
