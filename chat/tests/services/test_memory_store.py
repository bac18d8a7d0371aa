"""The long-term memory store on the real database: writing (bounds, near duplicates,
privacy), forgetting, search, and what a turn may recall."""

from __future__ import annotations

import pytest
from django.test import override_settings

from chat.llm.embeddings import HashingEmbeddings
from chat.models import Memory
from chat.pipeline.recall import MemoryKind
from chat.pipeline.types import PrivacyLevel
from chat.services.memory_recall import memories_recall_for_turn, memory_search
from chat.services.memory_store import (
    MemoryRefused,
    MemoryScope,
    memories_embed_missing,
    memories_forget_user,
    memory_add,
    memory_forget,
    memory_update,
)
from chat.tests.privacy import user_privacy
from personas.config_schema import UserSpec
from personas.models import GuildConfig, Persona, UserPrivacy
from personas.services import user_privacy_save

pytestmark = pytest.mark.django_db

GUILD, OTHER_GUILD = 100, 200
ALICE, BOB = 11, 12
EMBEDDER = HashingEmbeddings()


def add(scope: MemoryScope, text: str, source: str = "command") -> str:
    return memory_add(scope=scope, text=text, source=source, embedder=EMBEDDER).outcome


def alice(guild: int = GUILD, member: str = "") -> MemoryScope:
    return MemoryScope.personal(guild, ALICE, member_id=member, name="Alice")


def test_a_personal_memory_is_kept_with_its_source_and_vector():
    write = memory_add(
        scope=alice(), text="  likes   green tea ", source="tool", message_id=5, embedder=EMBEDDER
    )

    memory = Memory.objects.get()
    assert write.outcome == "added" and write.memory == memory
    assert (memory.kind, memory.user_id, memory.text) == ("personal", ALICE, "likes green tea")
    assert (memory.source, memory.message_id, memory.subject_name) == ("tool", 5, "Alice")
    assert memory.embedding_model == EMBEDDER.name and len(bytes(memory.embedding)) == 64 * 4


def test_a_near_duplicate_updates_instead_of_adding():
    add(alice(), "Likes green tea.")
    assert add(alice(), "likes GREEN tea", "extraction") == "updated"
    assert add(alice(), "likes coffee") == "added"

    texts = sorted(Memory.objects.values_list("text", "source"))
    assert texts == [("likes GREEN tea", "extraction"), ("likes coffee", "command")]


@override_settings(MEMORY_PERSONAL_LIMIT=2, MEMORY_PERSONAL_MAX_CHARS=20)
def test_each_scope_is_bounded_in_count_and_length():
    add(alice(), "has a cat")
    add(alice(), "plays the oboe")
    with pytest.raises(MemoryRefused, match="Alice already has 2 memories"):
        add(alice(), "lives in Lyon")
    with pytest.raises(MemoryRefused, match="at most 20 characters"):
        add(MemoryScope.personal(GUILD, BOB), "x" * 21)
    add(alice(OTHER_GUILD), "lives in Lyon")  # another guild is another scope
    add(alice(member="lilya"), "loves rain")  # a proxied member's memories are the member's
    assert Memory.objects.count() == 4


@pytest.mark.parametrize("level", [PrivacyLevel.PARTIAL, PrivacyLevel.FULL])
def test_nothing_is_kept_about_a_private_user_in_that_guild_and_going_private_forgets(level):
    guild = GuildConfig.objects.create(guild_id=GUILD, name="g")
    add(alice(), "has a cat")
    add(alice(member="lilya"), "loves rain")
    add(alice(OTHER_GUILD), "lives in Lyon")
    add(MemoryScope.personal(GUILD, BOB), "plays bass")

    user_privacy_save(guild=guild, spec=UserSpec(id=str(ALICE), privacy=level))

    kept = Memory.objects.order_by("guild_id", "user_id").values_list("guild_id", "user_id")
    assert list(kept) == [(GUILD, BOB), (OTHER_GUILD, ALICE)]  # her privacy is per guild
    with pytest.raises(MemoryRefused, match="chose not to be remembered"):
        add(alice(), "has a dog")
    add(alice(OTHER_GUILD), "has a dog")


def test_minimal_privacy_keeps_memories():
    user_privacy(ALICE, guild_id=GUILD, level=PrivacyLevel.MINIMAL)
    add(alice(), "has a cat")
    UserPrivacy.objects.filter(user_id=ALICE).get().save()
    assert Memory.objects.count() == 1


def test_forgetting_one_all_or_a_user():
    add(alice(), "has a cat")
    add(alice(), "plays the oboe")
    add(alice(member="lilya"), "loves rain")
    add(alice(OTHER_GUILD), "lives in Lyon")
    cat = Memory.objects.get(text="has a cat")

    assert memory_forget(scope=MemoryScope.personal(GUILD, BOB), memory_id=cat.id) == 0
    assert memory_forget(scope=alice(), memory_id=cat.id) == 1
    assert memory_forget(scope=alice()) == 1
    assert memories_forget_user(guild_id=GUILD, user_id=ALICE) == 1  # the member's
    assert list(Memory.objects.values_list("text", flat=True)) == ["lives in Lyon"]


def test_an_edit_is_re_embedded_and_bounded():
    add(alice(), "has a cat")
    memory = Memory.objects.get()
    before = bytes(memory.embedding)
    memory_update(memory_id=memory.id, text="has two cats", embedder=EMBEDDER)
    memory.refresh_from_db()
    assert memory.text == "has two cats" and bytes(memory.embedding) != before
    with pytest.raises(MemoryRefused):
        memory_update(memory_id=memory.id, text="   ", embedder=EMBEDDER)


def test_search_ranks_the_guilds_memories_with_scores():
    add(alice(), "keeps two cats named Miso and Tofu")
    add(MemoryScope.personal(GUILD, BOB), "plays bass in a jazz band")
    add(MemoryScope.guild(GUILD), "movie night is every Friday")
    add(alice(OTHER_GUILD), "keeps a cat named Miso")

    found = memory_search(
        guild_id=GUILD, query="what are the cats called? Miso?", embedder=EMBEDDER
    )

    assert found[0].record.text == "keeps two cats named Miso and Tofu"
    assert all(memory.record.text != "keeps a cat named Miso" for memory in found)
    assert found[0].score > found[-1].score


@override_settings(MEMORY_RECALL_RELATIVE_PERCENT=0)  # who may be shown, not how many
def test_a_turn_recalls_only_the_personal_memories_of_people_in_its_window():
    persona = Persona.objects.create(
        guild=GuildConfig.objects.create(guild_id=GUILD, name="g"), name="Tomori"
    )
    add(alice(), "keeps two cats named Miso and Tofu")
    add(MemoryScope.personal(GUILD, BOB), "keeps a cat named Miso too")
    add(MemoryScope.guild(GUILD), "the cats of this server are famous")
    add(MemoryScope.persona(GUILD, persona.id), "promised a drawing of the cats Miso and Tofu")

    def recalled(people):
        return [
            (m.record.kind, m.record.subject)
            for m in memories_recall_for_turn(
                guild_id=GUILD,
                persona_id=persona.id,
                people=people,
                query="how are the cats Miso and Tofu?",
                token_budget=1000,
                count_tokens=len,
                embedder=EMBEDDER,
            )
        ]

    with_alice = recalled({(ALICE, ""): "Alice (now Ally)"})
    assert (MemoryKind.PERSONAL, "Alice (now Ally)") in with_alice
    assert {kind for kind, _ in with_alice} == {"personal", "guild", "persona"}
    assert all(subject != "" for kind, subject in with_alice if kind == "personal")
    without = recalled({})
    assert MemoryKind.PERSONAL not in {kind for kind, _ in without}
    assert {kind for kind, _ in without} == {"guild", "persona"}


def test_a_change_of_model_re_embeds_in_the_background_and_search_works_meanwhile():
    add(alice(), "keeps two cats named Miso and Tofu")
    add(MemoryScope.guild(GUILD), "movie night is every Friday")
    other = HashingEmbeddings(dimensions=32)  # "the model changed"

    # Meanwhile (more than a turn embeds on its own) they are found by their words.
    for n in range(40):
        add(MemoryScope.personal(GUILD, 1000 + n), f"fact number {n}")
    found = memory_search(guild_id=GUILD, query="Miso and Tofu", embedder=other)
    assert found[0].record.text == "keeps two cats named Miso and Tofu"
    assert found[0].vector == 0 and found[0].keyword > 0
    assert Memory.objects.filter(embedding_model=other.name).count() == 0

    assert memories_embed_missing(embedder=other) == 42
    assert set(Memory.objects.values_list("embedding_model", flat=True)) == {other.name}
    found = memory_search(guild_id=GUILD, query="Miso and Tofu", embedder=other)
    assert found[0].vector > 0


def test_the_search_index_follows_every_change_of_the_guilds_memories():
    guild = GuildConfig.objects.create(guild_id=GUILD, name="g")
    persona = Persona.objects.create(guild=guild, name="Tomori", system_prompt="x")

    def texts() -> set[str]:
        found = memory_search(guild_id=GUILD, query="Miso Tofu drawing", embedder=EMBEDDER)
        return {memory.record.text for memory in found}

    add(alice(), "keeps two cats named Miso and Tofu")
    add(MemoryScope.persona(GUILD, persona.id), "promised a drawing of Miso")
    assert texts() == {"keeps two cats named Miso and Tofu", "promised a drawing of Miso"}

    persona.delete()  # its memories go by cascade
    assert texts() == {"keeps two cats named Miso and Tofu"}
    memory_update(
        memory_id=Memory.objects.get().id, text="keeps a cat named Tofu", embedder=EMBEDDER
    )
    assert texts() == {"keeps a cat named Tofu"}
    Memory.objects.filter(guild_id=GUILD).delete()
    assert texts() == set()


def test_the_personas_answering_one_message_embed_its_question_once():
    guild = GuildConfig.objects.create(guild_id=GUILD, name="g")
    tomori = Persona.objects.create(guild=guild, name="Tomori")
    anon = Persona.objects.create(guild=guild, name="Anon")
    add(alice(), "keeps two cats named Miso and Tofu")
    asked: list[str] = []

    class Counting(HashingEmbeddings):
        def embed(self, texts):
            asked.extend(texts)
            return super().embed(texts)

    embedder = Counting(dimensions=48)  # a model of its own: nothing embedded before
    memories_embed_missing(embedder=embedder)
    asked.clear()
    for persona in (tomori, anon):
        [memory] = memories_recall_for_turn(
            guild_id=GUILD,
            persona_id=persona.id,
            people={(ALICE, ""): "Alice"},
            query="how are Miso and Tofu doing these days?",
            token_budget=1000,
            count_tokens=len,
            embedder=embedder,
        )
        assert memory.record.text == "keeps two cats named Miso and Tofu"

    assert asked == ["how are Miso and Tofu doing these days?"]
