"""Deliberate Tool Mode admission and availability gates."""

from __future__ import annotations

import pytest

from chat.pipeline.tools import TOOL_CATALOGUE, admit_tools
from chat.tests.factories import document, gif, image, message, reply_to, simplify

NO_CONFIGURATION = frozenset({tool.name for tool in TOOL_CATALOGUE if not tool.needs_configuration})
EVERYTHING_CONFIGURED = frozenset(tool.name for tool in TOOL_CATALOGUE)


def trigger_entry(*messages):
    """The last entry of the simplified ``messages``: the triggering entry."""
    return simplify(list(messages)).entries[-1]


def admitted(
    trigger,
    *,
    configured=EVERYTHING_CONFIGURED,
    deliberate=True,
    short_term_memory_due=False,
    queued=False,
):
    return admit_tools(
        deliberate_tool_mode=deliberate,
        trigger=trigger,
        configured_tools=configured,
        short_term_memory_maintenance_due=short_term_memory_due,
        is_queued_turn=queued,
    ).tools


@pytest.mark.parametrize(
    ("trigger", "configured", "expected"),
    [
        (message(1, "hello there"), EVERYTHING_CONFIGURED, ()),
        (message(1, "", attachments=(document(50),)), frozenset(), ("read_file",)),
        (message(1, "", attachments=(image(50),)), EVERYTHING_CONFIGURED, ("analyze_image",)),
        (message(1, "", attachments=(image(50),)), frozenset(), ()),
        (
            message(1, "", attachments=(gif(50),)),
            EVERYTHING_CONFIGURED,
            ("analyze_image", "process_gif"),
        ),
        (
            message(1, "watch https://youtu.be/dQw4w9WgXcQ"),
            EVERYTHING_CONFIGURED,
            ("process_youtube_video",),
        ),
        (message(1, "watch https://www.youtube.com/watch?v=dQw4w9WgXcQ"), frozenset(), ()),
        (message(1, "When did Bob say that?"), frozenset(), ("reveal_message_metadata",)),
        (message(1, "please remember my birthday"), frozenset(), ("update_short_term_memory",)),
        (message(1, "can you search the web"), EVERYTHING_CONFIGURED, ("web_search",)),
        (message(1, "can you search the web"), frozenset({"analyze_image"}), ()),
        (message(1, "a gifted researcher"), EVERYTHING_CONFIGURED, ()),
    ],
)
def test_deliberate_mode_admits_tools_for_reasons_on_the_trigger(trigger, configured, expected):
    assert admitted(trigger_entry(trigger), configured=configured) == expected


def test_media_on_older_entries_admits_nothing():
    entry = trigger_entry(
        message(1, "", attachments=(image(50), document(51))), message(2, "what?")
    )

    assert admitted(entry) == ()


def test_a_reply_carries_its_targets_media_into_admission():
    target = message(1, "", attachments=(image(50),))

    entry = simplify([target, message(2, "what is this?", reference=reply_to(1))]).entries[-1]

    assert admitted(entry) == ("analyze_image",)


def test_deliberate_mode_off_offers_every_available_tool():
    assert admitted(None, deliberate=False, configured=frozenset()) == tuple(
        tool.name for tool in TOOL_CATALOGUE if tool.name in NO_CONFIGURATION
    )
    assert len(admitted(None, deliberate=False)) == len(TOOL_CATALOGUE)


def test_short_term_memory_maintenance_admits_the_memory_tool_without_keywords():
    assert admitted(trigger_entry(message(1, "hi")), short_term_memory_due=True) == (
        "update_short_term_memory",
    )


@pytest.mark.parametrize("deliberate", [True, False])
@pytest.mark.parametrize("queued", [True, False])
def test_no_reply_tool_is_admitted_because_none_exists(deliberate, queued):
    trigger = trigger_entry(message(1, "please reply to Bob"))

    assert "reply_to_message" not in admitted(trigger, deliberate=deliberate, queued=queued)


def test_each_offered_tool_says_why():
    reasons = admit_tools(
        deliberate_tool_mode=True,
        trigger=trigger_entry(message(1, "look at this file", attachments=(document(50),))),
        configured_tools=EVERYTHING_CONFIGURED,
        short_term_memory_maintenance_due=True,
        is_queued_turn=False,
    ).reasons

    assert dict(reasons) == {
        "read_file": "a file on the triggering message",
        "update_short_term_memory": "short-term memory maintenance is due",
        "analyze_image": "keyword 'look at' in the trigger",
    }


@pytest.mark.parametrize(
    ("configured", "expected"),
    [(frozenset({"analyze_image"}), ("read_file", "analyze_image")), (frozenset(), ("read_file",))],
)
def test_a_follow_up_keeps_the_tools_the_answered_reply_had(configured, expected):
    admission = admit_tools(
        deliberate_tool_mode=True,
        trigger=trigger_entry(message(1, "and the second line?")),
        configured_tools=configured,
        short_term_memory_maintenance_due=False,
        is_queued_turn=False,
        follow_up_tools=frozenset({"read_file", "analyze_image"}),
    )

    assert admission.tools == expected  # an unconfigured tool stays out
    assert admission.reasons["read_file"] == "a follow-up to a reply that offered it"


@pytest.mark.parametrize(
    ("autonomous", "configured", "expected"),
    [
        (True, EVERYTHING_CONFIGURED, ("send_sticker",)),
        (True, frozenset(), ()),  # no stickers, or a persona that cannot send them
        (False, EVERYTHING_CONFIGURED, ()),
    ],
)
def test_an_autonomous_channel_admits_the_sticker_tool_when_it_can_be_used(
    autonomous, configured, expected
):
    admission = admit_tools(
        deliberate_tool_mode=True,
        trigger=trigger_entry(message(1, "hello everyone")),
        configured_tools=configured,
        short_term_memory_maintenance_due=False,
        is_queued_turn=False,
        autonomous=autonomous,
    )

    assert admission.tools == expected
