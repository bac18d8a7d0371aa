"""Token counting: the real tokenizer, the labelled fallback, and the per-item cache."""

from __future__ import annotations

import gzip
from dataclasses import dataclass, field

import pytest

from chat.pipeline.items import ContextItem, ItemTag
from chat.pipeline.tokens import (
    O200K_RANKS,
    CharEstimateCounter,
    O200kTokenCounter,
    count_item_tokens,
    default_token_counter,
    read_o200k_ranks,
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
        # The counts below are o200k_base's, as bpe_openai 0.1.4 (the tokenizer this one
        # replaced) counts them too.
        ("東京の天気はどうですか？今日は晴れです。", 14),
        ("안녕하세요, 만나서 반갑습니다", 8),
        ("Привет, как дела?", 6),
        ("👨\u200d👩\u200d👧\u200d👦 🏳️\u200d🌈 👍🏽🔥", 22),
        ("def count(self, text: str) -> int:\n    return len(text)\n", 16),
        ("<@123456789012345678> **look** at ||this|| <:pog:555666777888999000>", 26),
        ("a" + " " * 40 + "b\n\n\n\t\t  \r\n", 6),
        ("I'M sure they'll say it's DON'T", 7),
        ("1234567 3.14159 2026-11-30", 15),
    ],
)
def test_o200k_counts_real_tokens_and_treats_special_tokens_as_text(text, tokens):
    assert O200kTokenCounter().count(text) == tokens


def test_the_shipped_ranks_are_the_whole_published_encoding():
    ranks = read_o200k_ranks()

    assert len(ranks) == 199_998
    assert sorted(ranks.values()) == list(range(199_998))


def test_damaged_ranks_are_refused_with_the_path(tmp_path):
    damaged = tmp_path / "o200k_base.tiktoken.gz"
    damaged.write_bytes(gzip.compress(gzip.decompress(O200K_RANKS.read_bytes())[:-20]))

    with pytest.raises(RuntimeError, match="not the published o200k_base encoding"):
        read_o200k_ranks(damaged)
    with pytest.raises(RuntimeError, match=r"cannot read the o200k_base ranks at .*missing"):
        read_o200k_ranks(tmp_path / "missing.gz")


@pytest.mark.parametrize(("text", "tokens"), [("", 0), ("abc", 1), ("abcd", 1), ("abcde", 2)])
def test_char_estimate_is_a_labelled_fallback(text, tokens):
    counter = CharEstimateCounter()

    assert counter.count(text) == tokens
    assert counter.name == "estimate:chars/4"


def test_default_counter_is_the_real_tokenizer():
    assert default_token_counter().name == "o200k_base"


def known_counts(items) -> dict[str, int]:
    return {i.text: i.tokens for i in items}


def test_a_warm_turn_counts_only_new_or_changed_items():
    counter = RecordingCounter()
    first_turn = count_item_tokens([item("one two", sf(1)), item("three", sf(2))], counter, {})
    counter.seen.clear()

    second_turn = [item("one two", sf(1)), item("three four", sf(2)), item("five", sf(3))]
    counted = count_item_tokens(second_turn, counter, known_counts(first_turn))

    assert counter.seen == ["three four", "five"]
    assert [i.tokens for i in counted] == [2, 2, 1]


def test_identical_items_in_one_turn_are_counted_once():
    counter = RecordingCounter()

    counted = count_item_tokens([item("same"), item("same")], counter, {})

    assert counter.seen == ["same"]
    assert [i.tokens for i in counted] == [1, 1]


def test_an_item_already_carrying_its_count_is_returned_as_is():
    counter = RecordingCounter()
    (counted,) = count_item_tokens([item("one two", sf(1))], counter, {})

    (again,) = count_item_tokens([counted], counter, known_counts([counted]))
    (stale,) = count_item_tokens([counted.with_tokens(7)], counter, known_counts([counted]))

    assert again is counted
    assert stale.tokens == 2
    assert counter.seen == ["one two"]
