"""Memory extraction's pure parts: the request, the validated answer, whom a fact is about."""

from __future__ import annotations

import pytest

from chat.pipeline.extraction import (
    MAX_FACTS,
    ExtractionError,
    build_extraction_messages,
    parse_extraction,
    resolve_subject,
)


def test_the_request_lists_the_people_the_known_facts_and_the_conversation():
    [system, user] = build_extraction_messages(
        conversation=["Alice: [ref_1] I play the oboe"],
        people=["Alice", "Bob"],
        known=["Bob has a cat"],
    )
    assert system["role"] == "system" and "JSON only" in system["content"]
    assert user["content"] == (
        "People in the conversation: Alice, Bob\n\n"
        "Already remembered (do not repeat):\n- Bob has a cat\n\n"
        "The conversation:\nAlice: [ref_1] I play the oboe"
    )


@pytest.mark.parametrize(
    "text",
    [
        '{"facts": [{"about": "Alice", "fact": "Alice plays the oboe"}]}',
        '```json\n{"facts": [{"about": "Alice", "fact": "Alice plays the oboe"}]}\n```',
        '{"facts": [{"about": " Alice ", "fact": "Alice plays the oboe", "confidence": 1}]}',
    ],
)
def test_a_valid_answer_is_read(text):
    [fact] = parse_extraction(text).facts
    assert (fact.about, fact.fact) == ("Alice", "Alice plays the oboe")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("Alice plays the oboe", "not JSON"),
        ('{"facts": [{"about": "Alice"}]}', "facts.0.fact: Field required"),
        ('{"facts": [{"about": "", "fact": "x"}]}', "facts.0.about"),
        ('{"facts": "none"}', "facts: Input should be a valid list"),
        (
            '{"facts": [' + ",".join(['{"about": "a", "fact": "b"}'] * (MAX_FACTS + 1)) + "]}",
            "facts: List should have at most",
        ),
    ],
)
def test_an_answer_of_another_shape_is_refused_naming_where(text, problem):
    with pytest.raises(ExtractionError, match=problem):
        parse_extraction(text)


def test_the_subject_is_a_person_of_the_conversation_by_name_in_any_case():
    people = {"Alice": (1, ""), "Lilya": (1, "lilya")}
    assert resolve_subject("alice", people) == (1, "")
    assert resolve_subject("LILYA", people) == (1, "lilya")
    assert resolve_subject("Dave", people) is None
