"""Webhooks: created by the bot, executed without auth under another name and avatar."""

from __future__ import annotations

import discord
import pytest

from chat.sandbox import SandboxServer, avatar_hash
from chat.sandbox.demo import DEMO_CHANNEL_IDS
from chat.tests.sandbox.conftest import RecordingClient, RestCaller

GENERAL = DEMO_CHANNEL_IDS["general"]
AVATAR = "https://example.org/mika.png"


def general(bot: RecordingClient) -> discord.TextChannel:
    channel = bot.get_channel(GENERAL)
    assert isinstance(channel, discord.TextChannel)
    return channel


async def test_webhook_send_returns_the_message_and_the_echo_shows_the_persona(
    server: SandboxServer, bot: RecordingClient
) -> None:
    webhook = await general(bot).create_webhook(name="Personas")

    sent = await webhook.send("Hi, I'm Mika.", username="Mika", avatar_url=AVATAR, wait=True)

    assert sent.webhook_id == webhook.id
    assert (sent.author.name, sent.content) == ("Mika", "Hi, I'm Mika.")
    echo = await bot.next_event("message")
    assert echo.id == sent.id
    assert echo.webhook_id == webhook.id
    assert echo.author.name == "Mika"
    assert echo.author.bot
    assert echo.author.display_avatar.key == avatar_hash(AVATAR)
    stored = server.sandbox.channel_messages(GENERAL)[-1]
    assert stored["webhook_id"] == str(webhook.id)
    assert stored["author"]["username"] == "Mika"


async def test_webhook_without_override_uses_its_own_name_and_without_wait_answers_204(
    rest: RestCaller, bot: RecordingClient
) -> None:
    webhook = await general(bot).create_webhook(name="Narrator")

    status, body = await rest(
        "POST", f"/webhooks/{webhook.id}/{webhook.token}", json={"content": "Once upon"}, auth=False
    )

    assert (status, body) == (204, None)
    echo = await bot.next_event("message")
    assert (echo.author.name, echo.content) == ("Narrator", "Once upon")


async def test_webhooks_are_listed_per_channel_and_deleted(bot: RecordingClient) -> None:
    first = await general(bot).create_webhook(name="One")
    second = await general(bot).create_webhook(name="Two")

    assert {w.id for w in await general(bot).webhooks()} == {first.id, second.id}
    await first.delete()
    assert [w.name for w in await general(bot).webhooks()] == ["Two"]


@pytest.mark.parametrize(
    ("name", "code", "message"),
    [
        ("", "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 80 in length."),
        ("x" * 81, "BASE_TYPE_BAD_LENGTH", "Must be between 1 and 80 in length."),
        ("My Discord Friend", "USERNAME_INVALID_CONTAINS", 'Username cannot contain "discord"'),
        ("CLYDE", "USERNAME_INVALID_CONTAINS", 'Username cannot contain "clyde"'),
        ("everyone", "USERNAME_INVALID", 'Username cannot be "everyone"'),
    ],
)
async def test_webhook_names_follow_discords_rules(
    rest: RestCaller, name: str, code: str, message: str
) -> None:
    status, body = await rest("POST", f"/channels/{GENERAL}/webhooks", json={"name": name})

    assert (status, body["code"], body["message"]) == (400, 50035, "Invalid Form Body")
    assert body["errors"] == {"name": {"_errors": [{"code": code, "message": message}]}}


async def test_webhook_username_override_follows_the_same_rules(bot: RecordingClient) -> None:
    webhook = await general(bot).create_webhook(name="Personas")
    with pytest.raises(discord.HTTPException) as raised:
        await webhook.send("hi", username="Discord Support", wait=True)
    assert (raised.value.status, raised.value.code) == (400, 50035)


async def test_unknown_webhook_is_404_10015_and_a_wrong_token_401_50027(
    rest: RestCaller, bot: RecordingClient
) -> None:
    webhook = await general(bot).create_webhook(name="Personas")

    unknown = await rest(
        "POST", f"/webhooks/{webhook.id + 1}/{webhook.token}", json={"content": "x"}
    )
    wrong = await rest("POST", f"/webhooks/{webhook.id}/not-the-token", json={"content": "x"})

    assert (unknown[0], unknown[1]["code"]) == (404, 10015)
    assert (wrong[0], wrong[1]["code"]) == (401, 50027)


async def test_webhook_messages_are_edited_and_deleted_through_the_webhook(
    bot: RecordingClient,
) -> None:
    webhook = await general(bot).create_webhook(name="Personas")
    sent = await webhook.send("draft", username="Mika", wait=True)
    await bot.next_event("message")

    edited = await sent.edit(content="final")
    assert edited.content == "final"
    assert (await bot.next_event("raw_message_edit")).message.content == "final"

    await sent.delete()
    assert (await bot.next_event("raw_message_delete")).message_id == sent.id


async def test_a_channel_holds_at_most_15_webhooks(rest: RestCaller) -> None:
    for index in range(15):
        status, _ = await rest("POST", f"/channels/{GENERAL}/webhooks", json={"name": f"w{index}"})
        assert status == 200
    status, body = await rest("POST", f"/channels/{GENERAL}/webhooks", json={"name": "w15"})
    assert (status, body["code"]) == (400, 30007)
