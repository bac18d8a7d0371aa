"""The names kept from the gateway: inserted or replaced in one write, never for a user with
full privacy."""

from __future__ import annotations

import pytest

from chat.models import DiscordName
from chat.services.discord_names import BATCH, NameRecord, names_record
from chat.tests.privacy import user_privacy

pytestmark = pytest.mark.django_db

GUILD, GENERAL, ALICE, BOB = 10, 20, 30, 31


def _names() -> dict[tuple[str, int], str]:
    return {(n.kind, n.discord_id): n.name for n in DiscordName.objects.all()}


def test_names_are_inserted_then_replaced_and_the_last_of_a_batch_wins():
    names_record(
        names=[
            NameRecord("guild", GUILD, "Café"),
            NameRecord("channel", GENERAL, "general", guild_id=GUILD),
            NameRecord("user", ALICE, "Alice", guild_id=GUILD),
            NameRecord("user", ALICE, "Ally", guild_id=GUILD),
        ]
    )
    names_record(names=[NameRecord("channel", GENERAL, "lobby", guild_id=GUILD)])
    assert _names() == {
        ("guild", GUILD): "Café",
        ("channel", GENERAL): "lobby",
        ("user", ALICE): "Ally",
    }


def test_a_user_with_full_privacy_is_never_stored_and_loses_an_older_name():
    names_record(names=[NameRecord("user", ALICE, "Alice"), NameRecord("user", BOB, "Bob")])
    user_privacy(ALICE, guild_id=GUILD, level="full")
    stored = names_record(names=[NameRecord("channel", GENERAL, "general")])
    assert stored == 1
    assert names_record(names=[NameRecord("user", ALICE, "Alice again")]) == 0
    assert _names() == {("user", BOB): "Bob", ("channel", GENERAL): "general"}


def test_long_names_are_cut_and_large_guilds_are_written_in_batches():
    members = [NameRecord("user", 1000 + n, f"member {n}") for n in range(BATCH * 2 + 3)]
    assert names_record(names=[*members, NameRecord("guild", GUILD, "x" * 150)]) == BATCH * 2 + 4
    assert DiscordName.objects.filter(kind="user").count() == BATCH * 2 + 3
    assert len(DiscordName.objects.get(kind="guild").name) == 100
