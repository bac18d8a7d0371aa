"""Long-term memory recall (`chat.pipeline.recall`): hybrid ranking with hand-made vectors,
who may be recalled, the token budget, near duplicates, and where the prompt shows them."""

from __future__ import annotations

import numpy as np
import pytest

from chat.pipeline.context import build_turn_context
from chat.pipeline.items import ItemTag
from chat.pipeline.recall import (
    MEMORY_HEADER,
    MemoryKind,
    MemoryRecord,
    RecallScope,
    RecallWeights,
    build_memory_index,
    keyword_scores,
    memory_line,
    names_someone_else,
    near_duplicate,
    recall,
    recall_query,
    still_remembered,
    terms,
)
from chat.pipeline.types import ContextNote
from chat.tests import factories
from chat.tests.factories import message, reply_to, sf, turn_input

ALICE, BOB, CAROL = 1, 2, 3


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def personal(memory_id: int, user_id: int, text: str, member_id: str = "") -> MemoryRecord:
    return MemoryRecord(
        id=memory_id,
        kind=MemoryKind.PERSONAL,
        text=text,
        user_id=user_id,
        member_id=member_id,
        subject={ALICE: "Alice", BOB: "Bob", CAROL: "Carol"}.get(user_id, "Lilya"),
    )


RECORDS = [
    personal(1, ALICE, "Alice keeps two cats named Miso and Tofu"),
    personal(2, BOB, "Bob plays bass in a jazz band"),
    MemoryRecord(id=3, kind=MemoryKind.GUILD, text="Movie night is every Friday"),
    MemoryRecord(id=4, kind=MemoryKind.PERSONA, text="promised to write a haiku", persona_id=7),
    MemoryRecord(id=5, kind=MemoryKind.PERSONA, text="owes Bob a song", persona_id=8),
]
VECTORS = np.stack(
    [unit(1, 0, 0, 0), unit(0, 1, 0, 0), unit(0, 0, 1, 0), unit(0, 0, 0, 1), unit(0, 1, 0, 1)]
)
INDEX = build_memory_index(RECORDS, VECTORS)
EVERYONE = RecallScope(persona_id=7, people=frozenset({(ALICE, ""), (BOB, ""), (CAROL, "")}))


def ranked(**kwargs) -> list[int]:
    options = {"k": 5, "min_score": 0.1, "scope": EVERYONE, "query_vector": None} | kwargs
    return [memory.record.id for memory in recall(INDEX, **options)]


def test_the_vector_alone_finds_a_paraphrase_with_no_shared_word():
    assert ranked(query="any pets at home?", query_vector=unit(1, 0.1, 0, 0))[:1] == [1]


def test_keywords_alone_find_a_rare_word():
    keyword_only = RecallWeights(vector=0, keyword=1)
    assert ranked(query="who knows Miso?", weights=keyword_only) == [1]


def test_hybrid_score_is_the_weighted_sum_of_its_parts():
    [best, *_] = recall(
        INDEX, query="bass band", query_vector=unit(0, 1, 0, 0), scope=EVERYONE, k=1, min_score=0
    )
    weights = RecallWeights()
    assert best.record.id == 2
    assert best.vector == pytest.approx(1.0)
    assert 0.5 < best.keyword <= 1.0
    assert best.score == pytest.approx(
        weights.vector * best.vector + weights.keyword * best.keyword
    )
    assert "keyword" in best.why and "who is in the window" in best.why


def test_nothing_under_the_minimum_score_is_recalled():
    assert ranked(query="weather tomorrow", query_vector=unit(-1, -1, -1, -1), min_score=0.2) == []


@pytest.mark.parametrize(
    ("people", "expected"),
    [
        (frozenset({(ALICE, "")}), {1, 3, 4}),
        (frozenset({(BOB, "")}), {2, 3, 4}),
        (frozenset(), {3, 4}),
        (frozenset({(ALICE, "lilya")}), {3, 4}),  # a proxied member is not their account
    ],
)
def test_personal_memories_only_of_people_in_the_window_and_only_this_personas_own(
    people, expected
):
    scope = RecallScope(persona_id=7, people=people)
    got = recall(INDEX, query="", query_vector=unit(1, 1, 1, 1), scope=scope, k=9, min_score=0)
    assert {memory.record.id for memory in got} == expected


def test_a_proxied_members_memories_belong_to_the_member():
    records = [personal(1, ALICE, "likes tea"), personal(2, ALICE, "likes rain", "lilya")]
    index = build_memory_index(records, np.stack([unit(1, 0), unit(1, 0)]))
    scope = RecallScope(persona_id=None, people=frozenset({(ALICE, "lilya")}))
    got = recall(index, query="likes", query_vector=unit(1, 0), scope=scope, k=5, min_score=0)
    assert [m.record.id for m in got] == [2]


def test_top_k_and_the_token_budget_bound_what_is_recalled():
    query = {"query": "", "query_vector": unit(1, 1, 1, 1), "min_score": 0}
    assert len(ranked(k=2, **query)) == 2
    lines = {record.id: memory_line(record) for record in RECORDS}
    budget = len(lines[1]) + len(lines[2])
    got = recall(INDEX, scope=EVERYONE, k=5, token_budget=budget, count_tokens=len, **query)
    assert sum(memory.tokens for memory in got) <= budget
    assert {memory.record.id for memory in got} < {1, 2, 3, 4}


def test_keyword_scores_stay_between_zero_and_one_and_ignore_stop_words():
    scores = keyword_scores(INDEX, "what are the cats Miso and Tofu", RecallWeights())
    assert scores.max() <= 1.0 and scores[0] == pytest.approx(scores.max())
    assert keyword_scores(INDEX, "what is it", RecallWeights()).max() == 0
    assert terms("Cats playing") == ["cat", "play"]


def test_words_every_question_uses_match_nothing():
    # "called" and "again" are in the question and the gym fact alike; the dog is the question.
    index = build_memory_index(
        [personal(1, ALICE, "I started bouldering at a gym called Crux")], None, dimensions=2
    )
    assert keyword_scores(index, "what's my dog called again?", RecallWeights()).max() == 0
    assert terms("Remind me, what's it called again? Thanks!") == []


def test_a_text_matching_one_word_of_several_asked_scores_a_share_of_it():
    index = build_memory_index(
        [personal(1, ALICE, "Alice keeps two cats"), personal(2, ALICE, "Alice sings jazz")],
        None,
        dimensions=2,
    )
    [whole, _] = keyword_scores(index, "cats", RecallWeights())
    [partly, _] = keyword_scores(index, "cats, dinosaurs and volcanoes", RecallWeights())
    assert whole == pytest.approx(1.0, abs=0.01)
    assert 0.05 < partly < 0.35


def test_only_memories_near_the_best_score_are_shown():
    records = [personal(n, ALICE, f"fact {n}") for n in (1, 2, 3)]
    index = build_memory_index(records, np.stack([unit(1, 0), unit(0.9, 0.44), unit(0.5, 0.87)]))
    scope = RecallScope(persona_id=None, people=frozenset({(ALICE, "")}))
    weights = RecallWeights(vector=1, keyword=0)
    shown = recall(
        index, query="", query_vector=unit(1, 0), scope=scope, k=5, min_score=0.1, weights=weights
    )
    near = recall(
        index,
        query="",
        query_vector=unit(1, 0),
        scope=scope,
        k=5,
        min_score=0.1,
        relative=0.8,
        weights=weights,
    )
    assert [m.record.id for m in shown] == [1, 2, 3]
    assert [m.record.id for m in near] == [1, 2]  # 0.9 and 0.5 of the best 1.0


def test_the_query_is_the_trigger_and_the_message_it_replies_to_without_the_persona_name():
    asked = message(1, "we're getting thai tonight", author=factories.ALICE)
    chatter = message(2, "lol", author=factories.BOB, minutes=1)
    trigger = message(3, "Tomori, anything I should avoid?", minutes=2, reference=reply_to(1))
    hidden = frozenset({factories.BOB.id})

    assert recall_query(trigger, asked, hidden=frozenset(), addressing=["tomori"]) == (
        "we're getting thai tonight\nanything I should avoid?"
    )
    assert recall_query(trigger, None, hidden=frozenset(), addressing=["Tomori", "tomo"]) == (
        "anything I should avoid?"
    )
    assert recall_query(trigger, chatter, hidden=hidden) == "Tomori, anything I should avoid?"


def test_a_line_an_earlier_turn_showed_is_kept_only_while_its_memory_is_unchanged():
    cats = personal(1, ALICE, "Alice keeps two cats")
    line = memory_line(cats)
    kept = build_memory_index([cats], None, dimensions=2)
    edited = build_memory_index([personal(1, ALICE, "Alice keeps three cats")], None, dimensions=2)
    forgotten = build_memory_index([], None, dimensions=2)

    assert still_remembered(kept, cats.key, line)
    assert not still_remembered(edited, cats.key, line)
    assert not still_remembered(forgotten, cats.key, line)


def test_near_duplicates_are_found_by_words_or_by_vector():
    existing = [(10, "Likes green tea.", unit(1, 0.1)), (11, "likes coffee", unit(0, 1))]
    assert near_duplicate("likes GREEN tea", None, existing, min_similarity=0.9) == 10
    assert near_duplicate("enjoys green tea", unit(1, 0.12), existing, min_similarity=0.9) == 10
    assert near_duplicate("likes jazz", unit(1, 1), existing, min_similarity=0.9) is None


def test_recalled_memories_follow_the_dialogue_and_leave_the_cacheable_prefix_alone():
    history = [message(1, "hi"), message(2, "tell me about cats", minutes=1)]
    without = build_turn_context(turn_input(history))
    recalled = build_turn_context(turn_input(history, memories=("About Alice: has two cats",)))

    [memory] = [item for item in recalled.items if item.tag is ItemTag.MEMORY]
    tags = [item.tag for item in recalled.items]
    newest_entry = max(n for n, tag in enumerate(tags) if tag is ItemTag.DIALOGUE_HISTORY)
    assert tags.index(ItemTag.MEMORY) > newest_entry
    assert memory.text == f"[System: {MEMORY_HEADER}\n- About Alice: has two cats]"
    assert recalled.cacheable_prefix_end == without.cacheable_prefix_end
    assert (
        recalled.items[: recalled.cacheable_prefix_end]
        == without.items[: without.cacheable_prefix_end]
    )


def test_recalled_memories_go_where_the_cached_prefix_ends_and_stay_there_in_later_turns():
    alice_cats = ("About Alice: has two cats",)
    history = [message(1, "tomori, tell me about cats")]
    before = build_turn_context(turn_input(history, memories=alice_cats))
    assert before.memories_after == sf(1)
    history += [
        message(2, "They purr.", author=factories.TOMORI, minutes=1),
        message(3, "tomori, and dogs?", author=factories.BOB, minutes=2),
    ]
    after = build_turn_context(turn_input(history, memories_shown={sf(1): (alice_cats,)}))

    [shown] = [item for item in after.items if item.tag is ItemTag.MEMORY_SHOWN]
    [recalled] = [item for item in before.items if item.tag is ItemTag.MEMORY]
    assert shown.text == recalled.text
    first_entry = next(n for n, i in enumerate(after.items) if i.tag is ItemTag.DIALOGUE_HISTORY)
    assert after.items[first_entry + 1] == shown
    assert not any(item.tag is ItemTag.MEMORY for item in after.items)
    # The second request repeats the first up to and past the memories it showed.
    assert after.cacheable_prefix_end > first_entry + 1
    repeated = [item.text for item in before.items[: first_entry + 2]]
    assert [item.text for item in after.items[: first_entry + 2]] == repeated


def test_recalled_memories_come_before_the_first_note_placed_at_a_depth():
    history = [
        message(1, "hi"),
        message(2, "hello", author=factories.BOB, minutes=1),
        message(3, "tell me about cats", minutes=2),
    ]
    note = ContextNote(text="Be brief.", depth=1)
    context = build_turn_context(
        turn_input(history, channel_note=note, memories=("About Alice: has two cats",))
    )

    tags = [item.tag for item in context.items]
    memory = tags.index(ItemTag.MEMORY)
    assert tags[memory + 1] is ItemTag.CONTEXT_NOTE_INJECTION
    assert context.memories_after == sf(2)
    assert context.cacheable_prefix_end == memory


def test_memories_follow_the_last_entry_while_the_conversation_is_shorter_than_a_notes_depth():
    history = [message(1, "hi"), message(2, "tell me about cats", author=factories.BOB, minutes=1)]
    note = ContextNote(text="Be brief.", depth=4)
    context = build_turn_context(
        turn_input(history, channel_note=note, memories=("About Alice: has two cats",))
    )

    tags = [item.tag for item in context.items]
    entries = [n for n, tag in enumerate(tags) if tag is ItemTag.DIALOGUE_HISTORY]
    assert tags.index(ItemTag.CONTEXT_NOTE_INJECTION) < entries[0]
    assert tags.index(ItemTag.MEMORY) == entries[-1] + 1
    assert context.memories_after == sf(2)  # the next turns keep them there


@pytest.mark.parametrize(
    ("fact", "author", "expected"),
    [
        ("Alice hates the oboe", "Bob", "Alice"),
        ("Bob says Alice hates the oboe", "Bob", None),
        ("plays the oboe", "Bob", None),
        ("Mary Jane likes tea", "Bob", "Mary Jane"),
        ("Mary likes tea", "Bob", None),  # "Mary Jane" is not named by "Mary" alone
    ],
)
def test_a_personal_fact_naming_someone_else_is_found(fact, author, expected):
    others = ["Alice", "Bob", "Mary Jane", "Tomori"]
    assert names_someone_else(fact, author=author, others=others) == expected


def test_the_people_evaluation_asks_in_words_its_facts_do_not_use():
    from benchmarks.recall_people import CHATTER, FACTS, QUESTIONS, content_words

    assert len(FACTS) >= 10 and sum(len(facts) for facts in FACTS.values()) >= 100
    assert len(QUESTIONS) == 50 and len(set(QUESTIONS)) == 50
    assert {person for person, _ in CHATTER} == set(FACTS)
    for question in QUESTIONS:
        said = [question.ask, *question.lead]
        assert question.reply_to is None or 0 <= question.reply_to < len(question.lead)
        shared = set().union(*map(content_words, said)) & content_words(question.fact_text)
        assert not shared, (question, shared)
    assert content_words("Tomori, she was swimming; I swim") == {"swim"}
