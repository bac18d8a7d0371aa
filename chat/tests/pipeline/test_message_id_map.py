"""Compact ids for snowflakes: numbering, idempotence, reverse lookup, strict keys."""

from __future__ import annotations

import pytest

from chat.pipeline.message_id_map import MessageIdMap
from chat.tests.factories import sf


@pytest.mark.parametrize(
    ("registrations", "expected_keys"),
    [
        ([("message", 1)], ["ref_1"]),
        ([("message", 1), ("message", 2), ("message", 1)], ["ref_1", "ref_2", "ref_1"]),
        ([("media", 5), ("message", 1), ("media", 6)], ["media_1", "ref_1", "media_2"]),
        ([("message", 3), ("media", 3), ("message", 3)], ["ref_1", "media_1", "ref_1"]),
    ],
)
def test_keys_are_numbered_from_one_per_namespace_and_idempotent(registrations, expected_keys):
    id_map = MessageIdMap()
    register = {"message": id_map.register_message, "media": id_map.register_media}

    keys = [register[namespace](sf(n)) for namespace, n in registrations]

    assert keys == expected_keys


def test_reverse_lookup_returns_the_snowflake_and_none_for_unissued_keys():
    id_map = MessageIdMap()
    id_map.register_message(sf(10))
    id_map.register_media(sf(20))

    assert id_map.resolve("ref_1") == sf(10)
    assert id_map.resolve("media_1") == sf(20)
    assert id_map.resolve("ref_2") is None
    assert id_map.resolve("ref_01") is None
    assert id_map.message_key(sf(10)) == "ref_1"
    assert id_map.message_key(sf(20)) is None


def test_as_mapping_is_read_only_in_issue_order_per_namespace():
    id_map = MessageIdMap()
    id_map.register_message(sf(2))
    id_map.register_media(sf(9))
    id_map.register_message(sf(1))

    mapping = id_map.as_mapping()

    assert list(mapping.items()) == [("ref_1", sf(2)), ("ref_2", sf(1)), ("media_1", sf(9))]
    assert len(id_map) == 3
    with pytest.raises(TypeError):
        mapping["ref_3"] = 1  # type: ignore[index]


@pytest.mark.parametrize(
    ("text", "is_key"),
    [
        ("ref_1", True),
        ("ref_42", True),
        ("media_7", True),
        ("ref_1x", False),
        ("ref_0", False),
        ("ref_01", False),
        ("ref_", False),
        ("ref_-1", False),
        ("REF_1", False),
        (" ref_1", False),
        ("ref_1 ", False),
        ("refs_1", False),
        ("media1", False),
        ("image_1", False),
    ],
)
def test_key_syntax_is_strict(text, is_key):
    assert MessageIdMap.is_key(text) is is_key
