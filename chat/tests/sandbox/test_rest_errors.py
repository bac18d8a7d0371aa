"""REST failures answer Discord's status codes and error bodies."""

from __future__ import annotations

from typing import Any

import pytest

from chat.sandbox import SandboxServer
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_GUILD_ID, DEMO_USER_IDS
from chat.tests.sandbox.conftest import RestCaller

GENERAL = DEMO_CHANNEL_IDS["general"]
ALICE = DEMO_USER_IDS["alice"]


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "code"),
    [
        ("GET", "/no/such/route", {}, 404, 0),
        ("PUT", "/users/@me", {}, 405, 0),
        ("GET", "/channels/1", {}, 404, 10003),
        ("GET", f"/channels/{GENERAL}/messages/1", {}, 404, 10008),
        ("GET", f"/guilds/{DEMO_GUILD_ID}/members/1", {}, 404, 10007),
        ("GET", "/guilds/1", {}, 404, 10004),
        ("GET", "/users/1", {}, 404, 10013),
        ("GET", "/webhooks/1", {}, 404, 10015),
        ("GET", "/channels/general", {}, 400, 50035),
        (
            "POST",
            f"/channels/{GENERAL}/messages",
            {"data": b"{oops", "headers": {"Content-Type": "application/json"}},
            400,
            50109,
        ),
        ("POST", f"/channels/{GENERAL}/messages", {"json": {}}, 400, 50006),
        ("POST", f"/channels/{GENERAL}/messages", {"json": ["a list"]}, 400, 50035),
        ("POST", f"/channels/{GENERAL}/messages", {"json": {"content": 5}}, 400, 50035),
        ("POST", f"/channels/{GENERAL}/messages", {"json": {"embeds": [{}] * 11}}, 400, 50035),
        (
            "POST",
            f"/channels/{GENERAL}/messages/bulk-delete",
            {"json": {"messages": ["1"]}},
            400,
            50035,
        ),
        ("PUT", f"/channels/{GENERAL}/messages/1/reactions/%F0%9F%91%8D/@me", {}, 404, 10008),
    ],
)
async def test_failures_answer_discords_codes(
    rest: RestCaller, method: str, path: str, kwargs: dict[str, Any], status: int, code: int
) -> None:
    answer_status, body = await rest(method, path, **kwargs)
    assert (answer_status, body["code"]) == (status, code)
    assert isinstance(body["message"], str) and body["message"]


async def test_requests_without_the_bot_token_are_unauthorized(rest: RestCaller) -> None:
    assert await rest("GET", "/users/@me", auth=False) == (
        401,
        {"message": "401: Unauthorized", "code": 0},
    )


async def test_content_over_2000_characters_is_an_invalid_form(rest: RestCaller) -> None:
    status, body = await rest("POST", f"/channels/{GENERAL}/messages", json={"content": "x" * 2001})

    assert status == 400
    assert body == {
        "message": "Invalid Form Body",
        "code": 50035,
        "errors": {
            "content": {
                "_errors": [
                    {"code": "BASE_TYPE_MAX_LENGTH", "message": "Must be 2000 or fewer in length."}
                ]
            }
        },
    }
    ok, _ = await rest("POST", f"/channels/{GENERAL}/messages", json={"content": "x" * 2000})
    assert ok == 200


async def test_a_reply_to_an_unknown_message_fails_unless_told_not_to(rest: RestCaller) -> None:
    reference = {"message_id": "1", "channel_id": str(GENERAL)}

    failed = await rest(
        "POST",
        f"/channels/{GENERAL}/messages",
        json={"content": "re", "message_reference": reference},
    )
    posted = await rest(
        "POST",
        f"/channels/{GENERAL}/messages",
        json={"content": "re", "message_reference": {**reference, "fail_if_not_exists": False}},
    )

    assert (failed[0], failed[1]["errors"]["message_reference"]["_errors"][0]["code"]) == (
        400,
        "MESSAGE_REFERENCE_UNKNOWN_MESSAGE",
    )
    assert posted[0] == 200 and "message_reference" not in posted[1]


async def test_the_bot_cannot_edit_someone_elses_message(
    server: SandboxServer, rest: RestCaller
) -> None:
    message = server.sandbox.user_says(GENERAL, ALICE, "mine")
    status, body = await rest(
        "PATCH", f"/channels/{GENERAL}/messages/{message['id']}", json={"content": "ours"}
    )
    assert (status, body["code"]) == (403, 50005)


async def test_allowed_mentions_decide_who_is_mentioned(rest: RestCaller) -> None:
    content = f"<@{ALICE}> <@{DEMO_USER_IDS['bob']}> @everyone"
    _, parsed = await rest("POST", f"/channels/{GENERAL}/messages", json={"content": content})
    _, limited = await rest(
        "POST",
        f"/channels/{GENERAL}/messages",
        json={"content": content, "allowed_mentions": {"parse": [], "users": [str(ALICE)]}},
    )

    assert [u["id"] for u in parsed["mentions"]] == [str(ALICE), str(DEMO_USER_IDS["bob"])]
    assert parsed["mention_everyone"] is True
    assert [u["id"] for u in limited["mentions"]] == [str(ALICE)]
    assert limited["mention_everyone"] is False


async def test_an_unexpected_failure_is_a_logged_discord_style_500(
    server: SandboxServer, rest: RestCaller, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_listener(event: object) -> None:
        raise RuntimeError("listener broke")

    server.sandbox.subscribe(broken_listener)

    status, body = await rest("POST", f"/channels/{GENERAL}/messages", json={"content": "hi"})

    assert (status, body) == (500, {"message": "500: Internal Server Error", "code": 0})
    assert "listener broke" in caplog.text
