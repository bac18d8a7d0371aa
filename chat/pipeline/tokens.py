"""Token counting (DESIGN §5, "Budget").

Counts come from a real tokenizer behind the small `TokenCounter` protocol: `O200kTokenCounter`
uses tiktoken with the o200k_base ranks shipped in ``data/`` (no download at run time), loaded on
first use, once per process. `CharEstimateCounter` (characters / 4) exists only as a clearly
labelled fallback for when tiktoken is missing.

Counting is the one costly step of a build, so a warm turn counts only what is new or
re-rendered: `count_item_tokens` takes the counts already known by text (the previous turn's
items). An item the turn reuses keeps its text object, whose hash Python has already computed,
so looking it up costs no hashing either.
"""

from __future__ import annotations

import base64
import functools
import gzip
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from chat.pipeline.items import ContextItem

if TYPE_CHECKING:
    from tiktoken import Encoding


class TokenCounter(Protocol):
    """Counts the tokens of a text. ``name`` says which tokenizer, for turn records."""

    @property
    def name(self) -> str: ...

    def count(self, text: str) -> int: ...


O200K_RANKS = Path(__file__).parent / "data" / "o200k_base.tiktoken.gz"
"""OpenAI's published ``o200k_base.tiktoken`` (one ``base64(token bytes) rank`` per line),
gzipped. Taken from the file ``bpe-openai`` 0.1.4 bundles; its content is byte for byte the
file tiktoken downloads, which `O200K_SHA256` checks on every load."""

O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
"""The SHA-256 tiktoken pins for ``o200k_base.tiktoken`` (``tiktoken_ext/openai_public.py``)."""

O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
"""o200k_base's pre-tokenizer: the pattern tiktoken publishes for the encoding."""

O200K_SPECIAL_TOKENS = {"<|endoftext|>": 199_999, "<|endofprompt|>": 200_018}


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
    """`O200kTokenCounter` when tiktoken is installed, else the labelled estimate.

    Raises:
        RuntimeError: tiktoken is installed but the shipped ranks are missing or damaged.
    """
    try:
        _o200k_encoding()
    except ImportError:
        return CharEstimateCounter()
    return O200kTokenCounter()


def read_o200k_ranks(path: Path = O200K_RANKS) -> dict[bytes, int]:
    """The o200k_base merge ranks: token bytes → rank, 199,998 of them.

    Raises:
        RuntimeError: the file is missing, or its content is not the published encoding.
    """
    try:
        data = gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as error:
        raise RuntimeError(f"cannot read the o200k_base ranks at {path}: {error}") from error
    if hashlib.sha256(data).hexdigest() != O200K_SHA256:
        raise RuntimeError(f"{path} is not the published o200k_base encoding (SHA-256 differs)")
    ranks: dict[bytes, int] = {}
    for line in data.splitlines():
        token, rank = line.split()
        ranks[base64.b64decode(token)] = int(rank)
    return ranks


@functools.cache
def _o200k_encoding() -> Encoding:
    """tiktoken's o200k_base, built from the shipped ranks: about 50 MB resident in the
    worker, where ``bpe_openai``'s o200k (which this replaced) held 134 MB.

    tiktoken's `Encoding` keeps the ranks dict only to pickle itself, which is never done here;
    its Rust core holds its own copy, so the dict is released once built (28 MB of the
    worker's resident memory).
    """
    import tiktoken

    encoding = tiktoken.Encoding(
        "o200k_base",
        pat_str=O200K_PATTERN,
        mergeable_ranks=read_o200k_ranks(),
        special_tokens=dict(O200K_SPECIAL_TOKENS),
    )
    encoding._mergeable_ranks = {}
    return encoding


def count_item_tokens(
    items: Sequence[ContextItem],
    counter: TokenCounter,
    known: Mapping[str, int],
    *,
    keep_counts: bool = False,
) -> tuple[ContextItem, ...]:
    """Fill in every item's ``tokens``.

    Args:
        items: Items to count; their current ``tokens`` are replaced by the count.
        counter: The tokenizer. ``known`` must come from the same one.
        known: Counts already known, by text (the previous turn's items; may be empty). Text
            seen twice in ``items`` is counted once.
        keep_counts: Items already carrying a count keep it without a lookup: the previous
            turn's items, reused as they are, were counted by the same ``counter``.

    Returns:
        The items with counts; an item already carrying its count is returned as is. Counts
        cover item text only; per-message framing and images are left to the budget's 10 %
        margin.
    """
    counted: list[ContextItem] = []
    fresh: dict[str, int] = {}
    for item in items:
        if keep_counts and item.tokens:
            counted.append(item)
            continue
        text = item.text
        tokens = known.get(text)
        if tokens is None:
            tokens = fresh.get(text)
        if tokens is None:
            tokens = fresh[text] = counter.count(text)
        counted.append(item if item.tokens == tokens else item.with_tokens(tokens))
    return tuple(counted)
