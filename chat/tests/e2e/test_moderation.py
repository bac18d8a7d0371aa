"""Nothing unsafe reaches Discord: through the real worker, every reply piece is checked by the
fake model server's moderation service before the sandbox shows it, in each delivery mode, by
the channel's policy (NSFW or not) and the guild's setting."""

from __future__ import annotations

import json

import pytest
from prometheus_client import REGISTRY

from chat.llm.fake_moderation import moderation_result
from chat.llm.fake_server import Fault, FaultKind, Reply, StreamPace
from chat.llm.moderation import ModerationOnError
from chat.models import Turn
from chat.sandbox.demo import DEMO_CHANNEL_IDS
from chat.services.reply_moderation import withheld_notice
from chat.services.reply_stream import CUT_NOTICE
from chat.tests.e2e.conftest import GENERAL, eventually
from personas.models import GuildConfig, Persona

pytestmark = pytest.mark.django_db(transaction=True)

AFTER_DARK = DEMO_CHANNEL_IDS["after-dark"]
PACE = StreamPace(first_token_s=0.2, words_per_s=20)
FIRST = "The first part says hello and sets the scene for what follows."
SECOND_FLAGGED = "The second part turns dark: flag:violence and worse follow here."
THIRD = "The third part ends it."
REPLY = "\n\n".join([FIRST, SECOND_FLAGGED, THIRD])
VIDEO = "https://youtu.be/dQw4w9WgXcQ"


async def set_delivery_mode(name: str, mode: str) -> None:
    await Persona.objects.filter(name=name).aupdate(delivery_mode=mode)


async def set_guild(**fields) -> None:
    await GuildConfig.objects.aupdate(**fields)


async def turn_of(trigger_id: str) -> Turn:
    return await Turn.objects.aget(trigger_message_id=int(trigger_id))


def flagged_texts(world, channel_id: int) -> list[str]:
    """Every text the channel ever showed (posts and edits) that the moderation service
    flags."""
    return [
        text
        for _, text in world.sandbox.sandbox.shown_texts(channel_id)
        if moderation_result(text)["flagged"]
    ]


def verdicts_counted() -> dict[str, float]:
    """What the worker's ``personabot_moderation_verdicts_total`` holds now, by verdict."""
    return {
        verdict: REGISTRY.get_sample_value(
            "personabot_moderation_verdicts_total", {"verdict": verdict}
        )
        or 0.0
        for verdict in ("passed", "flagged", "error")
    }


async def test_a_flagged_paragraph_and_the_rest_are_withheld_with_one_notice(world):
    world.llm.enqueue(Reply("Tomori: " + REPLY, pace=PACE))
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)
    counted = verdicts_counted()

    trigger = world.say("tomori, tell me a story")["id"]
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.drained()

    messages = world.bot_messages(GENERAL)
    assert [m["content"] for m in messages] == [
        FIRST,
        withheld_notice(persona_name="Tomori", sent=1),
    ]
    assert messages[1]["flags"] & (1 << 12)  # a notice: silent
    assert flagged_texts(world, GENERAL) == []
    assert world.llm.abandoned == [0]  # the model stopped writing
    turn = await turn_of(trigger)
    assert turn.status == "withheld"
    assert turn.reply_text == FIRST  # what Discord shows
    assert turn.delivered_message_ids == [messages[0]["id"]]
    assert "message 2 of the reply as violence" in turn.error
    assert "1 of its messages had been sent" in turn.error
    checks = {check["text"]: check for check in turn.moderation["checks"]}
    assert checks[FIRST]["verdict"] == "pass"
    withheld = checks[SECOND_FLAGGED]
    assert (withheld["verdict"], withheld["blocking"], withheld["message"]) == (
        "withhold",
        ["violence"],
        1,
    )
    assert withheld["scores"]["violence"] > 0.9 and withheld["latency_ms"] > 0
    assert turn.moderation["nsfw_channel"] is False
    assert SECOND_FLAGGED in turn.moderation["withheld"]["text"]
    now = verdicts_counted()
    assert {v: now[v] - counted[v] for v in now} == {"passed": 1, "flagged": 1, "error": 0}


async def test_in_edit_mode_no_edit_ever_shows_flagged_text(world):
    await set_delivery_mode("Tomori", "edit")
    world.llm.enqueue(Reply("Tomori: " + REPLY, pace=PACE))
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)

    trigger = world.say("tomori, tell me a story")["id"]
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.drained()

    edited, notice = world.bot_messages(GENERAL)
    assert notice["content"] == withheld_notice(persona_name="Tomori", sent=1)
    shown = [text for message_id, text in world.sandbox.sandbox.shown_texts(GENERAL)]
    assert len(shown) >= 3  # the message grew in place before it stopped
    assert flagged_texts(world, GENERAL) == []
    assert FIRST in edited["content"] and "flag:violence" not in edited["content"]
    turn = await turn_of(trigger)
    assert turn.status == "withheld" and turn.reply_text == edited["content"]
    kinds = {check["kind"] for check in turn.moderation["checks"]}
    assert kinds == {"edit"}


async def test_whole_delivery_checks_the_reply_before_sending_it(world):
    await set_delivery_mode("Tomori", "whole")
    world.llm.enqueue(Reply("Tomori: " + REPLY))
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)

    trigger = world.say("tomori, tell me a story")["id"]
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    [notice] = world.bot_messages(GENERAL)
    assert notice["content"] == withheld_notice(persona_name="Tomori", sent=0)
    assert notice["message_reference"]["message_id"] == trigger
    turn = await turn_of(trigger)
    assert turn.status == "withheld" and turn.reply_text == ""
    [check] = turn.moderation["checks"]
    assert (check["kind"], check["text"]) == ("whole", REPLY)


async def test_a_clean_reply_goes_out_whole_with_every_piece_checked(world):
    clean = "\n\n".join([FIRST, "A calm middle.", THIRD])
    world.llm.enqueue(Reply("Tomori: " + clean, pace=PACE))
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)

    trigger = world.say("tomori, tell me a story")["id"]
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 3)
    await world.drained()

    assert [m["content"] for m in world.bot_messages(GENERAL)] == clean.split("\n\n")
    assert sorted(world.llm.moderation.inputs) == sorted(clean.split("\n\n"))
    turn = await turn_of(trigger)
    assert turn.status == "replied"
    assert [c["verdict"] for c in turn.moderation["checks"]] == ["pass"] * 3


@pytest.mark.parametrize("channel", ["after-dark", "a thread of after-dark"])
async def test_the_nsfw_channel_passes_sexual_and_withholds_sexual_minors(world, channel):
    channel_id = AFTER_DARK
    if channel != "after-dark":
        starter = world.say("a thread for stories", channel_id=AFTER_DARK)
        channel_id = world.sandbox.sandbox.start_thread(
            AFTER_DARK, int(starter["id"]), name="stories", creator_id=int(starter["author"]["id"])
        )
    passing = "A scene for adults: flag:sexual, described plainly."
    withheld = "Then something that never passes: flag:sexual/minors."
    world.llm.enqueue(Reply("Tomori: " + "\n\n".join([passing, withheld, THIRD]), pace=PACE))
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)

    trigger = world.say("tomori, a story for grown-ups", channel_id=channel_id)["id"]
    await eventually(lambda: len(world.bot_messages(channel_id)) == 2)
    await world.drained()

    assert [m["content"] for m in world.bot_messages(channel_id)] == [
        passing,
        withheld_notice(persona_name="Tomori", sent=1),
    ]
    turn = await turn_of(trigger)
    assert turn.status == "withheld"
    assert turn.moderation["nsfw_channel"] is True
    verdicts = {c["text"]: (c["verdict"], c["blocking"]) for c in turn.moderation["checks"]}
    assert verdicts[passing] == ("pass", [])
    assert verdicts[withheld] == ("withhold", ["sexual/minors"])


async def test_the_same_sexual_paragraph_is_withheld_outside_the_nsfw_channel(world):
    passing_there = "A scene for adults: flag:sexual, described plainly."
    world.llm.enqueue(Reply("Tomori: " + passing_there, pace=PACE))
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)

    trigger = world.say("tomori, a story for grown-ups")["id"]
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    assert [m["content"] for m in world.bot_messages(GENERAL)] == [
        withheld_notice(persona_name="Tomori", sent=0)
    ]
    turn = await turn_of(trigger)
    assert turn.status == "withheld" and "as sexual" in turn.error


async def test_a_failing_moderation_service_withholds(world):
    world.llm.moderation.failure_status = 503
    world.llm.enqueue(Reply("Tomori: " + FIRST, pace=PACE))
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)

    trigger = world.say("tomori, hello")["id"]
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    assert [m["content"] for m in world.bot_messages(GENERAL)] == [
        withheld_notice(persona_name="Tomori", sent=0)
    ]
    assert len(world.llm.moderation.inputs) == 2  # the service was retried
    turn = await turn_of(trigger)
    assert turn.status == "withheld"
    assert "could not check" in turn.error and "503" in turn.error
    [check] = turn.moderation["checks"]
    assert check["verdict"] == "withhold" and "503" in check["error"]


async def test_a_failing_moderation_service_lets_pieces_through_when_told_to(world):
    world.llm.moderation.failure_status = 503
    world.llm.enqueue(Reply("Tomori: " + FIRST, pace=PACE))
    await world.start_worker(stream=True, moderation=ModerationOnError.ALLOW)

    trigger = world.say("tomori, hello")["id"]
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    assert [m["content"] for m in world.bot_messages(GENERAL)] == [FIRST]
    turn = await turn_of(trigger)
    assert turn.status == "replied"
    assert any("MODERATION_ON_ERROR=allow" in warning for warning in turn.warnings)
    [check] = turn.moderation["checks"]
    assert check["verdict"] == "pass" and "503" in check["error"]


async def test_a_guild_with_moderation_off_never_asks_the_service(world):
    await set_guild(moderation="off")
    world.llm.enqueue(Reply("Tomori: " + REPLY, pace=PACE))
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)

    trigger = world.say("tomori, tell me a story")["id"]
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 3)
    await world.drained()

    assert [m["content"] for m in world.bot_messages(GENERAL)] == REPLY.split("\n\n")
    assert world.llm.moderation_bodies == []
    turn = await turn_of(trigger)
    assert turn.status == "replied" and turn.moderation == {}


async def test_a_guilds_own_list_lets_its_categories_through_everywhere(world):
    await set_guild(moderation=["violence"])
    world.llm.enqueue(Reply("Tomori: " + REPLY, pace=PACE))
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)

    trigger = world.say("tomori, tell me a story")["id"]
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 3)
    await world.drained()

    assert [m["content"] for m in world.bot_messages(GENERAL)] == REPLY.split("\n\n")
    turn = await turn_of(trigger)
    assert turn.status == "replied" and turn.moderation["allowed"] == ["violence"]


async def test_a_flagged_trigger_is_not_answered_when_the_guild_checks_triggers(world):
    await set_guild(moderation_input=True)
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)

    flagged = world.say("tomori, flag:harassment you")["id"]
    clean = world.say("tomori, how are you?")["id"]
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    [answer] = world.bot_messages(GENERAL)
    assert answer["message_reference"]["message_id"] == clean
    refused = await turn_of(flagged)
    assert refused.status == "refused"
    assert "the message that triggered the turn as harassment" in refused.error
    assert refused.request == {} and refused.attempts == []
    [check] = refused.moderation["checks"]
    assert (check["kind"], check["verdict"]) == ("trigger", "withhold")
    # The model was asked once, for the clean message, and never saw the flagged one.
    [body] = world.llm.chat_bodies
    assert "flag:harassment" not in json.dumps(body)


async def test_a_withheld_trigger_does_not_use_up_the_users_turns(world):
    """The first call's admission begins as the turn starts (its trigger counted against the
    user's turns); a turn that ends before asking any model gives the slot back."""
    stored = {"tokens_per_day": 1_000_000, "usd_per_month": None, "notice": ""}
    await set_guild(
        moderation_input=True, limits={**stored, "user_turns": {"count": 1, "per_seconds": 600}}
    )
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)

    flagged = world.say("tomori, flag:harassment you")["id"]
    await eventually(
        lambda: Turn.objects.filter(trigger_message_id=int(flagged), status="refused").aexists()
    )
    await world.drained()
    clean = world.say("tomori, how are you?")["id"]
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    assert (await turn_of(flagged)).status == "refused"
    assert (await turn_of(clean)).status == "replied"
    [answer] = world.bot_messages(GENERAL)
    assert answer["message_reference"]["message_id"] == clean


async def test_a_tool_result_the_model_quotes_is_checked_like_any_piece(world):
    world.sandbox.videos["dQw4w9WgXcQ"] = {
        "title": "A video",
        "channel": "Someone",
        "duration_seconds": 60,
        "transcript": "They say flag:violence in the video.",
    }
    world.llm.enqueue(
        Reply.calling("process_youtube_video", {"link": VIDEO}),
        Reply("Tomori: The video says: flag:violence in the video.", pace=PACE),
    )
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD, videos=True)

    trigger = world.say(f"tomori, what is in {VIDEO} ?")["id"]
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    assert [m["content"] for m in world.bot_messages(GENERAL)] == [
        withheld_notice(persona_name="Tomori", sent=0)
    ]
    assert world.sandbox.video_lookups == ["dQw4w9WgXcQ"]
    assert flagged_texts(world, GENERAL) == []
    turn = await turn_of(trigger)
    assert turn.status == "withheld"


async def test_a_model_failure_after_a_cleared_piece_keeps_it_and_says_the_reply_was_cut(world):
    """A piece that passed its check is delivered; the model dying afterwards does not retry
    (as when a piece was sent without moderation)."""
    clean = "\n\n".join(
        [FIRST, "The second part goes on a little longer with a few more words.", THIRD]
    )
    world.llm.enqueue(Fault(FaultKind.CUT_STREAM, text=clean, pace=PACE))
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)

    trigger = world.say("tomori, tell me a story")["id"]
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.drained()

    assert [m["content"] for m in world.bot_messages(GENERAL)] == [FIRST, CUT_NOTICE]
    assert len(world.llm.chat_bodies) == 1  # no retry once a piece was cleared
    turn = await turn_of(trigger)
    assert turn.status == "replied" and turn.error.startswith("the reply was cut after 1")


async def test_a_piece_still_being_checked_when_the_model_fails_is_written_over(world):
    """Not cleared, not delivered: the model is asked again and its new reply is checked and
    sent, the first attempt's paragraph never."""
    world.llm.moderation.latency_s = 0.6
    clean = "\n\n".join([FIRST, "The second part goes on a little longer with a few more words."])
    world.llm.enqueue(
        Fault(FaultKind.CUT_STREAM, text=clean, pace=PACE), Reply("Tomori: All fine now.")
    )
    await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)

    trigger = world.say("tomori, tell me a story")["id"]
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    assert [m["content"] for m in world.bot_messages(GENERAL)] == ["All fine now."]
    assert len(world.llm.chat_bodies) == 2
    turn = await turn_of(trigger)
    assert turn.status == "replied" and turn.attempts[0]["outcome"] == "connection"
