"""Messages both ways: the bot's REST calls are stored and echoed; user actions reach its
`on_message` / `on_raw_*` handlers."""

from __future__ import annotations

import aiohttp
import discord
import pytest

from chat.sandbox import SandboxServer, Upload
from chat.sandbox.demo import DEMO_BOT_ID, DEMO_CHANNEL_IDS, DEMO_USER_IDS
from chat.sandbox.errors import DiscordAPIError
from chat.tests.sandbox.conftest import RecordingClient

GENERAL = DEMO_CHANNEL_IDS["general"]
ALICE = DEMO_USER_IDS["alice"]
BOB = DEMO_USER_IDS["bob"]


def general(bot: RecordingClient) -> discord.TextChannel:
    channel = bot.get_channel(GENERAL)
    assert isinstance(channel, discord.TextChannel)
    return channel


async def test_channel_send_is_stored_and_echoed_with_the_bot_as_author(
    server: SandboxServer, bot: RecordingClient
) -> None:
    sent = await general(bot).send("Hello, everyone.")

    echo = await bot.next_event("message")
    assert echo.id == sent.id
    assert echo.author == bot.user or echo.author.id == DEMO_BOT_ID
    assert echo.content == "Hello, everyone."
    stored = server.sandbox.channel_messages(GENERAL)
    assert [(m["id"], m["author"]["id"]) for m in stored] == [(str(sent.id), str(DEMO_BOT_ID))]


async def test_reply_carries_its_reference_and_mentions_the_replied_author(
    server: SandboxServer, bot: RecordingClient
) -> None:
    server.sandbox.user_says(GENERAL, ALICE, "what rhymes with orange?")
    question = await bot.next_event("message")

    await question.reply("nothing, famously")

    answer = await bot.next_event("message")
    assert answer.type is discord.MessageType.reply
    assert answer.reference is not None and answer.reference.message_id == question.id
    assert isinstance(answer.reference.resolved, discord.Message)
    assert answer.reference.resolved.content == "what rhymes with orange?"
    assert [user.id for user in answer.mentions] == [ALICE]


async def test_user_reply_resolves_the_bot_message_it_answers(
    server: SandboxServer, bot: RecordingClient
) -> None:
    ours = await general(bot).send("Ask me anything.")
    await bot.next_event("message")

    server.sandbox.user_says(GENERAL, BOB, "anything", reply_to=ours.id)

    reply = await bot.next_event("message")
    assert reply.reference is not None and reply.reference.message_id == ours.id
    assert bot.user in reply.mentions


async def test_edit_delete_and_bulk_delete_reach_the_raw_handlers(
    server: SandboxServer, bot: RecordingClient
) -> None:
    first = server.sandbox.user_says(GENERAL, ALICE, "tpyo")
    second = server.sandbox.user_says(GENERAL, ALICE, "two")
    third = server.sandbox.user_says(GENERAL, BOB, "three")

    server.sandbox.user_edits(GENERAL, int(first["id"]), "typo")
    edit = await bot.next_event("raw_message_edit")
    assert (edit.message_id, edit.message.content) == (int(first["id"]), "typo")
    assert edit.message.edited_at is not None

    server.sandbox.user_deletes(GENERAL, int(first["id"]))
    deleted = await bot.next_event("raw_message_delete")
    assert (deleted.message_id, deleted.channel_id) == (int(first["id"]), GENERAL)

    await general(bot).delete_messages(
        [discord.Object(int(second["id"])), discord.Object(int(third["id"]))]
    )
    bulk = await bot.next_event("raw_bulk_message_delete")
    assert bulk.message_ids == {int(second["id"]), int(third["id"])}
    assert server.sandbox.channel_messages(GENERAL) == []


async def test_bot_edit_and_delete_go_through_rest(
    server: SandboxServer, bot: RecordingClient
) -> None:
    sent = await general(bot).send("draft")
    await sent.edit(content="final")
    edit = await bot.next_event("raw_message_edit")
    assert edit.message.content == "final"

    await sent.delete()
    deleted = await bot.next_event("raw_message_delete")
    assert deleted.message_id == sent.id
    assert ("DELETE", "/channels/{channel_id}/messages/{message_id}") in server.request_counts


async def test_reactions_reach_the_raw_handlers(
    server: SandboxServer, bot: RecordingClient
) -> None:
    message = server.sandbox.user_says(GENERAL, ALICE, "react to me")
    received = await bot.next_event("message")

    server.sandbox.user_reacts(GENERAL, int(message["id"]), BOB, "🎉")
    added = await bot.next_event("raw_reaction_add")
    assert (added.user_id, added.message_id, str(added.emoji)) == (BOB, received.id, "🎉")
    assert added.member is not None and added.member.id == BOB

    await received.add_reaction("👍")
    ours = await bot.next_event("raw_reaction_add")
    assert (ours.user_id, str(ours.emoji)) == (DEMO_BOT_ID, "👍")
    fetched = await general(bot).fetch_message(received.id)
    assert {(str(r.emoji), r.count, r.me) for r in fetched.reactions} == {
        ("🎉", 1, False),
        ("👍", 1, True),
    }

    server.sandbox.user_unreacts(GENERAL, int(message["id"]), BOB, "🎉")
    removed = await bot.next_event("raw_reaction_remove")
    assert (removed.user_id, str(removed.emoji)) == (BOB, "🎉")


async def test_cleared_reactions_reach_the_raw_handlers_and_the_message(
    server: SandboxServer, bot: RecordingClient
) -> None:
    message = server.sandbox.user_says(GENERAL, ALICE, "react to me")
    received = await bot.next_event("message")
    for user, emoji in ((ALICE, "👍"), (BOB, "🎉"), (BOB, "👍")):
        server.sandbox.user_reacts(GENERAL, received.id, user, emoji)
        await bot.next_event("raw_reaction_add")

    server.sandbox.user_clears_reactions(GENERAL, received.id, "👍")
    cleared = await bot.next_event("raw_reaction_clear_emoji")
    assert (cleared.channel_id, cleared.message_id, str(cleared.emoji)) == (
        GENERAL,
        received.id,
        "👍",
    )
    fetched = await general(bot).fetch_message(received.id)
    assert [(str(r.emoji), r.count) for r in fetched.reactions] == [("🎉", 1)]

    await bot.http.clear_reactions(GENERAL, int(message["id"]))  # the bot clears the rest
    everything = await bot.next_event("raw_reaction_clear")
    assert (everything.channel_id, everything.message_id) == (GENERAL, received.id)
    assert (await general(bot).fetch_message(received.id)).reactions == []


async def test_typing_both_ways(server: SandboxServer, bot: RecordingClient) -> None:
    server.sandbox.user_types(GENERAL, ALICE)
    typing = await bot.next_event("raw_typing")
    assert (typing.user_id, typing.channel_id) == (ALICE, GENERAL)

    await general(bot).typing()
    ours = await bot.next_event("raw_typing")
    assert ours.user_id == DEMO_BOT_ID
    assert server.request_counts[("POST", "/channels/{channel_id}/typing")] == 1


async def test_attachments_round_trip_through_the_sandbox_cdn(
    server: SandboxServer, bot: RecordingClient
) -> None:
    server.sandbox.user_says(
        GENERAL, ALICE, "", attachments=[Upload("notes.txt", b"line one\n", "text/plain")]
    )
    theirs = await bot.next_event("message")
    assert [(a.filename, a.size, a.content_type) for a in theirs.attachments] == [
        ("notes.txt", 9, "text/plain")
    ]
    assert await theirs.attachments[0].read() == b"line one\n"

    import io

    await general(bot).send(
        "here", file=discord.File(io.BytesIO(b"\x89PNG"), "pic.png", description="a pic")
    )
    ours = await bot.next_event("message")
    assert [(a.filename, a.description) for a in ours.attachments] == [("pic.png", "a pic")]
    assert await ours.attachments[0].read() == b"\x89PNG"


async def test_an_expired_attachment_url_is_refused_until_refreshed(
    server: SandboxServer, bot: RecordingClient, rest
) -> None:
    server.sandbox.attachment_url_lifetime = 0
    server.sandbox.user_says(GENERAL, ALICE, "", attachments=[Upload("a.txt", b"hi", "text/plain")])
    [attachment] = (await bot.next_event("message")).attachments
    assert "?ex=" in attachment.url and "&hm=" in attachment.url
    with pytest.raises(discord.NotFound):
        await attachment.read()

    server.sandbox.attachment_url_lifetime = 60
    status, body = await rest(
        "POST", "/attachments/refresh-urls", json={"attachment_urls": [attachment.url]}
    )
    [entry] = body["refreshed_urls"]
    assert (status, entry["original"]) == (200, attachment.url)
    assert entry["refreshed"] != attachment.url
    async with aiohttp.ClientSession() as session, session.get(entry["refreshed"]) as response:
        assert (response.status, await response.read()) == (200, b"hi")
    async with aiohttp.ClientSession() as session, session.get(attachment.url) as response:
        assert response.status == 404


async def test_a_dm_opened_by_the_bot_carries_messages_both_ways_without_a_guild(
    server: SandboxServer, bot: RecordingClient, rest
) -> None:
    alice = await bot.fetch_user(ALICE)
    dm = await alice.create_dm()  # POST /users/@me/channels
    assert server.sandbox.open_dm(ALICE) == dm.id

    server.sandbox.user_says(dm.id, ALICE, "psst, a secret")
    received = await bot.next_event("message")
    await dm.send("safe with me")
    echo = await bot.next_event("message")

    assert received.guild is None and isinstance(received.channel, discord.DMChannel)
    assert (received.channel.id, received.content) == (dm.id, "psst, a secret")
    assert (echo.guild, echo.content) == (None, "safe with me")
    status, channel = await rest("GET", f"/channels/{dm.id}")
    assert (status, channel["type"], channel["recipients"][0]["id"]) == (200, 1, str(ALICE))
    with pytest.raises(DiscordAPIError) as refused:
        server.sandbox.user_says(dm.id, BOB, "let me in")
    assert refused.value.status == 403


def test_every_text_a_message_showed_is_kept_in_order():
    from chat.sandbox.demo import demo_sandbox

    sandbox = demo_sandbox()
    channel, alice = DEMO_CHANNEL_IDS["general"], DEMO_USER_IDS["alice"]
    first = int(sandbox.user_says(channel, alice, "draft one")["id"])
    sandbox.user_edits(channel, first, "draft two")
    second = int(sandbox.user_says(channel, alice, "another")["id"])
    sandbox.user_deletes(channel, first)

    assert sandbox.shown_texts(channel) == [
        (first, "draft one"),
        (first, "draft two"),
        (second, "another"),
    ]
