"""No raw Discord id reaches the model through a tool, through the real worker on the sandbox.

Every end-to-end test runs under the request guard (``no_raw_ids_reach_the_model`` in
conftest); these tests drive the paths where ids used to slip through and assert what the model
is told instead.
"""

from __future__ import annotations

import json

import pytest

from chat.llm.fake_server import Reply, raw_discord_identifiers
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.sandbox.records import Upload
from chat.tests.e2e.conftest import GENERAL, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

SNOWFLAKE_TEXT = "123456789012345678"


def _tool_results(body: dict) -> list[dict]:
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


async def test_read_file_on_an_expired_link_says_so_without_the_url(world):
    world.sandbox.sandbox.attachment_url_lifetime = 0  # every link is expired once posted
    world.llm.enqueue(Reply.calling("read_file", {"media_id": "media_1"}), Reply("It is gone."))
    await world.start_worker()

    world.say("tomori, read this", attachments=[Upload("notes.txt", b"the plan", "text/plain")])
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    _, second = world.llm.chat_bodies
    [result] = _tool_results(second)
    assert result["error"] == (
        "could not read notes.txt: the file could not be downloaded: HTTP 404 "
        "(its link has expired or the file was deleted)"
    )
    assert raw_discord_identifiers(second) == []


async def test_read_file_names_the_file_without_the_ids_its_name_holds(world):
    world.llm.enqueue(Reply.calling("read_file", {"media_id": "media_1"}), Reply("Read."))
    await world.start_worker()

    filename = f"export_{SNOWFLAKE_TEXT}.txt"
    world.say("tomori, read this", attachments=[Upload(filename, b"rows", "text/plain")])
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    first, second = world.llm.chat_bodies
    [result] = _tool_results(second)
    assert (result["filename"], result["content"]) == ("export_[id].txt", "rows")
    assert "export_[id].txt" in json.dumps(first["messages"])


async def test_reveal_message_metadata_names_an_author_without_the_ids_their_name_holds(world):
    sandbox = world.sandbox.sandbox
    user_id = sandbox.add_user("numbers", global_name=f"fan{SNOWFLAKE_TEXT}")
    sandbox.add_member(DEMO_GUILD_ID, user_id)
    world.llm.enqueue(Reply.calling("reveal_message_metadata", {"ref": "ref_1"}), Reply("Them."))
    await world.start_worker()

    first = world.say("hello everyone", author=user_id)
    world.say("tomori, who sent that?", reply_to=int(first["id"]))
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    _, second = world.llm.chat_bodies
    [result] = _tool_results(second)
    assert (result["ref"], result["author"]) == ("ref_1", "fan[id]")


async def test_an_expired_link_is_signed_anew_before_a_tool_reads_it(world):
    world.llm.enqueue(Reply.calling("read_file", {"media_id": "media_1"}), Reply("Read it."))
    await world.start_worker()

    world.sandbox.sandbox.attachment_url_lifetime = 0  # the link is expired once posted …
    posted = world.say("tomori, read this", attachments=[Upload("plan.txt", b"step one")])
    world.sandbox.sandbox.attachment_url_lifetime = 3600  # … and lasts an hour when refreshed
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    _, second = world.llm.chat_bodies
    [result] = _tool_results(second)
    assert (result["filename"], result["content"]) == ("plan.txt", "step one")
    assert world.sandbox.request_counts[("POST", "/attachments/refresh-urls")] == 1
    assert "?ex=" in posted["attachments"][0]["url"]


async def test_a_follow_up_to_a_reply_keeps_the_tools_that_reply_had(world):
    world.llm.enqueue(Reply("It is a plan."), Reply("Step one."), Reply("Hello."))
    await world.start_worker()

    world.say("tomori, read this", attachments=[Upload("plan.txt", b"step one")])
    [answer] = await eventually(lambda: world.bot_messages(GENERAL))
    world.say("and what comes first?", reply_to=int(answer["id"]))  # a follow-up
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    world.say("tomori, and how are you?")  # not a follow-up
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 3)
    await world.drained()

    offered = [[t["function"]["name"] for t in b.get("tools", [])] for b in world.llm.chat_bodies]
    assert offered == [["read_file"], ["read_file"], []]
