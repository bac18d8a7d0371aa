"""Names, not numbers: the dashboard shows guilds, channels, threads and users by the names the
gateway gave (the raw id in a tooltip), a user with full privacy as such, and each turn's
trigger as an excerpt with links."""

from __future__ import annotations

import re

import pytest
from django.template import Context, Template

from chat.models import DiscordName, EventQueue, Turn, WorkerHeartbeat
from personas.models import Block

GUILD = 1100000000000000001
GENERAL = 1200000000000000001
THREAD = 1200000000000000009
ALICE = 1300000000000000009
BLOCKED = 1300000000000000001
HIDDEN = 1300000000000000003  # full privacy in the personas fixture


@pytest.fixture
def named(guild):
    rows = [
        ("guild", GUILD, "Hoshimi Lounge (Discord)", None, None),
        ("channel", GENERAL, "general", GUILD, None),
        ("thread", THREAD, "set list", GUILD, GENERAL),
        ("user", ALICE, "Alice", GUILD, None),
        ("user", BLOCKED, "Rikki", GUILD, None),
        ("user", HIDDEN, "Secret Name", GUILD, None),  # stored before they chose full privacy
    ]
    for kind, discord_id, name, guild_id, parent_id in rows:
        DiscordName.objects.create(
            kind=kind, discord_id=discord_id, name=name, guild_id=guild_id, parent_id=parent_id
        )
    return Turn.objects.create(
        guild_id=GUILD,
        channel_id=GENERAL,
        persona_name="Tomori",
        trigger_message_id=1400000000000000010,
        trigger_author_id=ALICE,
        reason="trigger_word",
        reason_detail={"rule": "trigger_word", "detail": "tomori"},
        status=Turn.Status.REPLIED,
        context_items=[
            {"tag": "system_prompt", "role": "system", "text": "Be Tomori.", "tokens": 3},
            {
                "tag": "dialogue_history",
                "role": "user",
                "text": 'Alice: [ref_1] hi\n[ref_2, replying to ref_1 Alice: "hi"] tomori, how '
                "are you doing on this fine morning after the long rehearsal last night?",
                "tokens": 30,
                "source_ids": ["1400000000000000009", "1400000000000000010"],
            },
        ],
        window={"refs": {"1400000000000000009": "ref_1", "1400000000000000010": "ref_2"}},
        reply_text="I am fine.",
    )


def _named(html: str, text: str, discord_id: int) -> bool:
    """``text`` is shown as a name whose tooltip holds the raw id."""
    pattern = (
        rf'<span class="name[^"]*" title="[a-z]+ id {discord_id}[^"]*"[^>]*>{re.escape(text)}<'
    )
    return re.search(pattern, html) is not None


def test_the_overview_names_channels_and_says_which_shard_the_worker_holds(moderator_client, named):
    WorkerHeartbeat.objects.create(
        holder="host:1:abc", shard_ids=[2, 3], shard_count=4, guild_ids=[str(GUILD)]
    )
    html = moderator_client.get("/").content.decode()
    assert _named(html, "#general", GENERAL)
    assert f"shard {(GUILD >> 22) % 4} of 4" in html
    assert "worker host:1:abc holds shards 2, 3 of 4" in html


def test_the_channel_page_and_the_turn_page_name_everything(moderator_client, named):
    html = moderator_client.get(f"/channels/{GENERAL}/").content.decode()
    assert _named(html, "#general", GENERAL)
    assert _named(html, "Hoshimi Lounge (Discord)", GUILD)
    assert _named(html, "Alice", ALICE)
    excerpt = "“tomori, how are you doing on this fine morning after the long rehearsal last…”"
    assert excerpt in html
    assert f"/why/?message={named.trigger_message_id}" in html

    html = moderator_client.get(f"/turns/{named.pk}/").content.decode()
    assert _named(html, "Alice", ALICE) and _named(html, "#general", GENERAL)
    link = f"https://discord.com/channels/{GUILD}/{GENERAL}/{named.trigger_message_id}"
    assert f'href="{link}"' in html and excerpt in html
    html = moderator_client.get("/turns/").content.decode()
    assert _named(html, "#general", GENERAL) and excerpt in html


def test_a_thread_is_named_with_its_channel(moderator_client, named):
    html = moderator_client.get(f"/channels/{THREAD}/").content.decode()
    assert _named(html, "#general › set list", THREAD)


def test_a_user_with_full_privacy_is_never_shown_by_name(moderator_client, admin_client, named):
    html = admin_client.get(f"/guilds/{GUILD}/users/").content.decode()
    assert "Secret Name" not in html
    assert _named(html, "a user with full privacy", HIDDEN)
    html = admin_client.get(f"/guilds/{GUILD}/blocks/").content.decode()
    assert _named(html, "Rikki", BLOCKED)


def test_an_id_nobody_named_yet_is_shown_as_the_id(moderator_client, named):
    html = moderator_client.get("/channels/1200000000000000002/").content.decode()
    assert '<span class="name channel unnamed" title="channel id 1200000000000000002 (no' in html


def test_the_why_pickers_messages_read_as_who_said_what(moderator_client, named):
    EventQueue.objects.create(
        channel_id=GENERAL,
        message_id=named.trigger_message_id,
        guild_id=GUILD,
        event={},  # consumed: only the key is kept
        status=EventQueue.Status.CONSUMED,
    )
    html = moderator_client.get("/why/").content.decode()
    recent = html.split("Recent messages", 1)[1]
    assert _named(recent, "Alice", ALICE) and _named(recent, "#general", GENERAL)
    assert "“tomori, how are you doing on this fine morning after the long rehearsal last…”" in (
        recent
    )
    assert f'title="message id {named.trigger_message_id}"' in recent


def test_a_user_without_a_kept_name_falls_back_to_the_name_on_their_message(named):
    page = Template('{% load names %}{% user_name 42 "Zed" %}|{% user_name hidden "Leak" %}')
    html = page.render(Context({"hidden": HIDDEN}))
    unknown, hidden = html.split("|")
    assert 'title="user id 42"' in unknown and ">Zed<" in unknown
    assert ">a user with full privacy<" in hidden and "Leak" not in hidden


def _offered(html: str) -> list[str]:
    """The members a page's user field offers (its datalist's options)."""
    return re.findall(r'<option value="([^"]*\(\d+\))">', html)


def test_user_fields_offer_members_by_name_and_never_a_user_with_full_privacy(
    admin_client, settings, named
):
    settings.DISCORD_TOKEN = ""  # the preview page still offers whom to speak as
    blocks = admin_client.get(f"/guilds/{GUILD}/blocks/").content.decode()
    preview = admin_client.get(f"/channels/{GENERAL}/preview/?persona=Tomori").content.decode()

    for html in (blocks, preview):
        assert _offered(html) == [f"Alice ({ALICE})", f"Rikki ({BLOCKED})"]
        assert "Secret Name" not in html


@pytest.mark.parametrize(
    ("typed", "user_id"),
    [
        (f"Alice ({ALICE})", ALICE),  # picked from the list
        ("rikki", BLOCKED),  # a member's name, typed in any case
        ("1300000000000000077", 1300000000000000077),  # an id nobody named
    ],
)
def test_a_block_takes_a_member_picked_by_name_or_an_id(admin_client, named, typed, user_id):
    response = admin_client.post(
        f"/guilds/{GUILD}/blocks/", {"persona": "", "user_id": typed, "type": "mute"}
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    assert Block.objects.filter(user_id=user_id, type="mute").exists()


@pytest.mark.parametrize(
    ("typed", "problem"),
    [
        ("Secret Name", "No member named “Secret Name” is known here"),  # full privacy
        ("Nobody", "No member named “Nobody” is known here"),
        ("99999999999999999999", "99999999999999999999 is too large to be a Discord user id"),
    ],
)
def test_a_user_field_refuses_what_names_no_member(admin_client, named, typed, problem):
    before = Block.objects.count()
    response = admin_client.post(
        f"/guilds/{GUILD}/blocks/", {"persona": "", "user_id": typed, "type": "mute"}
    )
    preview = admin_client.get(
        f"/channels/{GENERAL}/preview/", {"persona": "Tomori", "as": typed, "text": "hi"}
    )

    assert response.status_code == 400 and problem in response.content.decode()
    assert Block.objects.count() == before
    assert problem in preview.content.decode()


def test_picking_a_name_two_members_share_asks_for_one_of_them(admin_client, named):
    DiscordName.objects.create(kind="user", discord_id=42, name="alice", guild_id=GUILD)
    response = admin_client.post(
        f"/guilds/{GUILD}/blocks/", {"persona": "", "user_id": "Alice", "type": "mute"}
    )

    assert "Several members are named “Alice”: pick one from the list" in (
        response.content.decode()
    )
    assert _offered(admin_client.get(f"/guilds/{GUILD}/blocks/").content.decode()) == [
        "alice (42)",
        f"Alice ({ALICE})",
        f"Rikki ({BLOCKED})",
    ]
