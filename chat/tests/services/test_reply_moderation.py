"""The moderation of one reply as a service: a guild's setting as the policy reads it, each check
recorded on the turn, a failing service by MODERATION_ON_ERROR, and the reason a turn keeps."""

from __future__ import annotations

import pytest

from chat.llm.attempts import RetryPolicy
from chat.llm.fake_server import FakeLLMServer
from chat.llm.moderation import ModerationOnError, OpenAIModerationClient
from chat.models import Turn
from chat.pipeline.moderation import GuildModeration
from chat.services.reply_moderation import PieceKind, ReplyModeration, guild_moderation
from personas.models import GuildConfig

NO_WAIT = RetryPolicy(attempts_per_model=2, backoff_base=0.001, backoff_cap=0.001)


@pytest.mark.parametrize(
    ("setting", "check_input", "expected"),
    [
        ("on", False, GuildModeration()),
        ("off", False, GuildModeration(checked=False)),
        (["violence"], True, GuildModeration(allowed=frozenset({"violence"}), check_input=True)),
    ],
)
def test_a_guilds_setting_as_the_policy_reads_it(setting, check_input, expected):
    guild = GuildConfig(guild_id=1, name="g", moderation=setting, moderation_input=check_input)
    assert guild_moderation(guild=guild) == expected
    assert guild_moderation(guild=None) == GuildModeration()


@pytest.fixture
async def server():
    async with FakeLLMServer() as server:
        yield server


def moderation(server, *, on_error=ModerationOnError.WITHHOLD, nsfw=False) -> ReplyModeration:
    client = OpenAIModerationClient(base_url=server.base_url, on_error=on_error, policy=NO_WAIT)
    turn = Turn(channel_id=1, persona_name="Tomori", reason="mention", moderation={"checks": []})
    return ReplyModeration(client=client, guild=GuildModeration(), nsfw_channel=nsfw, turn=turn)


async def test_each_check_is_recorded_on_the_turn(server):
    reply = moderation(server, nsfw=True)

    passed = await reply.check("flag:sexual, fine here", kind=PieceKind.PARAGRAPH, message=0)
    withheld = await reply.check("flag:sexual/minors", kind=PieceKind.PARAGRAPH, message=1)

    assert passed.passes and not withheld.passes
    first, second = reply.turn.moderation["checks"]
    assert (first["verdict"], first["categories"], first["blocking"]) == ("pass", ["sexual"], [])
    assert (second["verdict"], second["blocking"], second["message"]) == (
        "withhold",
        ["sexual/minors"],
        1,
    )
    assert second["scores"]["sexual/minors"] > 0.9 and second["latency_ms"] > 0
    assert reply.withheld_reason(withheld, sent=1) == (
        "moderation flagged message 2 of the reply as sexual/minors, which this channel does not "
        "allow (NSFW; allowed here: sexual, violence, violence/graphic); 1 of its messages had "
        "been sent"
    )


@pytest.mark.parametrize(
    ("on_error", "passes"), [(ModerationOnError.WITHHOLD, False), (ModerationOnError.ALLOW, True)]
)
async def test_a_failing_service_gives_the_verdict_moderation_on_error_says(
    server, on_error, passes
):
    server.moderation.failure_status = 500
    reply = moderation(server, on_error=on_error)

    check = await reply.check("hello", kind=PieceKind.WHOLE, message=0)

    assert check.passes is passes and "500" in check.error
    assert [c["error"] for c in reply.turn.moderation["checks"]] == [check.error]
    warned = any("MODERATION_ON_ERROR=allow" in w for w in reply.turn.warnings)
    assert warned is passes
    if not passes:
        assert reply.withheld_reason(check, sent=0).startswith(
            "moderation could not check the reply and withholds what it cannot check"
        )
