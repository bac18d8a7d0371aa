"""Token counting (DESIGN §5, "Budget").

Counts come from a real tokenizer behind the small `TokenCounter` protocol: `O200kTokenCounter`
uses the o200k_base encoding from ``bpe_openai``, which ships its data (no download at run time)
and is loaded on first use, once per process. `CharEstimateCounter` (characters / 4) exists only
as a clearly labelled fallback for when that library is missing.

Counting is the one costly step of a build, so counts are cached by text: `count_item_tokens`
takes the previous turn's cache and returns this turn's. A warm turn counts only what is new or
re-rendered; an item it reuses keeps its text object, whose hash Python has already computed,
so looking it up costs no hashing either.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from chat.pipeline.items import ContextItem

if TYPE_CHECKING:
    from bpe_openai import Encoding


class TokenCounter(Protocol):
    """Counts the tokens of a text. ``name`` says which tokenizer, for turn records."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


class O200kTokenCounter:
    """The o200k_base encoding (GPT-4o family), counted offline.

    Special-token text such as ``<|endoftext|>`` typed by a user is counted as ordinary text.
    """

    name = "o200k_base"

    def count(self, text: str) -> int:
        return len(_o200k_encoding().encode_ordinary(text))


class CharEstimateCounter:
    """Fallback estimate: one token per four characters, rounded up. Not a tokenizer."""

    name = "estimate:chars/4"

    def count(self, text: str) -> int:
        return (len(text) + 3) // 4


def default_token_counter() -> TokenCounter:
    """`O200kTokenCounter` when ``bpe_openai`` is installed, else the labelled estimate."""
    try:
        _o200k_encoding()
    except ImportError:
        return CharEstimateCounter()
    return O200kTokenCounter()


@functools.cache
def _o200k_encoding() -> Encoding:
    with warnings.catch_warnings():
        # bpe_openai 0.1.4 reads its bundled data through a deprecated importlib.resources call.
        warnings.simplefilter("ignore", DeprecationWarning)
        import bpe_openai

        return bpe_openai.get_encoding("o200k_base")


def count_item_tokens(
    items: Sequence[ContextItem],
    counter: TokenCounter,
    cache: Mapping[str, int],
) -> tuple[tuple[ContextItem, ...], dict[str, int]]:
    """Fill in every item's ``tokens``.

    Args:
        items: Items to count; their current ``tokens`` are replaced by the count.
        counter: The tokenizer. A cache must only ever be used with one counter.
        cache: Counts from the previous turn by text (may be empty).

    Returns:
        The items with counts (an item already carrying its count is returned as is), and
        the cache for the next turn: exactly this turn's texts, so it never outgrows one
        prompt. Counts cover item text only; per-message framing and images are left to the
        budget's 10 % margin.
    """
    counted: list[ContextItem] = []
    next_cache: dict[str, int] = {}
    for item in items:
        text = item.text
        tokens = cache.get(text)
        if tokens is None:
            tokens = next_cache.get(text)
        if tokens is None:
            tokens = counter.count(text)
        next_cache[text] = tokens
        counted.append(item if item.tokens == tokens else item.with_tokens(tokens))
    return tuple(counted), next_cache
