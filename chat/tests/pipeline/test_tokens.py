"""Token counting: the real tokenizer, the labelled fallback, and the per-item cache."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from chat.pipeline.items import ContextItem, ItemTag
from chat.pipeline.tokens import (
    CharEstimateCounter,
    O200kTokenCounter,
    count_item_tokens,
    default_token_counter,
    token_cache_key,
)
from chat.pipeline.types import Role
from chat.tests.factories import sf


@dataclass
class RecordingCounter:
    """Counts words and records every text it was asked to count."""

    name: str = "words"
    seen: list[str] = field(default_factory=list)

    def count(self, text: str) -> int:
        self.seen.append(text)
        return len(text.split())


def item(text: str, *ids: int) -> ContextItem:
    return ContextItem(ItemTag.DIALOGUE_HISTORY, Role.USER, text, source_ids=ids)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", 0),
        ("hello world", 2),
        ("Alice: [ref_1] hello", 8),
        ("<|endoftext|>", 7),
    ],
)
def test_o200k_counts_real_tokens_and_treats_special_tokens_as_text(text, tokens):
    assert O200kTokenCounter().count(text) == tokens


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("abc", 1), ("abcd", 1), ("abcde", 2)])
def test_char_estimate_is_a_labelled_fallback(text, tokens):
    counter = CharEstimateCounter()

    assert counter.count(text) == tokens
    assert counter.name == "estimate:chars/4"


def test_default_counter_is_the_real_tokenizer():
    assert default_token_counter().name == "o200k_base"


def test_a_warm_turn_counts_only_new_or_changed_items():
    counter = RecordingCounter()
    first_turn = [item("one two", sf(1)), item("three", sf(2))]
    _, cache = count_item_tokens(first_turn, counter, {})
    counter.seen.clear()

    second_turn = [item("one two", sf(1)), item("three four", sf(2)), item("five", sf(3))]
    counted, next_cache = count_item_tokens(second_turn, counter, cache)

    assert counter.seen == ["three four", "five"]
    assert [i.tokens for i in counted] == [2, 2, 1]
    assert set(next_cache) == {token_cache_key(i) for i in second_turn}


def test_identical_items_in_one_turn_are_counted_once():
    counter = RecordingCounter()

    counted, cache = count_item_tokens([item("same"), item("same")], counter, {})

    assert counter.seen == ["same"]
    assert [i.tokens for i in counted] == [1, 1]
    assert len(cache) == 1


def test_cache_key_is_ids_and_a_stable_text_digest():
    assert token_cache_key(item("hello", sf(1), sf(2))) == (
        (sf(1), sf(2)),
        "a7b6eda801e5347d",
    )
