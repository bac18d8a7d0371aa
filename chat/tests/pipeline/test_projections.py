"""One context, projected per model attempt: OpenAI messages and completion prose."""

from __future__ import annotations

import pytest

from chat.pipeline.context import build_turn_context
from chat.pipeline.projections import AttemptProfile, completion_lines, to_openai_messages
from chat.pipeline.recall import MEMORY_HEADER
from chat.pipeline.types import ContextNote, PersonaProfile, Reaction
from chat.tests.factories import BOB, TOMORI, gif, image, message, reply_to, turn_input

PERSONA = PersonaProfile(
    name="Tomori",
    is_main=True,
    system_prompt="You are {char}.",
    context_note=ContextNote("Be kind.", 0),
    prefill="Hmm,",
)
STOP = (
    "[System: Write only Tomori's next message. Do not write lines for anyone else, do not "
    "start with a name label, and do not write ref_ or media_ tags.]"
)


def context():
    history = [
        message(1, "look at my cat", author=BOB, attachments=(image(101, "cat.png"),)),
        message(2, "so cute", author=TOMORI, minutes=1, reactions=(Reaction("❤", 2),)),
        message(3, "and this?", minutes=2, reference=reply_to(1), attachments=(gif(102),)),
    ]
    return build_turn_context(
        turn_input(history, persona=PERSONA, memories=("About Bob: has a cat",))
    )


def test_blind_model_gets_notices_naming_only_tools_it_offers():
    messages = to_openai_messages(
        context(), AttemptProfile(model="m", tools=frozenset({"process_gif"}))
    )

    assert messages == [
        {"role": "system", "content": "You are Tomori."},
        {
            "role": "user",
            "content": "Bob: [ref_1] look at my cat "
            "[System: 1 image(s) omitted here; shown again later]",
        },
        {"role": "assistant", "content": "Tomori: [ref_2] so cute [reactions: ❤ 2]"},
        {
            "role": "user",
            "content": 'Alice: [ref_3, replying to ref_1 Bob: "look at my cat"] and this? '
            "[GIF media_2: dance.gif] [image media_1: cat.png] "
            "[System: you cannot see media_2 directly; call process_gif with media_2.] "
            "[System: media_1 cannot be shown to you.]",
        },
        {"role": "user", "content": f"[System: {MEMORY_HEADER}\n- About Bob: has a cat]"},
        {"role": "user", "content": "[System: Be kind.]"},
        {"role": "user", "content": STOP},
        {"role": "user", "content": '[System: Begin your reply with "Hmm,".]'},
    ]


def test_vision_model_gets_image_parts_and_a_prefill_message():
    attempt = AttemptProfile(model="m", supports_vision=True, supports_prefill=True)

    messages = to_openai_messages(context(), attempt)

    assert messages[3]["content"] == [
        {
            "type": "text",
            "text": 'Alice: [ref_3, replying to ref_1 Bob: "look at my cat"] and this? '
            "[GIF media_2: dance.gif] [image media_1: cat.png]",
        },
        {"type": "image_url", "image_url": {"url": "https://cdn.example/102.gif"}},
        {"type": "image_url", "image_url": {"url": "https://cdn.example/attachments/101/cat.png"}},
    ]
    assert messages[-1] == {"role": "assistant", "content": "Tomori: Hmm,"}


@pytest.mark.parametrize(
    ("tools", "notice"),
    [
        (frozenset(), "[System: media_1 cannot be shown to you.]"),
        (
            frozenset({"analyze_image"}),
            "[System: you cannot see media_1 directly; call analyze_image with media_1.]",
        ),
    ],
)
def test_blind_notice_for_a_still_image(tools, notice):
    history = [message(1, "see", attachments=(image(101),))]
    built = build_turn_context(turn_input(history))

    (user, _stop) = to_openai_messages(built, AttemptProfile(model="m", tools=tools))

    assert user["content"] == f"Alice: [ref_1] see [image media_1: cat.png] {notice}"


def test_merging_same_role_joins_text_and_parts():
    attempt = AttemptProfile(model="m", supports_vision=True, merge_same_role=True)

    messages = to_openai_messages(context(), attempt)

    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert (
        messages[1]["content"]
        == "Bob: [ref_1] look at my cat [System: 1 image(s) omitted here; shown again later]"
    )
    last = messages[3]["content"]
    assert [part["type"] for part in last] == [
        "text",
        "image_url",
        "image_url",
        "text",
        "text",
        "text",
        "text",
    ]
    assert last[-4]["text"] == f"[System: {MEMORY_HEADER}\n- About Bob: has a cat]"
    assert last[-1]["text"] == '[System: Begin your reply with "Hmm,".]'


def test_completion_lines_are_prose_without_annotations():
    assert [line for _item, line in completion_lines(context())] == [
        "You are Tomori.",
        "Bob: look at my cat",
        "Tomori: so cute",
        "Alice: and this?",
        f"{MEMORY_HEADER}\n- About Bob: has a cat",
        "Be kind.",
    ]


def test_completion_lines_leave_out_what_has_no_prose():
    built = build_turn_context(turn_input([message(1, "hi")]))

    assert [line for _item, line in completion_lines(built)] == ["Alice: hi"]
