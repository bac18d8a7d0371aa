"""The overview reads a fixed number of queries whatever the number of guilds, and a kept
trigger excerpt never outlives its author's choice of full privacy."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import GuildRole
from accounts.tests.people import client_of, discord_person
from chat.models import Turn
from chat.services.slash_commands import privacy_set
from dashboard.selectors import with_excerpts
from personas.models import GuildConfig

pytestmark = pytest.mark.django_db

AUTHOR = 1300000000000000055


def _guilds(count: int, start: int = 0) -> list[int]:
    ids = []
    for n in range(start, start + count):
        guild = GuildConfig.objects.create(guild_id=1100000000000001000 + n, name=f"G{n}")
        guild.channels.create(channel_id=1200000000000001000 + n)
        guild.personas.create(name="Tomori", is_main=True)
        for k in range(3):
            Turn.objects.create(
                guild_id=guild.guild_id,
                channel_id=1200000000000001000 + n,
                persona_name="Tomori",
                reason="mention",
                status=Turn.Status.FAILED if k == 0 else Turn.Status.REPLIED,
                trigger_author_id=AUTHOR,
            )
        ids.append(guild.guild_id)
    return ids


def _queries(client) -> int:
    client.get("/")  # the excerpts are kept from here on
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/").status_code == 200
    return len(queries)


def test_the_overview_reads_as_many_queries_for_ten_guilds_as_for_two():
    few = discord_person(1, dict.fromkeys(_guilds(2), GuildRole.ADMIN))
    many = discord_person(2, dict.fromkeys(_guilds(10, start=2), GuildRole.ADMIN))
    assert _queries(client_of(few)) == _queries(client_of(many))


def _said(turn: Turn, words: str) -> None:
    """Give ``turn`` a trigger message whose line in its prompt says ``words``."""
    turn.trigger_message_id = 1400000000000000001
    turn.context_items = [
        {
            "tag": "dialogue_history",
            "text": f"Ann: [ref_1] {words}",
            "source_ids": ["1400000000000000001"],
        }
    ]
    turn.window = {"refs": {"1400000000000000001": "ref_1"}}
    turn.save()


def test_a_kept_excerpt_is_gone_once_its_author_chooses_full_privacy():
    [guild_id] = _guilds(1)
    turn = Turn.objects.filter(guild_id=guild_id).first()
    _said(turn, "my secret plan")
    [shown] = with_excerpts(turns=[Turn.objects.get(pk=turn.pk)])
    assert shown.excerpt == "my secret plan"
    privacy_set(guild_id=guild_id, user_id=AUTHOR, level="full")
    [hidden] = with_excerpts(turns=[Turn.objects.get(pk=turn.pk)])
    assert hidden.excerpt == ""


def _rename(persona, name: str) -> None:
    persona.name = name
    persona.save()


def _cards(client) -> str:
    html = client.get("/").content.decode()
    return html.split('<div id="overview"', 1)[1].split("</main>", 1)[0]


def test_a_kept_card_is_what_a_fresh_render_gives_after_any_change():
    from chat.models import DiscordName, UnreadEvent
    from dashboard.templatetags.turns import kept_forget
    from personas.models import Persona

    [first, second] = _guilds(2)
    client = client_of(discord_person(3, dict.fromkeys([first, second], GuildRole.ADMIN)))
    channel = 1200000000000001000
    turn = Turn.objects.filter(guild_id=first).order_by("-created_at").first()
    _said(turn, "see you at the lamp")
    changes = [
        lambda: Turn.objects.create(
            guild_id=first, channel_id=channel, persona_name="Tomori", reason="mention"
        ),
        lambda: Turn.objects.filter(pk=turn.pk).update(status=Turn.Status.ABORTED),
        lambda: UnreadEvent.objects.create(
            channel_id=channel, message_id=1, guild_id=first, author_id=AUTHOR, event={}
        ),
        lambda: DiscordName.objects.create(kind="channel", discord_id=channel, name="lobby"),
        lambda: DiscordName.objects.create(kind="user", discord_id=AUTHOR, name="Ann"),
        lambda: _rename(Persona.objects.get(guild__guild_id=first), "Tomo"),
        lambda: privacy_set(guild_id=first, user_id=AUTHOR, level="full"),
    ]
    before = _cards(client)
    for change in changes:
        change()
        kept = _cards(client)
        kept_forget()
        fresh = _cards(client)
        assert kept == fresh and kept != before
        before = kept
