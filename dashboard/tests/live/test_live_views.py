"""Every live screen for every role, on recorded data: anonymous visitors go to the login page,
users without a role get 403, moderators and admins read; the playground is for admins."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from accounts.selectors import GuildRights
from chat.models import EventQueue, Turn, UnreadEvent, WorkerHeartbeat
from chat.services.slash_commands import channel_reset
from chat.tests.privacy import user_privacy
from dashboard.selectors import TurnFilters, turns_filtered

CHANNEL = 1200000000000000001  # #general of the personas fixture's first guild
GUILD = 1100000000000000001
ALICE = 1300000000000000009
HIDDEN = 1300000000000000002


def _event(message_id: int, author_id: int, name: str, content: str) -> dict:
    return {
        "id": message_id,
        "channel_id": CHANNEL,
        "author": {"id": author_id, "display_name": name, "is_bot": False},
        "content": content,
        "created_at": "2026-11-30T10:00:00Z",
    }


@pytest.fixture
def recorded(guild):
    """A replied turn with its window, an unread message from alice and one from a user with
    full privacy, and a worker heartbeat."""
    user_privacy(HIDDEN, guild_id=GUILD, level="full")
    turn = Turn.objects.create(
        guild_id=GUILD,
        channel_id=CHANNEL,
        persona_name="Tomori",
        trigger_message_id=1400000000000000010,
        reason="trigger_word",
        reason_detail={"rule": "trigger_word", "detail": "tomori"},
        status=Turn.Status.REPLIED,
        context_items=[
            {"tag": "system_prompt", "role": "system", "text": "Be Tomori.", "tokens": 3},
            {
                "tag": "dialogue_history",
                "role": "user",
                "text": "Alice: hi tomori\nhow are you",
                "tokens": 9,
                "source_ids": ["1400000000000000009", "1400000000000000010"],
            },
        ],
        window={
            "anchor_message_id": "1400000000000000009",
            "message_ids": ["1400000000000000008", "1400000000000000009", "1400000000000000010"],
            "rest_reason": "no_previous_window",
            "refs": {"1400000000000000009": "ref_1", "1400000000000000010": "ref_2"},
            "left_out": [{"reason": "full privacy or blacklisted: never shown", "count": 1}],
        },
        request={"model": "gpt-4o-mini", "messages": [{"role": "system", "content": "Be Tomori."}]},
        attempts=[
            {
                "model": "gpt-4o-mini",
                "tool_round": 0,
                "shorten_batches": 0,
                "latency_ms": 120,
                "outcome": "ok",
                "error": "",
                "status": 200,
            }
        ],
        reply_text="I am fine.",
        delivered_message_ids=["1400000000000000011"],
        history_ms=2.0,
        build_ms=1.0,
        llm_ms=120.0,
        deliver_ms=30.0,
        prompt_tokens=12,
        completion_tokens=4,
    )
    for message_id, author, name, text in (
        (1400000000000000012, ALICE, "Alice", "anyone there?"),
        (1400000000000000013, HIDDEN, "Secret", "my private words"),
    ):
        event = _event(message_id, author, name, text)
        EventQueue.objects.create(
            channel_id=CHANNEL, message_id=message_id, guild_id=GUILD, event=event
        )
        UnreadEvent.objects.create(
            channel_id=CHANNEL, message_id=message_id, guild_id=GUILD, author_id=author, event=event
        )
    WorkerHeartbeat.objects.create(
        holder="host:1:abc",
        shard_ids=[0],
        shard_count=1,
        latencies={"0": 0.042},
        guild_ids=[str(GUILD)],
    )
    return turn


def _pages(turn: Turn) -> list[str]:
    return [
        "/",
        f"/channels/{CHANNEL}/",
        "/turns/",
        f"/turns/{turn.pk}/",
        "/why/",
        "/why/?message=1400000000000000012",
    ]


def test_anonymous_visitors_are_sent_to_the_login_page(client, recorded):
    for url in [*_pages(recorded), f"/channels/{CHANNEL}/preview/?persona=Tomori", "/playground/"]:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/"), url


def test_users_without_a_role_get_403(other_client, recorded):
    for url in [*_pages(recorded), f"/channels/{CHANNEL}/preview/?persona=Tomori", "/playground/"]:
        assert other_client.get(url).status_code == 403, url


@pytest.mark.parametrize("who", ["moderator_client", "admin_client"])
def test_moderators_and_admins_read_every_live_screen(request, who, recorded):
    client = request.getfixturevalue(who)
    for url in _pages(recorded):
        assert client.get(url).status_code == 200, url


def test_the_overview_shows_shards_latency_queues_and_turns(moderator_client, recorded):
    html = moderator_client.get("/").content.decode()
    assert 'ws-connect="/ws/overview/"' in html
    assert "shard 0 of 1" in html and "42.0 ms" in html
    assert f'id="overview-channel-{CHANNEL}"' in html
    assert "I am fine." not in html  # the overview lists turns, not replies
    assert f"#{recorded.pk}" in html


def test_a_stale_heartbeat_means_no_worker(moderator_client, recorded):
    WorkerHeartbeat.objects.update(updated_at=timezone.now() - dt.timedelta(minutes=5))
    html = moderator_client.get("/").content.decode()
    assert "no worker connected" in html


def test_the_channel_page_shows_the_window_the_pool_and_never_a_hidden_users_words(
    moderator_client, recorded
):
    html = moderator_client.get(f"/channels/{CHANNEL}/").content.decode()
    assert f'ws-connect="/ws/channels/{CHANNEL}/"' in html
    assert "<code>ref_1</code><code>ref_2</code>" in html
    assert "2 merged" in html
    assert (
        'starts at <span class="anchor" title="anchor: message id 1400000000000000009">'
        "ref_1 (Alice)</span>"
    ) in html
    assert "full privacy or blacklisted: never shown" in html
    assert "anyone there?" in html
    assert "my private words" not in html and "Secret" not in html
    assert "1 from users with full privacy" in html
    assert "I am fine." in html  # the latest turns show the reply


def test_the_turn_page_is_a_trace(moderator_client, recorded):
    html = moderator_client.get(f"/turns/{recorded.pk}/").content.decode()
    for fragment in (
        "Trigger word",
        "tomori",
        "Be Tomori.",
        "gpt-4o-mini",
        "120 ms",
        "I am fine.",
        "https://discord.com/channels/1100000000000000001/1200000000000000001/1400000000000000011",
        "model 120.0 ms",
        "prompt <strong>12</strong>",
        'id="replay"',
    ):
        assert fragment in html, fragment


def test_turn_filters_narrow_the_list(moderator_client, recorded):
    Turn.objects.create(
        guild_id=GUILD,
        channel_id=CHANNEL,
        persona_name="Anon",
        reason="mention",
        status=Turn.Status.FAILED,
        error="the model did not answer",
    )
    everyone = GuildRights(moderator_everywhere=True)
    assert turns_filtered(filters=TurnFilters(persona="anon"), rights=everyone).count() == 1
    assert turns_filtered(filters=TurnFilters(status="replied"), rights=everyone).get() == recorded
    assert turns_filtered(filters=TurnFilters(reason="mention"), rights=everyone).count() == 1
    assert (
        turns_filtered(filters=TurnFilters(since=dt.date(2000, 1, 1)), rights=everyone).count() == 2
    )
    assert (
        turns_filtered(filters=TurnFilters(until=dt.date(2000, 1, 1)), rights=everyone).count() == 0
    )
    assert turns_filtered(filters=TurnFilters(), rights=GuildRights()).count() == 0
    html = moderator_client.get("/turns/?status=failed").content.decode()
    assert "the model did not answer" in html and "I am fine." not in html
    html = moderator_client.get(f"/turns/?channel={CHANNEL}&persona=Tomori").content.decode()
    assert "I am fine." in html and "the model did not answer" not in html


def test_the_turn_list_is_paginated(moderator_client, guild):
    Turn.objects.bulk_create(
        Turn(guild_id=GUILD, channel_id=CHANNEL, persona_name="Tomori", reason="mention")
        for _ in range(30)
    )
    first = moderator_client.get("/turns/").content.decode()
    assert "page 1 of 2" in first and "older →" in first
    second = moderator_client.get("/turns/?page=2").content.decode()
    assert "page 2 of 2" in second and first.count("turn-row") == 25
    assert second.count("turn-row") == 5


def test_why_not_answers_for_each_persona(moderator_client, recorded):
    html = moderator_client.get("/why/?message=1400000000000000012").content.decode()
    assert "Still queued" in html
    html = moderator_client.get("/why/?message=1400000000000000010").content.decode()
    assert "Replied (trigger_word (tomori))" in html
    html = moderator_client.get("/why/?message=999").content.decode()
    assert "Nothing is recorded for this message" in html
    assert moderator_client.get("/why/?message=abc").status_code == 400


def test_the_playground_is_for_admins_and_needs_the_sandbox(
    moderator_client, admin_client, settings, recorded
):
    settings.DISCORD_API_BASE = "http://127.0.0.1:9/api/v10"  # nothing listens there
    assert moderator_client.get("/playground/").status_code == 403
    response = admin_client.get("/playground/")
    assert response.status_code == 200
    assert b"sandbox" in response.content and b"not running" in response.content
    assert admin_client.post("/playground/", {"content": "hi"}).status_code == 404


def test_the_preview_without_discord_says_why(moderator_client, settings, recorded):
    settings.DISCORD_TOKEN = ""
    response = moderator_client.get(f"/channels/{CHANNEL}/preview/?persona=Tomori")
    assert response.status_code == 200
    assert b"DISCORD_TOKEN is not set" in response.content
    response = moderator_client.get(f"/channels/{CHANNEL}/preview/?persona=Tomori&format=json")
    assert response.status_code == 400
    assert response.json() == {"error": "DISCORD_TOKEN is not set: there is no Discord to read"}


def test_the_channel_page_shows_the_reset_marker(admin_client, recorded):
    url = f"/channels/{CHANNEL}/"
    assert 'id="reset-marker"' not in admin_client.get(url).content.decode()
    channel_reset(
        guild_id=GUILD,
        channel_id=CHANNEL,
        user_id=ALICE,
        marker_id=1400000000000000099,
        permissions=1 << 13,
    )

    page = admin_client.get(url).content.decode()

    assert 'id="reset-marker"' in page
    marker = page.split('id="reset-marker"', 1)[1].split("</p>", 1)[0]
    assert f'data-id="{ALICE}"' in marker and "<code>1400000000000000099</code>" in marker


FLAGGED = "Then it turns ugly: flag:violence everywhere."


@pytest.fixture
def withheld(recorded):
    """A streamed reply moderation stopped at its second message: the first was shown."""
    return Turn.objects.create(
        guild_id=GUILD,
        channel_id=CHANNEL,
        persona_name="Tomori",
        trigger_message_id=1400000000000000012,
        reason="trigger_word",
        status=Turn.Status.WITHHELD,
        reply_text="It starts calmly.",
        delivered_message_ids=["1400000000000000014"],
        error="moderation flagged message 2 of the reply as violence, which this channel does "
        "not allow (not NSFW; allowed here: none); 1 of its messages had been sent",
        moderation={
            "model": "omni-moderation-latest",
            "nsfw_channel": False,
            "allowed": [],
            "checks": [
                {
                    "kind": "paragraph",
                    "message": 0,
                    "text": "It starts calmly.",
                    "categories": [],
                    "scores": {"violence": 0.0004, "sexual": 0.0001},
                    "verdict": "pass",
                    "blocking": [],
                    "latency_ms": 51.2,
                    "error": "",
                },
                {
                    "kind": "paragraph",
                    "message": 1,
                    "text": FLAGGED,
                    "categories": ["violence"],
                    "scores": {"violence": 0.93, "sexual": 0.0004},
                    "verdict": "withhold",
                    "blocking": ["violence"],
                    "latency_ms": 49.8,
                    "error": "",
                },
            ],
            "withheld": {"message": 1, "text": "It starts calmly.\n\n" + FLAGGED},
        },
    )


def test_the_turn_page_lists_the_checks_and_keeps_the_withheld_text_behind_a_click(
    moderator_client, withheld
):
    html = moderator_client.get(f"/turns/{withheld.pk}/").content.decode()
    assert 'id="moderation"' in html
    assert "omni-moderation-latest" in html and "not NSFW" in html
    assert html.count('class="moderation-check') == 2
    assert "violence 0.930" in html and "49.8 ms" in html
    assert "flag:violence" not in html  # only on request
    assert f'hx-get="/turns/{withheld.pk}/withheld/"' in html

    partial = moderator_client.get(f"/turns/{withheld.pk}/withheld/", HTTP_HX_REQUEST="true")
    assert partial.status_code == 200
    text = partial.content.decode()
    assert FLAGGED in text and "The reply as the model wrote it" in text
    assert "<html" not in text
    page = moderator_client.get(f"/turns/{withheld.pk}/withheld/").content.decode()
    assert FLAGGED in page and "<html" in page and "never reached Discord" in page


def test_a_turn_that_withheld_nothing_has_no_withheld_text(moderator_client, recorded):
    html = moderator_client.get(f"/turns/{recorded.pk}/").content.decode()
    assert 'id="moderation"' not in html
    page = moderator_client.get(f"/turns/{recorded.pk}/withheld/")
    assert page.status_code == 200 and b"Moderation withheld nothing on this turn." in page.content


def test_the_withheld_text_is_for_moderators_and_admins_only(
    client, other_client, admin_client, withheld
):
    url = f"/turns/{withheld.pk}/withheld/"
    assert client.get(url)["Location"].startswith("/accounts/login/")
    assert other_client.get(url).status_code == 403
    assert admin_client.get(url).status_code == 200


def test_the_turn_list_lists_withheld_turns_without_their_withheld_text(moderator_client, withheld):
    assert (
        turns_filtered(
            filters=TurnFilters(status="withheld"), rights=GuildRights(operator=True)
        ).get()
        == withheld
    )
    html = moderator_client.get("/turns/?status=withheld").content.decode()
    assert html.count('class="turn-row') == 1
    assert "It starts calmly." in html and "I am fine." not in html
    assert "flag:violence" not in html
    assert '<option value="withheld" selected>' in html


def test_why_explains_a_withheld_reply(moderator_client, withheld):
    html = moderator_client.get("/why/?message=1400000000000000012").content.decode()
    assert "The reply was withheld before Discord showed it" in html
    assert "message 2 of the reply as violence" in html
    assert "flag:violence" not in html
