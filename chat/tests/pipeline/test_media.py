"""Which images a turn shows: media window, rendered-image limit, repeats."""

from __future__ import annotations

import pytest

from chat.pipeline.media import EntryMedia, plan_media
from chat.pipeline.types import Sticker, with_attachment_hashes
from chat.tests.factories import ALICE, BOB, gif, image, message, sf, simplify


def shown_keys(plan: EntryMedia) -> list[str]:
    return [image.key for image in plan.shown]


def image_messages(count: int) -> list:
    """``count`` messages, alternating authors, each with its own image."""
    return [
        message(n, "", author=BOB if n % 2 else ALICE, attachments=(image(100 + n, f"{n}.png"),))
        for n in range(1, count + 1)
    ]


@pytest.mark.parametrize(
    ("count", "limit", "expected_shown", "expected_over"),
    [
        (2, 3, [1, 1], [0, 0]),
        (3, 3, [1, 1, 1], [0, 0, 0]),
        (5, 3, [0, 0, 1, 1, 1], [1, 1, 0, 0, 0]),
        (5, 1, [0, 0, 0, 0, 1], [1, 1, 1, 1, 0]),
    ],
)
def test_only_the_newest_image_messages_show_images(count, limit, expected_shown, expected_over):
    history = simplify(image_messages(count))

    plans = plan_media(history.entries, media_window=80, image_message_limit=limit)

    assert [len(plan.shown) for plan in plans] == expected_shown
    assert [plan.over_limit for plan in plans] == expected_over


def test_entries_outside_the_media_window_show_no_images():
    messages = [
        message(1, "", attachments=(image(101),)),
        message(2, "a", author=BOB),
        message(3, "b"),
        message(4, "", author=BOB, attachments=(image(104, "dog.png"),)),
    ]

    plans = plan_media(simplify(messages).entries, media_window=2)

    assert [(shown_keys(plan), plan.over_limit) for plan in plans] == [
        ([], 1),
        ([], 0),
        ([], 0),
        (["media_2"], 0),
    ]


def test_a_repeated_image_shows_only_at_its_latest_occurrence():
    same_picture = "https://cdn.example/cat.png?ex=1&hm=2"
    messages = [
        message(1, "", attachments=(image(101, url=same_picture),)),
        message(
            2, "", author=BOB, attachments=(image(102, url="https://cdn.example/cat.png?ex=9"),)
        ),
        message(
            3, "", attachments=(image(103, content_hash="abc"), image(104, content_hash="abc"))
        ),
    ]

    plans = plan_media(simplify(messages).entries, media_window=80)

    assert [(shown_keys(plan), plan.repeated) for plan in plans] == [
        ([], 1),
        (["media_2"], 0),
        (["media_4"], 1),
    ]


def test_repeats_do_not_use_up_the_image_limit():
    messages = [
        message(1, "", attachments=(image(101, "a.png"),)),
        message(2, "", author=BOB, attachments=(image(102, "b.png"),)),
        message(
            3,
            "",
            attachments=(image(103, "a.png", url="https://cdn.example/attachments/101/a.png"),),
        ),
    ]

    plans = plan_media(simplify(messages).entries, media_window=80, image_message_limit=2)

    assert [shown_keys(plan) for plan in plans] == [[], ["media_2"], ["media_3"]]


def test_stickers_never_count_as_images():
    messages = [
        message(1, "", attachments=(gif(101),)),
        *[message(n, "", author=BOB, stickers=(Sticker(sf(60), "wave"),)) for n in range(2, 6)],
    ]

    plans = plan_media(simplify(messages).entries, media_window=80, image_message_limit=1)

    assert shown_keys(plans[0]) == ["media_1"]
    assert all(plan == EntryMedia() for plan in plans[1:])


def test_images_hashed_alike_are_one_picture_whatever_their_urls():
    # Each upload gets its own URL; the worker hashes the bytes (`with_attachment_hashes`).
    messages = [
        message(1, "", attachments=(image(101, url="https://cdn.example/a/cat.png"),)),
        message(2, "", author=BOB, attachments=(image(102, url="https://cdn.example/b/d.png"),)),
        message(3, "", attachments=(image(103, url="https://cdn.example/c/cat.png"),)),
    ]
    hashes = {sf(101): "cat", sf(102): "dog", sf(103): "cat"}

    unhashed = plan_media(simplify(messages).entries, media_window=80)
    hashed = plan_media(
        simplify([with_attachment_hashes(m, hashes) for m in messages]).entries, media_window=80
    )

    assert [plan.repeated for plan in unhashed] == [0, 0, 0]
    assert [(shown_keys(plan), plan.repeated) for plan in hashed] == [
        ([], 1),
        (["media_2"], 0),
        (["media_3"], 0),
    ]


def test_hashing_leaves_a_message_without_those_attachments_as_it_is():
    plain = message(1, "", attachments=(image(101),))

    assert with_attachment_hashes(plain, {sf(999): "x"}) is plain
    assert with_attachment_hashes(plain, {sf(101): "x"}).attachments[0].content_hash == "x"
