"""Conversion at the gateway boundary: what it shares between messages."""

from __future__ import annotations

from chat.gateway.convert import shared_author
from chat.tests.factories import sf


def test_messages_by_the_same_author_share_one_author_object():
    first = shared_author(sf(1), "Alice", False, None, None)

    assert shared_author(sf(1), "Alice", False, None, None) is first
    assert shared_author(sf(1), "Alice (away)", False, None, None) is not first
    assert shared_author(sf(1), "Alice", False, None, None).display_name == "Alice"
    assert shared_author(sf(2), "Tomori", True, sf(3), "Tomori").persona_name == "Tomori"
