"""The memories screen: moderators read and search (scores shown), admins add, edit and delete;
the same store and ranking as turns."""

from __future__ import annotations

import pytest
from django.urls import reverse

from chat.llm.embeddings import HashingEmbeddings
from chat.models import Memory, Turn
from chat.services.memory_store import MemoryScope, memory_add
from personas.models import Persona

pytestmark = pytest.mark.django_db

ALICE, BOB = 1300000000000000101, 1300000000000000102


@pytest.fixture
def remembered(guild) -> dict[str, Memory]:
    embedder = HashingEmbeddings()
    tomori = Persona.objects.get(guild=guild, name="Tomori")
    turn = Turn.objects.create(
        channel_id=1, guild_id=guild.guild_id, persona_name="Tomori", reason="extraction"
    )

    def add(scope, text, **kw):
        return memory_add(scope=scope, text=text, source="command", embedder=embedder, **kw).memory

    return {
        "cat": add(
            MemoryScope.personal(guild.guild_id, ALICE, name="Alice"),
            "Alice's cat is called Miso",
            turn_id=turn.id,
        ),
        "bass": add(MemoryScope.personal(guild.guild_id, BOB, name="Bob"), "Bob plays bass"),
        "movie": add(MemoryScope.guild(guild.guild_id), "Movie night is on Friday"),
        "haiku": add(MemoryScope.persona(guild.guild_id, tomori.id), "promised Bob a haiku"),
    }


def url(guild, name="memory_list", **kw):
    return reverse(f"dashboard:{name}", kwargs={"guild_id": guild.guild_id, **kw})


def test_moderators_see_every_memory_with_its_source_and_no_edit_controls(
    guild, remembered, moderator_client
):
    html = moderator_client.get(url(guild)).content.decode()
    for memory in remembered.values():
        assert memory.text.replace("'", "&#x27;") in html
    assert f'href="/turns/{remembered["cat"].turn_id}/"' in html
    assert "<textarea" not in html and "Delete</button>" not in html


def test_search_ranks_with_scores_and_filters_by_person_or_persona(
    guild, remembered, moderator_client
):
    html = moderator_client.get(url(guild), {"q": "what is the cat called? Miso"}).content.decode()
    assert html.index("Alice&#x27;s cat is called Miso") < html.index("Bob plays bass")
    assert "(kw " in html and "vec " in html  # the scores are shown
    assert html.count('<td class="score">') == 4  # every memory, ranked

    only_bob = moderator_client.get(url(guild), {"user": str(BOB)}).content.decode()
    assert "Bob plays bass" in only_bob and "Miso" not in only_bob
    tomori = Persona.objects.get(guild=guild, name="Tomori")
    own = moderator_client.get(url(guild), {"persona": str(tomori.id)}).content.decode()
    assert "promised Bob a haiku" in own and "Bob plays bass" not in own


def test_admins_add_edit_and_delete(guild, remembered, admin_client):
    response = admin_client.post(
        url(guild), {"kind": "personal", "user_id": str(ALICE), "text": "Alice sings alto"}
    )
    assert response.status_code == 302
    added = Memory.objects.get(text="Alice sings alto")
    assert (added.user_id, added.source) == (ALICE, "admin")

    cat = remembered["cat"]
    admin_client.post(url(guild, "memory_edit", memory_id=cat.id), {"text": "Miso is a tabby"})
    cat.refresh_from_db()
    assert cat.text == "Miso is a tabby"

    admin_client.post(url(guild, "memory_delete", memory_id=cat.id))
    assert not Memory.objects.filter(id=cat.id).exists()


def test_a_refused_memory_is_explained_and_nothing_is_saved(guild, admin_client):
    response = admin_client.post(url(guild), {"kind": "personal", "user_id": "", "text": "x"})
    assert response.status_code == 400
    assert "give the person&#x27;s Discord user id" in response.content.decode()
    response = admin_client.post(url(guild), {"kind": "guild", "text": "y" * 600})
    assert response.status_code == 400 and "at most 512 characters" in response.content.decode()
    assert Memory.objects.count() == 0


def test_moderators_cannot_change_memories(guild, remembered, moderator_client):
    cat = remembered["cat"]
    assert moderator_client.post(url(guild), {"kind": "guild", "text": "x"}).status_code == 403
    edit = url(guild, "memory_edit", memory_id=cat.id)
    assert moderator_client.post(edit, {"text": "hijacked"}).status_code == 403
    delete = url(guild, "memory_delete", memory_id=cat.id)
    assert moderator_client.post(delete).status_code == 403
    cat.refresh_from_db()
    assert cat.text == "Alice's cat is called Miso"


def test_an_extraction_turn_shows_what_it_stored_and_refused(guild, moderator_client):
    turn = Turn.objects.create(
        channel_id=1,
        guild_id=guild.guild_id,
        persona_name="Tomori",
        reason="extraction",
        status="replied",
        reason_detail={
            "stored": [
                {"about": "Alice", "fact": "Alice sings", "memory_id": 3, "outcome": "added"}
            ],
            "refused": [
                {"about": "Dave", "fact": "Dave hums", "why": "names nobody of this conversation"}
            ],
        },
    )
    html = moderator_client.get(reverse("dashboard:turn", args=[turn.id])).content.decode()
    assert "Memory extraction" in html
    assert "Alice sings" in html and "(about Alice, added, memory 3)" in html
    assert "Dave hums" in html and "names nobody of this conversation" in html
    listed = moderator_client.get(url(guild)).content.decode()
    assert f'href="/turns/{turn.id}/"' in listed and "1 stored · 1 refused" in listed
