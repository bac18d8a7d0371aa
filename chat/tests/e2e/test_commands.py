"""Slash commands end to end: the sandbox dispatches each interaction to the real worker, which
answers ephemerally; the effects show in the next prompt the fake model receives."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from chat.models import ChannelResetMarker, Memory, Turn
from chat.sandbox.demo import DEMO_GUILD_ID
from chat.sandbox.errors import DiscordAPIError
from chat.sandbox.interactions import ACK_SECONDS, CALLBACK_DEFERRED, InteractionRecord
from chat.services.slash_commands import CommandRateLimit
from chat.services.turn_record import REDACTED
from chat.tests.e2e.conftest import (
    ALICE,
    BOB,
    DEMO_BOT_ID,
    DEMO_CONFIG,
    GENERAL,
    World,
    eventually,
)
from chat.tests.privacy import user_privacy
from chat.why import why_message
from personas.models import PrivacySource, UserPrivacy
from personas.services import config_import

pytestmark = pytest.mark.django_db(transaction=True)

MANAGE_GUILD = 1 << 5
MANAGE_MESSAGES = 1 << 13


async def run(
    world: World,
    name: str,
    options: dict | None = None,
    *,
    user: int = ALICE,
    channel_id: int = GENERAL,
    target_message_id: int | None = None,
    overridden: bool = False,
) -> InteractionRecord:
    """``user`` runs the command; returns its record once the worker answered it."""
    record = world.sandbox.sandbox.interactions.run(
        channel_id,
        user,
        name,
        options,
        target_message_id=target_message_id,
        overridden=overridden,
    )
    await eventually(lambda: record.answered)
    assert record.answers[0].seconds < ACK_SECONDS
    assert all(a.ephemeral for a in record.answers), record.answers
    return record


def moderator(world: World, user: int, permissions: int) -> None:
    sandbox = world.sandbox.sandbox
    role = sandbox.add_role(DEMO_GUILD_ID, "Moderators", permissions=permissions)
    sandbox.add_member(DEMO_GUILD_ID, user, role_ids=[role])


def user_lines(body: dict) -> list[str]:
    """What the people said, as the prompt shows it (user-role messages)."""
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def prompt_text(body: dict) -> str:
    return json.dumps(body["messages"], ensure_ascii=False)


async def replied_to(world: World, message: dict) -> None:
    """Wait until a persona's turn answered ``message`` (delivered its reply)."""

    def answered() -> bool:
        turns = Turn.objects.filter(trigger_message_id=int(message["id"]), status="replied")
        return turns.exists()

    await eventually(sync_to_async(answered))


# --- /privacy ------------------------------------------------------------------------------------


async def test_privacy_full_hides_the_caller_from_the_next_prompt_and_says_what_it_deleted(world):
    await world.start_worker()
    first = world.say("tomori, remember that my cat is called Miso")
    await replied_to(world, first)

    record = await run(world, "privacy", {"level": "full"})

    assert record.content.startswith("Your privacy is now **full**")
    assert "Deleted: 0 memory(ies) about you" in record.content
    assert "your words in 1 turn record(s)" in record.content
    row = await sync_to_async(UserPrivacy.objects.get)(user_id=ALICE)
    assert (row.level, row.set_by) == ("full", PrivacySource.USER)
    kept = await sync_to_async(Turn.objects.get)(trigger_message_id=int(first["id"]))
    assert "my cat is called Miso" not in json.dumps(kept.prompt_record)  # items and request
    assert REDACTED in [item["text"] for item in kept.context_items]
    ignored = world.say("tomori, are you there?")
    trigger = world.say("tomori, what is the cat's name?", author=BOB)
    await replied_to(world, trigger)
    await world.drained()
    said = user_lines(world.llm.chat_bodies[-1])  # the persona's own replies quote her
    assert not any("Miso" in line or "are you there" in line for line in said), said
    assert not any(
        (m.get("message_reference") or {}).get("message_id") == ignored["id"]
        for m in world.bot_messages(GENERAL)
    )


SECOND_GUILD, LOUNGE = 1191168914227200900, 1191168914227200901


async def test_privacy_is_per_guild_full_in_one_and_still_seen_in_the_other(world):
    sandbox = world.sandbox.sandbox
    sandbox.add_guild("Second Café", guild_id=SECOND_GUILD)
    sandbox.add_text_channel(SECOND_GUILD, "lounge", channel_id=LOUNGE, topic="Chat.")
    for user in (ALICE, BOB):
        sandbox.add_member(SECOND_GUILD, user)
    [demo] = json.loads(DEMO_CONFIG.read_text())["guilds"]
    second = {
        **demo,
        "id": str(SECOND_GUILD),
        "name": "Second Café",
        "channels": [{"id": str(LOUNGE), "mode": "reactive"}],
        "blocks": [],
        "users": [],
    }
    await sync_to_async(config_import)(data={"version": 1, "guilds": [second]})
    await world.start_worker()

    await run(world, "privacy", {"level": "full"})  # in the demo guild
    ignored = world.say("tomori, are you there?")
    seen = world.say("tomori, hello from the lounge", channel_id=LOUNGE)
    await replied_to(world, seen)
    await world.drained()

    assert any("hello from the lounge" in line for line in user_lines(world.llm.chat_bodies[-1]))
    taken = Turn.objects.filter(trigger_message_id=int(ignored["id"])).exists
    assert not await sync_to_async(taken)()
    rows = UserPrivacy.objects.filter(user_id=ALICE).values_list("guild__guild_id", "level")
    assert await sync_to_async(list)(rows) == [(DEMO_GUILD_ID, "full")]


async def test_privacy_full_deletes_the_callers_memories(world):
    await world.start_worker()
    await run(world, "memory add", {"text": "I like green tea"})
    assert await sync_to_async(Memory.objects.filter(user_id=ALICE).count)() == 1

    record = await run(world, "privacy", {"level": "full"})

    assert "Deleted: 1 memory(ies) about you" in record.content
    assert await sync_to_async(Memory.objects.filter(user_id=ALICE).count)() == 0
    shown = await run(world, "memory show")  # still usable with full privacy
    assert shown.content == "The personas remember nothing about you here."


async def test_privacy_partial_is_seen_in_conversation_but_not_remembered(world):
    await world.start_worker()
    await run(world, "privacy", {"level": "partial"})

    trigger = world.say("tomori, my favourite colour is teal")
    await replied_to(world, trigger)
    refused = await run(world, "memory add", {"text": "I like teal"})

    assert "teal" in prompt_text(world.llm.chat_bodies[-1])  # seen
    assert refused.content.startswith("Your privacy is partial: nothing about you is remembered")
    assert await sync_to_async(Memory.objects.filter(user_id=ALICE).count)() == 0


# --- /memory -------------------------------------------------------------------------------------


async def test_memory_add_show_and_forget_are_numbered_and_refuse_bad_input(world):
    await world.start_worker()
    world.client.tree.rate_limit = CommandRateLimit(burst=20)  # ten commands in a row here

    added = await run(world, "memory add", {"text": "  I like   green tea "})
    await run(world, "memory add", {"text": "My birthday is in May"})
    shown = await run(world, "memory show")
    empty = await run(world, "memory add", {"text": "   "})
    not_theirs = await run(world, "memory forget", {"id": "7"}, user=ALICE)
    bobs = await run(world, "memory show", user=BOB)
    forgot_one = await run(world, "memory forget", {"id": "1"})
    after_one = await run(world, "memory show")
    forgot_all = await run(world, "memory forget", {"id": "all"})
    after_all = await run(world, "memory show")

    assert added.content.startswith("Remembered: 1. I like green tea — added by you with /memory")
    lines = shown.content.splitlines()
    assert [line.split(" — ")[0] for line in lines] == [
        "1. I like green tea",
        "2. My birthday is in May",
    ]
    assert all(" — added by you with /memory, 20" in line for line in lines)
    assert empty.content == "The memory text is empty: write what the personas should remember."
    assert not_theirs.content == "There is no memory 7 of yours (yours are 1–2; see /memory show)."
    assert bobs.content == "The personas remember nothing about you here."
    assert forgot_one.content == "Forgotten: 1 memory(ies)."
    assert after_one.content.startswith("1. My birthday is in May")
    assert forgot_all.content == "Forgotten: 1 memory(ies)."
    assert after_all.content == "The personas remember nothing about you here."


async def test_a_memory_added_by_command_reaches_the_next_prompt_about_its_person(world):
    await world.start_worker()
    await run(world, "memory add", {"text": "I drink green tea every morning"})

    trigger = world.say("tomori, what should I drink this morning?")
    await replied_to(world, trigger)

    assert "About Alice: I drink green tea every morning" in prompt_text(world.llm.chat_bodies[-1])


# --- /persona list -------------------------------------------------------------------------------


async def test_persona_list_names_each_persona_with_its_triggers(world):
    await world.start_worker()

    record = await run(world, "persona list")

    assert record.content.splitlines() == [
        "**Tomori** (main): `tomori`. You are Tomori, a quiet girl who writes poetry.",
        "**Anon**: `anon`. You are Anon, loud, cheerful and a little vain.",
    ]


async def test_a_blacklisted_user_is_refused_persona_commands(world):
    await sync_to_async(user_privacy)(BOB, guild_id=DEMO_GUILD_ID, blacklisted=True)
    await world.start_worker()

    record = await run(world, "persona list", user=BOB)

    assert record.content == "You are blocked from this bot's personas on this server."


# --- /reset --------------------------------------------------------------------------------------


async def test_reset_starts_every_personas_next_window_after_it(world):
    await world.start_worker()
    before = world.say("tomori, the password is swordfish")
    await replied_to(world, before)
    moderator(world, BOB, MANAGE_MESSAGES)

    record = await run(world, "reset", user=BOB)

    assert record.content.startswith("Reset: from now on the personas here see only")
    marker = await sync_to_async(ChannelResetMarker.objects.get)(channel_id=GENERAL)
    assert (marker.marker_id, marker.reset_by) == (record.id, BOB)
    after = world.say("anon, what is the password?")
    await replied_to(world, after)
    last = world.llm.chat_bodies[-1]
    assert "swordfish" not in prompt_text(last)  # neither alice's line nor Tomori's quote of it
    assert "what is the password" in prompt_text(last)


async def test_reset_without_manage_messages_is_refused_by_the_worker(world):
    await world.start_worker()
    with pytest.raises(DiscordAPIError):  # Discord does not offer it to bob
        world.sandbox.sandbox.interactions.run(GENERAL, BOB, "reset")

    record = await run(world, "reset", user=BOB, overridden=True)  # a guild override shows it

    assert record.content == "You need the Manage Messages permission in this channel for that."
    assert not await sync_to_async(ChannelResetMarker.objects.exists)()


# --- /prompt -------------------------------------------------------------------------------------


async def test_prompt_sends_the_dry_run_request_as_a_file_and_changes_nothing(world):
    await world.start_worker()
    trigger = world.say("anon, sing the chorus")
    await replied_to(world, trigger)
    world.say("what a lovely evening", author=BOB)
    await world.drained()
    turns_before = await sync_to_async(Turn.objects.count)()
    calls_before = len(world.llm.chat_bodies)
    moderator(world, ALICE, MANAGE_GUILD)

    record = await run(world, "prompt", {"persona": "anon"})

    [file] = record.files
    assert file.filename == "prompt-anon.json"
    body = json.loads(file.data)
    assert body["messages"][0]["content"].startswith("You are Anon")
    assert "Bob: [ref_3] what a lovely evening" in prompt_text(body)
    assert await sync_to_async(Turn.objects.count)() == turns_before
    assert len(world.llm.chat_bodies) == calls_before


@pytest.mark.serial  # Discord's 3 s: measured with no other test loading the machine
async def test_a_slow_command_is_deferred_within_three_seconds_then_answered(world):
    await world.start_worker()
    world.say("what a lovely evening", author=BOB)
    await world.drained()
    world.sandbox.hold_responses("GET", "/channels/{channel_id}/messages", 2.5, count=5)

    record = await run(world, "prompt", {"persona": "Tomori"})  # alice moderates the demo

    deferral, edit = record.answers
    assert (deferral.via, deferral.type) == ("callback", CALLBACK_DEFERRED)
    assert deferral.seconds < ACK_SECONDS and deferral.ephemeral
    assert edit.via == "original" and edit.seconds > 2.5
    assert [f.filename for f in edit.files] == ["prompt-tomori.json"]


async def test_prompt_refuses_an_unknown_persona_and_a_member_without_manage_server(world):
    await world.start_worker()
    world.say("hello")
    moderator(world, ALICE, MANAGE_GUILD)

    unknown = await run(world, "prompt", {"persona": "zed"})
    refused = await run(world, "prompt", {"persona": "anon"}, user=BOB, overridden=True)

    assert unknown.content == "There is no persona 'zed' here. Personas: Tomori, Anon."
    assert refused.content == "You need the Manage Server permission in this channel for that."


# --- Why (not)? ---------------------------------------------------------------------------------


async def test_why_not_answers_what_the_why_page_answers(world):
    await world.start_worker()
    message = world.say("tomori, how was your day?")
    await replied_to(world, message)
    await world.drained()
    moderator(world, BOB, MANAGE_MESSAGES)

    record = await run(world, "Why (not)?", user=BOB, target_message_id=int(message["id"]))

    # The why page reads a consumed message back from Discord, as the worker's port does.
    read_back = await world.client.adapter.fetch_message(GENERAL, int(message["id"]))
    page = await sync_to_async(why_message)(
        message_id=int(message["id"]),
        bot_user_id=DEMO_BOT_ID,
        now=timezone.now(),
        fetch=lambda channel_id, message_id: read_back,
    )
    lines = record.content.splitlines()
    assert lines[0] == page.summary == "1 of 2 personas replied."
    assert lines[1:] == [
        f"**{a.persona}** {'replied' if a.replied else 'did not reply'}: {a.why}"
        + (f" (rule: {a.rule})" if a.rule and not a.replied else "")
        for a in page.answers
    ]
    assert lines[1].startswith("**Tomori** replied: ")


async def test_why_not_without_manage_messages_is_refused(world):
    await world.start_worker()
    message = world.say("hello there")

    record = await run(
        world, "Why (not)?", user=BOB, target_message_id=int(message["id"]), overridden=True
    )

    assert record.content == "You need the Manage Messages permission in this channel for that."


# --- rate limit ----------------------------------------------------------------------------------


async def test_a_burst_of_commands_is_rate_limited_per_member(world):
    await world.start_worker()

    burst = [await run(world, "persona list") for _ in range(6)]
    other = await run(world, "persona list", user=BOB)

    assert all(r.content.startswith("**Tomori**") for r in burst[:5])
    assert burst[5].content.startswith("Slow down: at most 5 commands in 10 seconds.")
    assert other.content.startswith("**Tomori**")
