"""What the personas see, through the real worker on the sandbox: images by the model's
capabilities, their own past after a restart, threads, privacy, co-responders."""

from __future__ import annotations

import datetime as dt
import io
import json
import re

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from chat.llm.fake_server import Fault, FaultKind, Reply
from chat.models import MessageIndex, Turn
from chat.pipeline.dialogue import date_label
from chat.pipeline.notes import VERBATIM_TOOL_CALLING_NUDGE
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.sandbox.records import Upload
from chat.tests.config_writes import rows_update
from chat.tests.e2e.conftest import (
    ALICE,
    BOB,
    DEMO_BOT_ID,
    GENERAL,
    eventually,
    image_parts,
    prompt_text,
)
from chat.tests.privacy import user_privacy
from personas.models import Block, GuildConfig, Persona

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def _set_persona(name: str, **fields) -> None:
    rows_update(Persona.objects.filter(name=name), **fields)


def _turns() -> list[Turn]:
    return list(Turn.objects.order_by("id"))


async def test_a_vision_model_gets_the_newest_three_images_asimage_parts(world):
    # The demo personas name no model: LLM_MODEL's default, gpt-4o-mini, takes images.
    await world.start_worker()
    posted = [
        world.say(f"picture {n}", attachments=[Upload(f"p{n}.png", PNG + bytes([n]), "image/png")])
        for n in range(4)
    ]
    world.say("tomori, which one do you like?", author=BOB)
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.chat_bodies
    parts = image_parts(body)
    newest_three = [message["attachments"][0]["url"] for message in posted[1:]]
    assert [part["image_url"]["url"] for part in parts] == newest_three
    assert all(set(part) == {"type", "image_url"} for part in parts)
    shown = [m for m in body["messages"] if isinstance(m["content"], list)]
    assert all(m["content"][0]["type"] == "text" for m in shown)
    text = prompt_text(body)
    assert "1 image(s) omitted due to rendered-image limit" in text
    assert "cannot be shown to you" not in text


async def test_a_blind_model_gets_a_notice_and_asks_the_vision_model(world):
    await sync_to_async(_set_persona)("Tomori", llm_model="llama3:8b")
    world.llm.enqueue(
        Reply.calling("analyze_image", {"media_id": "media_1"}),
        Reply("a red square"),  # the vision model's answer
        Reply("It is a red square."),
    )
    await world.start_worker(vision_model="llava:13b")
    world.say("tomori, look at this", attachments=[Upload("red.png", PNG, "image/png")])
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    first, vision, second = world.llm.chat_bodies
    assert first["model"] == "llama3:8b"
    assert image_parts(first) == []
    assert "[System: you cannot see media_1 directly; call analyze_image with media_1.]" in (
        prompt_text(first)
    )
    assert [tool["function"]["name"] for tool in first["tools"]] == ["analyze_image"]
    assert vision["model"] == "llava:13b"
    assert len(image_parts(vision)) == 1
    assert "a red square" in str(second["messages"])
    [turn] = await sync_to_async(_turns)()
    assert (turn.status, turn.reply_text) == ("replied", "It is a red square.")


async def test_without_a_vision_model_a_blind_model_is_told_the_image_cannot_be_shown(world):
    await sync_to_async(_set_persona)("Tomori", llm_model="llama3:8b")
    await world.start_worker()
    world.say("tomori, look at this", attachments=[Upload("red.png", PNG, "image/png")])
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.chat_bodies
    assert "[System: media_1 cannot be shown to you.]" in prompt_text(body)
    assert "tools" not in body


async def test_the_persona_setting_overrides_the_capability_by_name(world):
    await sync_to_async(_set_persona)("Tomori", llm_model="my-local-model", llm_vision=True)
    await world.start_worker()
    world.say("tomori, look at this", attachments=[Upload("red.png", PNG, "image/png")])
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.chat_bodies
    assert len(image_parts(body)) == 1


def _role_of(body: dict, needle: str) -> str:
    [role] = [m["role"] for m in body["messages"] if needle in str(m["content"])]
    return role


def _make_main(name: str) -> None:
    rows_update(Persona.objects.filter(is_main=True), is_main=False)
    rows_update(Persona.objects.filter(name=name), is_main=True)


async def test_after_a_restart_history_read_over_rest_keeps_each_persona_its_own_lines(world):
    world.llm.enqueue(Reply("Anon: la la la, the band rules"), Reply("Tomori: welcome back, bob"))
    await world.start_worker()
    world.say("anon, sing something")
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 1)
    world.say("tomori, hi", author=BOB)
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.settle()
    await world.stop_worker()

    # A new process, nothing of the old one's memory; meanwhile the admin made Anon the main
    # persona, so the bot account's old lines are not Anon's just because Anon is main now.
    await sync_to_async(_make_main)("Anon")
    await world.start_worker()
    world.say("anon, and tomori, again please")
    await eventually(lambda: len(world.bot_messages(GENERAL)) >= 4)
    await world.drained()
    await world.settle()

    bodies = world.llm.chat_bodies[2:]
    anon = next(b for b in bodies if "You are Anon" in b["messages"][0]["content"])
    tomori = next(b for b in bodies if "You are Tomori" in b["messages"][0]["content"])
    assert _role_of(anon, "la la la, the band rules") == "assistant"
    assert _role_of(anon, "welcome back, bob") == "user"
    assert _role_of(tomori, "welcome back, bob") == "assistant"
    assert _role_of(tomori, "la la la, the band rules") == "user"
    # The turn record keeps how the window was read: over REST after the restart, anchored
    # anew; the co-responder reused that read.
    first, second = (await sync_to_async(_turns)())[2:]
    assert first.window["rest_reason"] == "no_previous_window"
    assert first.window["reanchor_reason"] is not None
    assert first.window["message_count"] == 5
    assert second.window["rest_reason"] is None
    # Co-responders: the second persona answering the same message is not a queued turn.
    assert len(world.bot_messages(GENERAL)) == 4
    assert not any("Replying to" in m["content"] for m in world.bot_messages(GENERAL))
    assert not any("earlier message" in prompt_text(body).lower() for body in bodies)


async def test_a_link_preview_on_the_bots_own_reply_is_a_preview_not_a_notice(world):
    url = "https://example.com/songs/haruhikage"
    world.sandbox.sandbox.add_link_preview(url, title="Haruhikage", description="A song")
    world.llm.enqueue(Reply(f"Tomori: listen to this {url}"))
    await world.start_worker()
    world.say("tomori, any song for me?")
    await eventually(lambda: world.bot_messages(GENERAL))
    await eventually(lambda: world.bot_messages(GENERAL)[0]["embeds"])
    await world.drained()
    world.say("tomori, thanks!")
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.settle()

    second = world.llm.chat_bodies[1]
    text = prompt_text(second)
    assert "[Embed: Haruhikage — A song]" in text
    assert "[System: Haruhikage" not in text


async def test_the_humanizer_shapes_the_delivered_reply_as_history_shows_it(world):
    await sync_to_async(_set_persona)("Tomori", force_lowercase=True, punctuation_splits=True)
    world.llm.enqueue(Reply("Tomori: Hello THERE; how are you"))
    await world.start_worker()
    world.say("tomori, hi")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()
    world.say("tomori, fine thanks")
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.settle()

    assert world.bot_messages(GENERAL)[0]["content"] == "hello there. how are you"
    second = world.llm.chat_bodies[1]
    own = [m["content"] for m in second["messages"] if m["role"] == "assistant"]
    assert any(line.endswith("hello there. how are you") for line in own)


async def test_message_metadata_comes_back_in_prompt_keys_not_snowflakes(world):
    world.llm.enqueue(
        Reply.calling("reveal_message_metadata", {"ref": "ref_2"}), Reply("Just now.")
    )
    await world.start_worker()
    first = world.say("a picture", attachments=[Upload("p.png", PNG, "image/png")])
    world.say("tomori, when did I send that?", reply_to=int(first["id"]))
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    _, second = world.llm.chat_bodies
    [result] = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    assert '"ref": "ref_2"' in result and '"reply_to": "ref_1"' in result
    assert re.search(r"\d{15,}", result) is None


async def test_the_nudge_and_the_reasoning_directive_come_from_persona_settings(world):
    await sync_to_async(_set_persona)(
        "Tomori", verbatim_tool_nudge=True, reasoning_in_think_tags=True
    )
    await world.start_worker()
    world.say("tomori, think about it")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    text = prompt_text(world.llm.chat_bodies[0])
    assert VERBATIM_TOOL_CALLING_NUDGE in text
    assert "<think>" in text


async def test_a_threads_starter_message_and_its_image_reach_the_threads_prompt(world):
    await world.start_worker()
    starter = world.say("look at my drawing", attachments=[Upload("d.png", PNG, "image/png")])
    sandbox = world.sandbox.sandbox
    thread_id = sandbox.start_thread(GENERAL, int(starter["id"]), name="drawing", creator_id=ALICE)
    world.say("tomori, do you like it?", channel_id=thread_id)
    await eventually(lambda: world.bot_messages(thread_id))
    await world.settle()

    [body] = world.llm.chat_bodies
    text = prompt_text(body)
    assert '[ref_1, thread started from ref_2 Alice: "look at my drawing"]' in text
    assert [p["image_url"]["url"] for p in image_parts(body)] == [starter["attachments"][0]["url"]]
    [reply] = world.bot_messages(thread_id)
    assert reply["channel_id"] == str(thread_id)
    assert world.bot_messages(GENERAL) == []


async def test_a_user_with_full_privacy_triggers_nothing(world):
    await sync_to_async(user_privacy)(BOB, guild_id=DEMO_GUILD_ID, level="full")
    await world.start_worker()
    world.say("tomori, are you there?", author=BOB)
    await world.drained()

    assert world.bot_messages(GENERAL) == []
    assert await sync_to_async(_turns)() == []
    assert world.llm.chat_bodies == []


def _persona_replies(world, channel_id: int = GENERAL) -> list[dict]:
    """Messages of the bot account and of its own webhooks (not the proxy system's)."""
    return [
        m
        for m in world.sandbox.sandbox.channel_messages(channel_id)
        if int(m["author"]["id"]) == DEMO_BOT_ID
        or (m.get("webhook_id") and m["author"]["username"] in ("Tomori", "Anon"))
    ]


async def test_a_proxied_member_is_answered_as_the_member_and_the_original_never(world):
    sandbox = world.sandbox.sandbox
    sandbox.add_proxy_member(ALICE, member_id="lilya", name="Lilya", prefix="l:")
    await world.start_worker(proxies=True)
    original = world.say("l: tomori, hello from lilya")
    await eventually(lambda: _persona_replies(world))
    await world.drained()

    proxied = next(m for m in sandbox.channel_messages(GENERAL) if m.get("webhook_id"))
    [reply] = _persona_replies(world)
    assert reply["message_reference"]["message_id"] == proxied["id"]
    [body] = world.llm.chat_bodies
    text = prompt_text(body)
    assert "Lilya: [ref_1] tomori, hello from lilya" in text
    assert "l: tomori" not in text
    assert "[System: Lilya is a proxied member: Alice's account speaks for them.]" in text
    row = await sync_to_async(MessageIndex.objects.get)(message_id=int(proxied["id"]))
    assert (row.proxy_member_id, row.proxy_member_name, row.proxy_sender_id) == (
        "lilya",
        "Lilya",
        ALICE,
    )
    assert row.proxy_original_id == int(original["id"])
    [turn] = await sync_to_async(_turns)()
    assert turn.trigger_message_id == int(proxied["id"])

    # The next turn reads history over REST: the member stays the member, the superseded
    # original never appears.
    await world.stop_worker()
    await world.start_worker(proxies=True)
    world.say("tomori, who was that?", author=BOB)
    await eventually(lambda: len(_persona_replies(world)) == 2)
    await world.settle()
    text = prompt_text(world.llm.chat_bodies[1])
    assert "Lilya: [ref_1] tomori, hello from lilya" in text
    assert "l: tomori" not in text


async def test_a_block_on_the_sender_applies_to_their_proxied_member(world):
    def block_alice() -> None:
        tomori = Persona.objects.get(name="Tomori")
        Block.objects.create(guild=tomori.guild, persona=tomori, user_id=ALICE, type="block")

    await sync_to_async(block_alice)()
    world.sandbox.sandbox.add_proxy_member(ALICE, member_id="lilya", name="Lilya", prefix="l:")
    await world.start_worker(proxies=True)
    world.say("l: tomori and anon, it's me, lilya")
    await eventually(lambda: _persona_replies(world))
    await world.drained()

    # Tomori blocked Alice, so not her member either; Anon answers the member, once.
    [reply] = _persona_replies(world)
    assert reply["author"]["username"] == "Anon"
    [turn] = await sync_to_async(_turns)()
    assert turn.persona_name == "Anon"
    assert "Lilya: [ref_1] tomori and anon, it's me, lilya" in prompt_text(world.llm.chat_bodies[0])


async def test_people_mentioned_but_not_speaking_are_named_for_the_persona(world):
    await world.start_worker()
    world.say(f"tomori, say hi to <@{BOB}> for me")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    text = prompt_text(world.llm.chat_bodies[0])
    assert "[System: Mentioned here but not speaking: Bob.]" in text
    assert str(BOB) not in text


async def test_a_person_back_after_days_away_gets_a_reunion_note_once(world):
    def seen_ten_days_ago() -> None:
        tomori = Persona.objects.get(name="Tomori")
        turn = Turn.objects.create(
            channel_id=GENERAL,
            guild_id=tomori.guild.guild_id,
            persona=tomori,
            persona_name="Tomori",
            trigger_message_id=1,
            trigger_author_id=ALICE,
            reason="trigger_word",
            status=Turn.Status.REPLIED,
        )
        long_ago = timezone.now() - dt.timedelta(days=10)
        Turn.objects.filter(id=turn.id).update(created_at=long_ago)

    await sync_to_async(seen_ten_days_ago)()
    await world.start_worker()
    world.say("tomori, I'm back!")
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()
    world.say("tomori, did you miss me?")
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.settle()

    first, second = (prompt_text(body) for body in world.llm.chat_bodies)
    day = (timezone.now() - dt.timedelta(days=10)).date()
    note = f"Alice is back; the last time they talked with you was {date_label(day)}."
    assert f"[System: {note}]" in first
    assert "is back;" not in second  # the first reply recorded her presence
    turns = await sync_to_async(_turns)()
    assert [t.trigger_author_id for t in turns[1:]] == [ALICE, ALICE]


async def test_an_alter_persona_answers_in_a_thread_through_the_parents_webhook(world):
    await world.start_worker()
    starter = world.say("a new song idea")
    sandbox = world.sandbox.sandbox
    thread_id = sandbox.start_thread(GENERAL, int(starter["id"]), name="song", creator_id=ALICE)
    world.say("anon, what do you think?", channel_id=thread_id)
    await eventually(lambda: world.bot_messages(thread_id))
    await world.drained()

    [reply] = world.bot_messages(thread_id)
    assert reply["author"]["username"] == "Anon" and reply["webhook_id"]
    assert world.bot_messages(GENERAL) == []
    [turn] = await sync_to_async(_turns)()
    assert turn.status == "replied"
    assert '[ref_1, thread started from ref_2 Alice: "a new song idea"]' in prompt_text(
        world.llm.chat_bodies[0]
    )


async def test_a_long_threads_prompt_still_starts_from_the_message_it_was_started_from(world):
    await sync_to_async(lambda: rows_update(GuildConfig.objects.all(), message_fetch_limit=20))()
    await world.start_worker()
    starter = world.say("my comic, page one", attachments=[Upload("p1.png", PNG, "image/png")])
    sandbox = world.sandbox.sandbox
    thread_id = sandbox.start_thread(GENERAL, int(starter["id"]), name="comic", creator_id=ALICE)
    for n in range(30):  # the thread's own start leaves the window
        world.say(f"panel {n}", channel_id=thread_id, author=BOB if n % 2 else ALICE)
    world.say("tomori, what was this thread about?", channel_id=thread_id)
    await eventually(lambda: world.bot_messages(thread_id))
    await world.settle()

    [body] = world.llm.chat_bodies
    text = prompt_text(body)
    assert "thread started from" not in text  # Discord's starter message is out of the window
    assert "panel 0" not in text
    first_line = next(m for m in body["messages"] if "my comic, page one" in str(m["content"]))
    assert body["messages"].index(first_line) < min(
        i for i, m in enumerate(body["messages"]) if "panel" in str(m["content"])
    )
    # Its image comes along (within the media window: the window holds at most 20 messages).
    assert [p["image_url"]["url"] for p in image_parts(body)] == [starter["attachments"][0]["url"]]


async def test_notices_are_never_shown_as_the_personas_own_lines_even_after_a_restart(world):
    world.llm.enqueue(
        Fault(FaultKind.TIMEOUT, delay=0.5),  # Anon's first answer is slow …
        Reply("Anon: hi bob"),  # … so Bob's message waited: "Replying to Bob…" first
        Fault(FaultKind.HTTP_ERROR, status=401),  # a failure notice for Tomori
    )
    await world.start_worker()
    world.say("anon, hi")
    await eventually(lambda: world.llm.chat_bodies)
    world.say("anon, hi", author=BOB)
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 3)
    world.say("tomori, hello?")
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 4)
    await world.drained()
    notices = [world.bot_messages(GENERAL)[i]["content"] for i in (1, 3)]
    assert notices[0] == "Replying to Bob…" and "could not answer" in notices[1]
    assert all(world.bot_messages(GENERAL)[i]["flags"] & (1 << 12) for i in (1, 3))

    world.say("anon, what did you say?")  # the window kept by the running worker
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 5)
    await world.drained()
    await world.stop_worker()
    await world.start_worker()  # the window read again over REST
    world.say("anon, and now?", author=BOB)
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 6)
    await world.drained()

    for body in world.llm.chat_bodies[-2:]:
        assert "hi bob" in prompt_text(body)
        assert "Replying to" not in prompt_text(body)
        assert "could not answer" not in prompt_text(body)


async def test_a_date_spacer_points_at_message_times_when_the_turn_offers_the_tool(world):
    world.say("this was two days ago", author=BOB)
    world.clock.offset = 2 * 86_400  # the sandbox's clock only moves forward
    await world.start_worker()
    world.say("tomori, when did bob say that?")
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 1)
    world.say("tomori, thanks")
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)
    await world.drained()

    asked, thanked = world.llm.chat_bodies
    pointer = "Call reveal_message_metadata with a ref_N for a message's exact time."
    spacer = re.compile(r"\[System: New day: \w+, \w+ \d+, \d{4}(\. (?P<pointer>.*))?\]")
    [with_tool] = [m["content"] for m in asked["messages"] if spacer.fullmatch(str(m["content"]))]
    [without] = [m["content"] for m in thanked["messages"] if spacer.fullmatch(str(m["content"]))]
    assert [t["function"]["name"] for t in asked["tools"]] == ["reveal_message_metadata"]
    assert spacer.fullmatch(with_tool)["pointer"] == pointer
    assert "tools" not in thanked and spacer.fullmatch(without)["pointer"] is None


def _gif(frames: int) -> bytes:
    from PIL import Image

    images = [Image.new("RGB", (32, 32), (30 * n, 0, 0)) for n in range(frames)]
    out = io.BytesIO()
    images[0].save(out, format="GIF", save_all=True, append_images=images[1:], duration=80)
    return out.getvalue()


@pytest.mark.parametrize("vision_model", [None, "llava:13b"])
async def test_process_gif_is_offered_for_a_gif_exactly_when_a_vision_model_reads_it(
    world, vision_model
):
    await sync_to_async(_set_persona)("Tomori", llm_model="llama3:8b")
    if vision_model:
        world.llm.enqueue(
            Reply.calling("process_gif", {"media_id": "media_1"}),
            Reply("a square turning red"),  # the vision model, shown the sampled frames
            Reply("It slowly turns red."),
        )
    await world.start_worker(vision_model=vision_model)
    world.say("tomori, look", attachments=[Upload("turn.gif", _gif(8), "image/gif")])
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.drained()

    first = world.llm.chat_bodies[0]
    offered = [tool["function"]["name"] for tool in first.get("tools", [])]
    if vision_model is None:
        assert "process_gif" not in offered and len(world.llm.chat_bodies) == 1
        return
    assert offered == ["analyze_image", "process_gif"]
    _, vision, last = world.llm.chat_bodies
    assert vision["model"] == "llava:13b"
    assert [p["image_url"]["url"][:22] for p in image_parts(vision)] == [
        "data:image/png;base64,"
    ] * 4
    [result] = [json.loads(m["content"]) for m in last["messages"] if m["role"] == "tool"]
    assert result == {"media_id": "media_1", "frames": 4, "analysis": "a square turning red"}


async def test_an_alter_persona_answers_in_a_forum_post_through_the_forums_webhook(world):
    sandbox = world.sandbox.sandbox
    forum = sandbox.add_forum_channel(DEMO_GUILD_ID, "ideas")
    await world.start_worker()
    post = sandbox.start_forum_post(forum, ALICE, name="tour", content="a summer tour?")
    world.say("anon, would you come?", channel_id=post)
    await eventually(lambda: world.bot_messages(post))
    await world.drained()

    [reply] = world.bot_messages(post)
    [hook] = sandbox.channel_webhooks(forum)
    assert reply["author"]["username"] == "Anon" and reply["webhook_id"] == hook["id"]
    [turn] = await sync_to_async(_turns)()
    assert turn.status == "replied"
    assert "a summer tour?" in prompt_text(world.llm.chat_bodies[0])
