"""The slash commands' rules, called as the gateway calls them (`chat.services.slash_commands`),
without Discord or a worker: the permission bits each command needs, the per-member rate limit,
``/privacy`` per guild and what each level deletes, ``/memory``'s numbered list with its
refusals of bad input, ``/persona list``'s lines and who is refused it, ``/reset``'s marker,
``/prompt``'s dry run over a fake Discord and the refusal of the ``Why (not)?`` command.

What only shows across processes (the answer within Discord's 3 s, the dry run sent as a file,
a memory or a reset reaching the next prompt, the why answer matching the dashboard's page)
stays in `chat/tests/e2e/test_commands.py`.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest
from django.test import override_settings

from chat.codec import message_to_json
from chat.models import (
    ChannelResetMarker,
    EventQueue,
    Memory,
    ShortTermMemory,
    Turn,
    UnreadEvent,
)
from chat.services.memory_store import MemoryScope, memory_add
from chat.services.slash_commands import (
    ADMINISTRATOR,
    LONG_TERM,
    MANAGE_GUILD,
    MANAGE_MESSAGES,
    SHORT_TERM,
    CommandRateLimit,
    CommandRefused,
    channel_reset,
    member_memories,
    member_memory_add,
    member_memory_forget,
    message_why,
    persona_list,
    privacy_set,
    prompt_dry_run,
    require_permission,
)
from chat.services.turn_record import REDACTED
from chat.tests.conftest import CHANNEL, GUILD_ID, NOW, Bench, configure_guild
from chat.tests.factories import ALICE, BOB, message, sf
from chat.tests.privacy import user_privacy
from personas.models import Block, ConfigChange, GuildConfig, Persona, PrivacySource, UserPrivacy

pytestmark = pytest.mark.django_db

OTHER_GUILD, OTHER_CHANNEL, DM_CHANNEL = sf(3), sf(4), sf(5)
SEND_MESSAGES = 1 << 11


@pytest.fixture
def personas() -> tuple[Persona, Persona]:
    """The configured guild `GUILD_ID` with its channel `CHANNEL`, Tomori (main) and Anon."""
    return configure_guild()


@pytest.fixture
def other_guild() -> GuildConfig:
    return GuildConfig.objects.create(guild_id=OTHER_GUILD, name="Second Café")


def refusal(call, /, **arguments) -> str:
    """The sentence the member reads when ``call(**arguments)`` is refused."""
    with pytest.raises(CommandRefused) as refused:
        call(**arguments)
    return str(refused.value)


def remember(text: str, *, user_id: int = ALICE.id, guild_id: int = GUILD_ID):
    return member_memory_add(guild_id=guild_id, user_id=user_id, text=text, name="Alice", now=NOW)


def shown(user_id: int = ALICE.id, guild_id: int = GUILD_ID) -> list[str]:
    """``/memory show``'s lines without their origin."""
    items = member_memories(guild_id=guild_id, user_id=user_id, now=NOW)
    return [item.line().split(" — ")[0] for item in items]


def forget(which: str, *, user_id: int = ALICE.id) -> int:
    return member_memory_forget(guild_id=GUILD_ID, user_id=user_id, which=which, now=NOW)


def dm_memory(persona: Persona, *, user_id: int = ALICE.id, **fields) -> ShortTermMemory:
    """``persona``'s short-term memory of its direct messages with ``user_id``."""
    fields.setdefault("refreshed_at", NOW - dt.timedelta(hours=1))
    return ShortTermMemory.objects.create(
        channel_id=DM_CHANNEL, persona=persona, user_id=user_id, **fields
    )


def waiting(n: int, *, author=ALICE, guild_id: int | None = GUILD_ID) -> None:
    """Message ``n`` of ``author``, waiting both in the event queue and in an unread pool."""
    channel = CHANNEL if guild_id == GUILD_ID else OTHER_CHANNEL if guild_id else DM_CHANNEL
    event = message_to_json(message(n, "hello", author=author, channel_id=channel))
    EventQueue.objects.create(channel_id=channel, message_id=sf(n), guild_id=guild_id, event=event)
    UnreadEvent.objects.create(
        channel_id=channel, message_id=sf(n), guild_id=guild_id, author_id=author.id, event=event
    )


def waiting_ids() -> tuple[list[int], list[int]]:
    """The message ids still waiting: (in the event queue, in unread pools)."""
    return (
        sorted(EventQueue.objects.values_list("message_id", flat=True)),
        sorted(UnreadEvent.objects.values_list("message_id", flat=True)),
    )


def recorded_turn(*lines: tuple[str, int]) -> Turn:
    """A recorded turn in `CHANNEL` whose context items are (text, author id)."""
    turn = Turn(guild_id=GUILD_ID, channel_id=CHANNEL, persona_name="Tomori", reason="mention")
    turn.context_items = [
        {"tag": "dialogue", "role": "user", "text": text, "tokens": 3, "author_ids": [str(a)]}
        for text, a in lines
    ]
    turn.request = {"messages": [{"role": "user", "content": "\n".join(t for t, _ in lines)}]}
    turn.save()
    return turn


# --- permissions ---------------------------------------------------------------------------------


def test_a_member_holding_the_needed_bit_or_administrator_is_let_through():
    assert (
        require_permission(permissions=MANAGE_MESSAGES | SEND_MESSAGES, needed=MANAGE_MESSAGES)
        is None
    )
    assert require_permission(permissions=ADMINISTRATOR, needed=MANAGE_GUILD) is None


def test_a_member_without_the_needed_bit_is_refused_with_the_permissions_name():
    assert refusal(require_permission, permissions=MANAGE_GUILD, needed=MANAGE_MESSAGES) == (
        "You need the Manage Messages permission in this channel for that."
    )
    assert refusal(require_permission, permissions=MANAGE_MESSAGES, needed=MANAGE_GUILD) == (
        "You need the Manage Server permission in this channel for that."
    )


# --- rate limit ----------------------------------------------------------------------------------


class Clock:
    """A clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_sixth_command_in_ten_seconds_is_refused_for_that_member_only():
    clock = Clock()
    limit = CommandRateLimit(clock=clock)
    for _ in range(5):
        limit.check(ALICE.id)
        clock.now += 1

    assert refusal(limit.check, user_id=ALICE.id) == (
        "Slow down: at most 5 commands in 10 seconds. Try again in 5 s."
    )
    limit.check(BOB.id)  # another member's commands are counted apart


def test_a_command_is_allowed_again_once_the_oldest_leaves_the_window():
    clock = Clock()
    limit = CommandRateLimit(burst=2, window=10, clock=clock)
    limit.check(ALICE.id)
    clock.now += 4
    limit.check(ALICE.id)

    clock.now += 5.5  # 9.5 s after the first: still in the window
    assert refusal(limit.check, user_id=ALICE.id).endswith("Try again in 1 s.")
    clock.now += 0.5
    limit.check(ALICE.id)
    assert refusal(limit.check, user_id=ALICE.id).endswith("Try again in 4 s.")


def test_a_refused_command_does_not_count():
    clock = Clock()
    limit = CommandRateLimit(burst=1, window=2.5, clock=clock)
    limit.check(ALICE.id)
    clock.now += 2
    assert refusal(limit.check, user_id=ALICE.id) == (
        "Slow down: at most 1 commands in 2.5 seconds. Try again in 1 s."
    )

    clock.now += 0.5  # 2.5 s after the one that ran, 0.5 s after the refused one
    limit.check(ALICE.id)


# --- /privacy ------------------------------------------------------------------------------------


def test_privacy_full_says_what_it_deleted_and_records_the_users_choice(personas):
    tomori, _ = personas
    remember("I like green tea")
    dm_memory(tomori, summary="Alice talked about tea.")
    waiting(1)
    recorded_turn(("Alice: my cat is called Miso", ALICE.id), ("Bob: nice", BOB.id))

    change = privacy_set(guild_id=GUILD_ID, user_id=ALICE.id, level="full")

    assert change.sentence() == (
        "Your privacy is now **full**: the personas never see your messages, you never trigger "
        "them, and nothing of yours is stored. Deleted: 2 memory(ies) about you, 2 stored "
        "message(s) of yours, your words in 1 turn record(s), and 0 channel summary(ies) that "
        "may have drawn on them."
    )
    row = UserPrivacy.objects.get(user_id=ALICE.id)
    assert (row.guild.guild_id, row.level, row.set_by) == (GUILD_ID, "full", PrivacySource.USER)
    assert not Memory.objects.exists() and not ShortTermMemory.objects.exists()
    assert [i["text"] for i in Turn.objects.get().context_items] == [REDACTED, "Bob: nice"]


def test_privacy_full_deletes_their_waiting_messages_here_and_in_dms_and_nothing_else(
    personas, other_guild
):
    waiting(1)
    waiting(2, guild_id=None)  # a direct message
    waiting(3, guild_id=OTHER_GUILD)
    waiting(4, author=BOB)

    change = privacy_set(guild_id=GUILD_ID, user_id=ALICE.id, level="full")

    assert change.forgotten_messages == 4  # two messages, each queued and unread
    assert waiting_ids() == ([sf(3), sf(4)], [sf(3), sf(4)])


def test_privacy_full_in_one_guild_leaves_the_other_guild_seen_and_remembered(
    personas, other_guild
):
    remember("I like green tea")
    remember("I like green tea", guild_id=OTHER_GUILD)

    privacy_set(guild_id=GUILD_ID, user_id=ALICE.id, level="full")

    rows = UserPrivacy.objects.filter(user_id=ALICE.id).values_list("guild__guild_id", "level")
    assert list(rows) == [(GUILD_ID, "full")]
    assert list(Memory.objects.values_list("guild_id", flat=True)) == [OTHER_GUILD]
    assert shown(guild_id=OTHER_GUILD) == ["1. I like green tea"]


def test_after_privacy_full_the_memory_list_is_empty_and_still_answers(personas):
    remember("I like green tea")

    change = privacy_set(guild_id=GUILD_ID, user_id=ALICE.id, level="full")

    assert change.forgotten_memories == 1
    assert member_memories(guild_id=GUILD_ID, user_id=ALICE.id, now=NOW) == []


def test_privacy_partial_deletes_their_memories_and_keeps_their_waiting_messages(personas):
    tomori, _ = personas
    remember("I like green tea")
    remember("My birthday is in May")
    dm_memory(tomori, summary="Alice talked about tea.")
    waiting(1)

    change = privacy_set(guild_id=GUILD_ID, user_id=ALICE.id, level="partial")

    assert change.sentence() == (
        "Your privacy is now **partial**: the personas still see your messages in conversation, "
        "but nothing about you is remembered or recalled. Deleted: 3 memory(ies) about you."
    )
    assert not Memory.objects.exists() and not ShortTermMemory.objects.exists()
    assert waiting_ids() == ([sf(1)], [sf(1)])
    assert UserPrivacy.objects.get(user_id=ALICE.id).level == "partial"


def test_a_member_with_partial_privacy_is_refused_a_memory_and_nothing_is_stored(personas):
    privacy_set(guild_id=GUILD_ID, user_id=ALICE.id, level="partial")

    assert refusal(remember, text="I like teal") == (
        "Your privacy is partial: nothing about you is remembered. "
        "Use /privacy level:minimal to allow memories."
    )
    assert not Memory.objects.exists()


def test_privacy_back_to_minimal_allows_memories_again(personas):
    privacy_set(guild_id=GUILD_ID, user_id=ALICE.id, level="full")

    change = privacy_set(guild_id=GUILD_ID, user_id=ALICE.id, level="minimal")
    remember("I like green tea")

    assert (change.previous.value, change.level.value) == ("full", "minimal")
    assert change.sentence() == (
        "Your privacy is now **minimal**: the personas see your messages and may remember them."
    )
    assert shown() == ["1. I like green tea"]


def test_privacy_keeps_an_admins_blacklist(personas):
    guild = GuildConfig.objects.get(guild_id=GUILD_ID)
    UserPrivacy.objects.create(guild=guild, user_id=ALICE.id, blacklisted=True)

    privacy_set(guild_id=GUILD_ID, user_id=ALICE.id, level="partial")

    row = UserPrivacy.objects.get(user_id=ALICE.id)
    assert (row.level, row.blacklisted) == ("partial", True)


def test_a_privacy_change_is_in_the_guilds_audit_trail_as_the_callers_command(personas):
    privacy_set(guild_id=GUILD_ID, user_id=ALICE.id, level="full")

    [change] = ConfigChange.objects.filter(guild_id=GUILD_ID)
    assert (change.kind, change.via, change.actor_discord_id) == ("command", "/privacy", ALICE.id)


def test_privacy_refuses_an_unknown_level_and_an_unconfigured_guild(personas):
    assert refusal(privacy_set, guild_id=GUILD_ID, user_id=ALICE.id, level="secret") == (
        "'secret' is not a privacy level: choose minimal, partial or full."
    )
    assert refusal(privacy_set, guild_id=OTHER_GUILD, user_id=ALICE.id, level="full") == (
        "The bot is not configured for this server yet."
    )
    assert not UserPrivacy.objects.exists()


# --- /memory -------------------------------------------------------------------------------------


def test_memories_are_numbered_in_the_order_added_with_their_origin(personas):
    added = remember("  I like   green tea ")
    remember("My birthday is in May")

    items = member_memories(guild_id=GUILD_ID, user_id=ALICE.id, now=NOW)

    day = f"{Memory.objects.first().created_at:%Y-%m-%d}"
    assert added.line() == f"1. I like green tea — added by you with /memory, {day}"
    assert [item.line() for item in items] == [
        f"1. I like green tea — added by you with /memory, {day}",
        f"2. My birthday is in May — added by you with /memory, {day}",
    ]
    row = Memory.objects.get(text="I like green tea")
    assert (row.kind, row.user_id, row.source, row.subject_name) == (
        "personal",
        ALICE.id,
        "command",
        "Alice",
    )


def test_each_member_sees_only_their_own_memories_of_this_guild(personas, other_guild):
    remember("I like green tea")
    remember("I live in Lyon", guild_id=OTHER_GUILD)
    memory_add(
        scope=MemoryScope.guild(GUILD_ID), text="The band practises on Sundays", source="admin"
    )

    assert shown() == ["1. I like green tea"]
    assert shown(user_id=BOB.id) == []


def test_a_near_duplicate_updates_the_memory_instead_of_adding_one(personas):
    remember("I like green tea.")
    again = remember("i like GREEN tea")

    assert again.number == 1
    assert shown() == ["1. i like GREEN tea"]


def test_an_empty_memory_is_refused(personas):
    assert refusal(remember, text=" \n\t ") == (
        "The memory text is empty: write what the personas should remember."
    )
    assert not Memory.objects.exists()


@override_settings(MEMORY_PERSONAL_MAX_CHARS=20)
def test_an_over_long_memory_is_refused_with_the_limit(personas):
    assert refusal(remember, text="x" * 21) == (
        "A memory here holds at most 20 characters; this one has 21."
    )
    assert not Memory.objects.exists()


@override_settings(MEMORY_PERSONAL_LIMIT=1)
def test_a_memory_beyond_the_members_limit_is_refused(personas):
    remember("I like green tea")

    assert refusal(remember, text="My birthday is in May") == (
        "Alice already has 1 memories here; forget one before adding another."
    )
    assert shown() == ["1. I like green tea"]


def test_a_memory_in_an_unconfigured_guild_is_refused(personas):
    assert refusal(remember, text="I like green tea", guild_id=OTHER_GUILD) == (
        "The bot is not configured for this server yet."
    )
    assert not Memory.objects.exists()


def test_forgetting_one_renumbers_the_rest_and_all_forgets_every_one(personas):
    remember("I like green tea")
    remember("My birthday is in May")
    remember("I play the oboe")

    assert forget("2") == 1
    assert shown() == ["1. I like green tea", "2. I play the oboe"]
    assert forget(" ALL ") == 2
    assert shown() == []
    assert not Memory.objects.exists()


def test_forgetting_a_number_that_is_not_theirs_is_refused_and_forgets_nothing(personas):
    remember("I like green tea")
    remember("My birthday is in May")

    assert refusal(forget, which="7") == (
        "There is no memory 7 of yours (yours are 1–2; see /memory show)."
    )
    assert refusal(forget, which="1", user_id=BOB.id) == (
        "There is no memory 1 of yours (you have none; see /memory show)."
    )
    assert refusal(forget, which="first") == (
        "'first' is not a memory number: give a number or 'all'."
    )
    assert refusal(forget, which="-1") == "'-1' is not a memory number: give a number or 'all'."
    assert Memory.objects.count() == 2


def test_forgetting_all_when_there_is_none_forgets_zero(personas):
    assert forget("all") == 0


def test_short_term_memories_of_their_dms_follow_the_long_term_ones(personas):
    tomori, anon = personas
    remember("I like green tea")
    dm_memory(
        tomori, summary=" Alice is learning Japanese. ", categories={"plans": "", "mood": "Tired"}
    )
    dm_memory(anon, summary="Alice sings.")
    dm_memory(anon, user_id=BOB.id, summary="Bob plays bass.")
    rana = Persona.objects.create(guild=tomori.guild, name="Rana")
    dm_memory(rana, summary="Expired.", refreshed_at=NOW - dt.timedelta(hours=24))
    soyo = Persona.objects.create(guild=tomori.guild, name="Soyo")
    dm_memory(soyo, summary="Never refreshed.", refreshed_at=None)

    items = member_memories(guild_id=GUILD_ID, user_id=ALICE.id, now=NOW)

    day = f"{Memory.objects.get().created_at:%Y-%m-%d}"
    assert [item.line() for item in items] == [
        f"1. I like green tea — added by you with /memory, {day}",
        "2. Alice sings. — Anon's short-term memory of your direct messages",
        "3. Alice is learning Japanese. — Tomori's short-term memory of your direct messages",
        "4. Tired — Tomori's short-term memory of your direct messages (mood)",
    ]
    assert [item.store for item in items] == [LONG_TERM, SHORT_TERM, SHORT_TERM, SHORT_TERM]


def test_forgetting_a_part_of_a_short_term_memory_clears_that_part_only(personas):
    tomori, _ = personas
    memory = dm_memory(
        tomori, summary="Alice is learning Japanese.", categories={"mood": "Tired", "pets": "A cat"}
    )

    assert forget("2") == 1  # the mood note
    assert forget("1") == 1  # the summary

    memory.refresh_from_db()
    assert (memory.summary, memory.categories) == ("", {"pets": "A cat"})
    assert shown() == ["1. A cat"]


def test_forgetting_all_clears_both_stores(personas):
    tomori, _ = personas
    remember("I like green tea")
    kept = dm_memory(tomori, user_id=BOB.id, summary="Bob plays bass.")
    memory = dm_memory(tomori, summary="Alice is learning Japanese.", categories={"mood": "Tired"})

    assert forget("all") == 3

    memory.refresh_from_db()
    assert (memory.summary, memory.categories) == ("", {})
    assert not Memory.objects.exists()
    kept.refresh_from_db()
    assert kept.summary == "Bob plays bass."


# --- /persona list -------------------------------------------------------------------------------


def test_persona_list_names_each_enabled_persona_main_first_with_its_triggers(personas):
    tomori, anon = personas
    tomori.system_prompt = "You are Tomori, a quiet girl who writes poetry. You speak softly."
    tomori.save()
    anon.system_prompt = "You are Anon, loud, cheerful and a little vain!\nShe sings."
    anon.triggers = ["anon", "chihaya"]
    anon.save()
    guild = GuildConfig.objects.get(guild_id=GUILD_ID)
    Persona.objects.create(guild=guild, name="Aaron", triggers=[], system_prompt="Says hi.")
    Persona.objects.create(guild=guild, name="Ghost", enabled=False, system_prompt="Boo.")

    lines = [p.line() for p in persona_list(guild_id=GUILD_ID, user_id=ALICE.id, now=NOW)]

    assert lines == [
        "**Tomori** (main): `tomori`. You are Tomori, a quiet girl who writes poetry.",
        "**Aaron**: no trigger words. Says hi.",
        "**Anon**: `anon`, `chihaya`. You are Anon, loud, cheerful and a little vain!",
    ]


def test_a_long_first_sentence_is_cut_at_120_characters(personas):
    tomori, _ = personas
    tomori.system_prompt = "word " * 40 + "end. Next."
    tomori.save()

    [line, _] = persona_list(guild_id=GUILD_ID, user_id=ALICE.id, now=NOW)

    assert len(line.description) == 120 and line.description.endswith("word…")


def test_a_persona_that_blocks_the_caller_is_marked_and_a_mute_or_lapsed_block_is_not(personas):
    tomori, anon = personas
    guild = tomori.guild
    Block.objects.create(guild=guild, persona=anon, user_id=ALICE.id)
    Block.objects.create(guild=guild, persona=tomori, user_id=ALICE.id, type="mute")
    Block.objects.create(
        guild=guild, persona=tomori, user_id=ALICE.id, expires_at=NOW - dt.timedelta(minutes=1)
    )

    lines = persona_list(guild_id=GUILD_ID, user_id=ALICE.id, now=NOW)

    assert [(line.name, line.blocked) for line in lines] == [("Tomori", False), ("Anon", True)]
    assert lines[1].line() == "**Anon** — blocks you: `anon`. Anon."


def test_a_blacklisted_member_is_refused_the_persona_list(personas):
    user_privacy(BOB.id, guild_id=GUILD_ID, blacklisted=True)

    assert refusal(persona_list, guild_id=GUILD_ID, user_id=BOB.id, now=NOW) == (
        "You are blocked from this bot's personas on this server."
    )
    assert len(persona_list(guild_id=GUILD_ID, user_id=ALICE.id, now=NOW)) == 2


def test_a_member_blocked_from_every_persona_is_refused_the_persona_list(personas):
    tomori, _ = personas
    Block.objects.create(guild=tomori.guild, persona=None, user_id=BOB.id)

    assert refusal(persona_list, guild_id=GUILD_ID, user_id=BOB.id, now=NOW) == (
        "You are blocked from this bot's personas on this server."
    )


def test_the_persona_list_of_a_guild_without_enabled_personas_is_refused(personas):
    for persona in personas:
        persona.enabled = False
        persona.save()

    assert refusal(persona_list, guild_id=GUILD_ID, user_id=ALICE.id, now=NOW) == (
        "This server has no enabled persona."
    )
    assert refusal(persona_list, guild_id=OTHER_GUILD, user_id=ALICE.id, now=NOW) == (
        "The bot is not configured for this server yet."
    )


# --- /reset --------------------------------------------------------------------------------------


def reset(*, marker_id: int, user_id: int = BOB.id, permissions: int = MANAGE_MESSAGES, **kw):
    kw.setdefault("guild_id", GUILD_ID)
    return channel_reset(
        channel_id=CHANNEL, user_id=user_id, marker_id=marker_id, permissions=permissions, **kw
    )


def field(name: str, before, after) -> dict:
    return {"field": name, "before": before, "after": after}


def test_a_reset_stores_the_channels_marker_and_a_later_one_replaces_it(personas):
    reset(marker_id=sf(100))
    marker = reset(marker_id=sf(200), user_id=ALICE.id, permissions=ADMINISTRATOR)

    [stored] = ChannelResetMarker.objects.all()
    assert stored == marker
    assert (stored.channel_id, stored.guild_id, stored.marker_id, stored.reset_by) == (
        CHANNEL,
        GUILD_ID,
        sf(200),
        ALICE.id,
    )
    trail = ConfigChange.objects.filter(action="reset").order_by("id")
    assert [(c.via, c.actor_discord_id, c.object_label, c.changes) for c in trail] == [
        ("/reset", BOB.id, str(CHANNEL), [field("history starts after message", None, sf(100))]),
        (
            "/reset",
            ALICE.id,
            str(CHANNEL),
            [field("history starts after message", sf(100), sf(200))],
        ),
    ]


def test_a_reset_without_manage_messages_is_refused_and_stores_nothing(personas):
    assert refusal(reset, marker_id=sf(100), permissions=MANAGE_GUILD | SEND_MESSAGES) == (
        "You need the Manage Messages permission in this channel for that."
    )
    assert not ChannelResetMarker.objects.exists()
    assert not ConfigChange.objects.filter(action="reset").exists()


def test_a_reset_in_an_unconfigured_guild_is_refused(personas):
    assert refusal(reset, marker_id=sf(100), guild_id=OTHER_GUILD) == (
        "The bot is not configured for this server yet."
    )
    assert not ChannelResetMarker.objects.exists()


# --- /prompt -------------------------------------------------------------------------------------


def said(n: int, content: str, author=ALICE):
    return message(
        n, content, author=author, channel_id=CHANNEL, at=NOW - dt.timedelta(minutes=10 - n)
    )


async def dry_run(bench: Bench, persona: str, permissions: int = MANAGE_GUILD) -> dict:
    return await prompt_dry_run(
        runtime=bench.runtime,
        guild_id=GUILD_ID,
        channel_id=CHANNEL,
        persona_name=persona,
        permissions=permissions,
        now=NOW,
    )


@pytest.mark.django_db(transaction=True)
async def test_the_prompt_dry_run_is_the_personas_request_and_changes_nothing(bench: Bench):
    bench.discord.post(said(1, "anon, sing the chorus"))
    bench.discord.post(said(2, "what a lovely evening", author=BOB))

    body = await dry_run(bench, " ANON ")

    assert body["messages"][0]["role"] == "system"
    assert body["messages"][0]["content"].startswith("Anon.")
    assert "Bob: [ref_2] what a lovely evening" in json.dumps(body["messages"])
    assert not await Turn.objects.aexists()
    assert bench.llm.chat_bodies == []


@pytest.mark.django_db(transaction=True)
async def test_the_prompt_dry_run_refuses_an_unknown_persona_naming_the_valid_ones(bench: Bench):
    bench.discord.post(said(1, "hello"))

    with pytest.raises(CommandRefused) as refused:
        await dry_run(bench, "zed")

    assert str(refused.value) == "There is no persona 'zed' here. Personas: Tomori, Anon."


@pytest.mark.django_db(transaction=True)
async def test_the_prompt_dry_run_refuses_an_empty_channel(bench: Bench):
    with pytest.raises(CommandRefused) as refused:
        await dry_run(bench, "Tomori")

    assert str(refused.value) == "This channel has no message to answer yet."


@pytest.mark.django_db(transaction=True)
async def test_the_prompt_dry_run_without_manage_server_is_refused_before_reading(bench: Bench):
    bench.discord.post(said(1, "hello"))

    with pytest.raises(CommandRefused) as refused:
        await dry_run(bench, "Tomori", permissions=MANAGE_MESSAGES)

    assert str(refused.value) == "You need the Manage Server permission in this channel for that."
    assert bench.discord.history_reads == []


# --- Why (not)? ---------------------------------------------------------------------------------


def test_why_not_without_manage_messages_is_refused():
    assert (
        refusal(
            message_why,
            message_id=sf(1),
            permissions=MANAGE_GUILD,
            bot_user_id=None,
            now=NOW,
        )
        == "You need the Manage Messages permission in this channel for that."
    )
