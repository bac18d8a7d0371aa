"""Lorebook activation (SillyTavern's World Info; Character Card V2/V3 ``character_book``).

A lorebook is a list of entries, each some text (``content``) and the keys that bring it into a
turn's prompt. `activate_lorebooks` decides which entries a turn inserts:

1. **Scan.** Each book scans the newest ``scan_depth`` messages (2 by default; the trigger is
   always among them). Messages are scanned one by one (a phrase never matches across two);
   author names are not scanned.
2. **Match.** A key is a word or phrase, or ``/pattern/flags`` (a regular expression; flags
   ``i``, ``m``, ``s``, ``x``); an entry with ``use_regex`` reads every key as a pattern. Words
   and phrases match any case unless the entry is ``case_sensitive``, anywhere unless it asks
   for ``match_whole_words``. A ``selective`` entry with secondary keys also applies its logic:
   AND ANY (some secondary key matches), AND ALL (every one does), NOT ANY (none does),
   NOT ALL (not every one does). Constant entries need no key; disabled entries never fire.
3. **Recurse.** With ``recursive_scanning``, the content of what fired is scanned again for
   further entries (those not marked ``exclude_recursion``; content of entries marked
   ``prevent_recursion`` is not scanned), at most ``recursion_steps`` times.
4. **Chance.** An entry whose ``probability`` is below 100 fires only when its roll says so. The
   roll comes from a generator seeded with the turn's seed (the trigger id) and the entry, so
   the same turn always rolls the same: a preview equals its turn.
5. **Budget.** Entries are admitted constants first, then by ``priority`` (highest first), then
   by ``insertion_order``, while their tokens fit the budget; from the first that does not fit,
   every lower one is dropped.

Words and phrases are found with one Aho–Corasick automaton per book and case mode (built once
per book, `compile_lorebook`), so a scan costs one pass over the text whatever the number of
keys; patterns are tried one by one.

What a fired entry becomes in the prompt (where, and in which role) is the context builder's
business (`context.py`); this module returns which entries fired, on which key, and which the
budget or the roll left out.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import ahocorasick

from chat.pipeline.tokens import TokenCounter
from chat.pipeline.types import Role

DEFAULT_SCAN_DEPTH = 2
DEFAULT_BUDGET_PERCENT = 25
"""The lorebook budget when no book sets one: this share of the model's context window."""
DEFAULT_RECURSION_STEPS = 3
DEFAULT_INSERTION_ORDER = 100
DEFAULT_DEPTH = 4
REGEX_KEY = re.compile(r"^/(?P<pattern>.+)/(?P<flags>[a-z]*)$", re.DOTALL)
_REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE}
_IGNORED_REGEX_FLAGS = frozenset("guy")  # JavaScript flags with no meaning for a yes/no match
MESSAGE_SEPARATOR = "\x01"
"""Joins scanned messages: no key contains it, so no match spans two messages."""


class SelectiveLogic(StrEnum):
    """How a selective entry's secondary keys combine with its primary match."""

    AND_ANY = "and_any"
    AND_ALL = "and_all"
    NOT_ANY = "not_any"
    NOT_ALL = "not_all"


class LorePosition(StrEnum):
    """Where a fired entry goes: before or after the character definitions (the persona's
    system prompt), or at a depth in the dialogue with a role."""

    BEFORE_CHAR = "before_char"
    AFTER_CHAR = "after_char"
    AT_DEPTH = "at_depth"


@dataclass(frozen=True, slots=True)
class LoreEntry:
    """One lorebook entry (the card's fields, with SillyTavern's extensions as plain fields).

    ``uid`` names the entry in turn records and seeds its roll; it is unique within its book.
    ``priority``: higher survives the budget longer. ``insertion_order``: lower goes first.
    ``depth`` and ``role`` apply to ``AT_DEPTH`` entries. ``probability`` is a percentage.
    """

    uid: str
    keys: tuple[str, ...]
    content: str
    name: str = ""
    secondary_keys: tuple[str, ...] = ()
    selective: bool = False
    selective_logic: SelectiveLogic = SelectiveLogic.AND_ANY
    constant: bool = False
    enabled: bool = True
    insertion_order: int = DEFAULT_INSERTION_ORDER
    priority: int = 0
    case_sensitive: bool = False
    match_whole_words: bool = False
    use_regex: bool = False
    position: LorePosition = LorePosition.BEFORE_CHAR
    depth: int = DEFAULT_DEPTH
    role: Role = Role.SYSTEM
    probability: int = 100
    exclude_recursion: bool = False
    prevent_recursion: bool = False


@dataclass(frozen=True, slots=True)
class Lorebook:
    """A persona's or a guild's lorebook. ``token_budget`` None: the turn's default budget."""

    name: str
    entries: tuple[LoreEntry, ...]
    scan_depth: int = DEFAULT_SCAN_DEPTH
    token_budget: int | None = None
    recursive_scanning: bool = False


@dataclass(frozen=True, slots=True)
class _Key:
    entry: int
    secondary: bool
    text: str
    whole_words: bool


@dataclass(frozen=True, slots=True)
class _Pattern:
    """A pattern key. ``folded``: it ignores case and is written in lower case, so it is
    searched, without the flag, in the lower-cased text: the same matches, and Python's
    engine can then find its literal start quickly (with the flag it tries every position)."""

    entry: int
    secondary: bool
    text: str
    regex: re.Pattern[str]
    folded: bool = False


class _Automaton:
    """Words and phrases of one case mode, found in one pass (Aho–Corasick)."""

    def __init__(self, keys: Sequence[tuple[str, _Key]]) -> None:
        self._automaton = ahocorasick.Automaton()
        by_text: dict[str, list[_Key]] = {}
        for text, key in keys:
            by_text.setdefault(text, []).append(key)
        for text, found in by_text.items():
            self._automaton.add_word(text, (len(text), tuple(found)))
        self._empty = not by_text
        if not self._empty:
            self._automaton.make_automaton()

    def find(self, text: str) -> list[_Key]:
        """Every key found in ``text`` (whole-word keys only between word boundaries)."""
        if self._empty:
            return []
        found = []
        for end, (length, keys) in self._automaton.iter(text):
            whole = None
            for key in keys:
                if key.whole_words:
                    if whole is None:
                        whole = _is_word_boundary(text, end - length) and _is_word_boundary(
                            text, end + 1
                        )
                    if not whole:
                        continue
                found.append(key)
        return found


def _is_word_boundary(text: str, index: int) -> bool:
    """Whether the character at ``index`` (outside ``text`` counts) is not part of a word."""
    if index < 0 or index >= len(text):
        return True
    char = text[index]
    return not (char.isalnum() or char == "_")


@dataclass(frozen=True, slots=True, eq=False)
class CompiledLorebook:
    """A book ready to scan: its enabled entries and their keys, indexed. Build with
    `compile_lorebook`; build once per book and keep it (the index is the costly part)."""

    book: Lorebook
    entries: tuple[LoreEntry, ...]
    folded: _Automaton
    exact: _Automaton
    patterns: tuple[_Pattern, ...]
    key_counts: tuple[tuple[int, int], ...]
    """Per entry: how many distinct primary and secondary keys it has."""
    token_counts: dict[tuple[str, int], int] = field(default_factory=dict)
    """Each entry's content tokens by (tokenizer, entry), counted once: the content never
    changes, and an entry that fires on every turn would be counted on every turn."""


def parse_regex_key(key: str) -> re.Pattern[str] | None:
    """``/pattern/flags`` as a compiled pattern; None when ``key`` is not written that way.

    Raises:
        re.error: the key is written as a pattern but is not a valid one (or has a flag
            other than ``i``, ``m``, ``s``, ``x``, ``g``, ``u``, ``y``).
    """
    match = REGEX_KEY.match(key)
    if match is None:
        return None
    return _compile_pattern(match["pattern"], match["flags"])


def _compile_pattern(pattern: str, flags: str) -> re.Pattern[str]:
    value = 0
    for flag in flags:
        if flag in _REGEX_FLAGS:
            value |= _REGEX_FLAGS[flag]
        elif flag not in _IGNORED_REGEX_FLAGS:
            raise re.error(f"unknown flag {flag!r}")
    return re.compile(pattern, value)


def _folded(pattern: _Pattern) -> _Pattern:
    regex = pattern.regex
    source = regex.pattern
    if not regex.flags & re.IGNORECASE or source != source.lower():
        return pattern
    unfolded = re.compile(source, regex.flags & ~re.IGNORECASE)
    return _Pattern(pattern.entry, pattern.secondary, pattern.text, unfolded, folded=True)


def compile_lorebook(book: Lorebook) -> CompiledLorebook:
    """Index ``book``'s enabled entries for scanning.

    Keys are stripped; blank keys are ignored; a pattern that does not compile is ignored (the
    configuration schema refuses such keys, so only hand-built books have them).
    """
    entries = tuple(entry for entry in book.entries if entry.enabled)
    folded: list[tuple[str, _Key]] = []
    exact: list[tuple[str, _Key]] = []
    patterns: list[_Pattern] = []
    counts: list[tuple[int, int]] = []
    for index, entry in enumerate(entries):
        kinds = ((False, entry.keys), (True, entry.secondary_keys))
        distinct = [0, 0]
        for secondary, keys in kinds:
            for raw in dict.fromkeys(key.strip() for key in keys):
                if not raw:
                    continue
                distinct[secondary] += 1
                try:
                    regex = _compile_pattern(raw, "") if entry.use_regex else parse_regex_key(raw)
                except re.error:
                    continue
                if regex is not None:
                    patterns.append(_folded(_Pattern(index, secondary, raw, regex)))
                elif entry.case_sensitive:
                    exact.append((raw, _Key(index, secondary, raw, entry.match_whole_words)))
                else:
                    key = _Key(index, secondary, raw, entry.match_whole_words)
                    folded.append((raw.lower(), key))
        counts.append((distinct[0], distinct[1]))
    return CompiledLorebook(
        book=book,
        entries=entries,
        folded=_Automaton(folded),
        exact=_Automaton(exact),
        patterns=tuple(patterns),
        key_counts=tuple(counts),
    )


class LoreOutcome(StrEnum):
    """What became of an entry whose keys matched (or that is constant)."""

    INSERTED = "inserted"
    OVER_BUDGET = "over_budget"
    UNLUCKY = "unlucky"
    """Its probability roll failed."""


@dataclass(frozen=True, slots=True)
class LoreHit:
    """An entry that fired (or would have): which book, which key, and what became of it.

    ``key`` is the primary key that matched first in the entry's key order (None for a
    constant entry); ``recursion_step`` 0 means the messages matched, n the n-th rescan of
    fired content. ``tokens`` is the content's count (0 when the roll failed: never counted).
    """

    book: str
    entry: LoreEntry
    key: str | None
    recursion_step: int
    outcome: LoreOutcome
    tokens: int = 0

    def as_record(self) -> dict[str, object]:
        """JSON-ready, for turn records and the preview."""
        return {
            "book": self.book,
            "uid": self.entry.uid,
            "name": self.entry.name,
            "key": self.key,
            "constant": self.entry.constant,
            "recursion_step": self.recursion_step,
            "outcome": str(self.outcome),
            "tokens": self.tokens,
            "position": str(self.entry.position),
        }


@dataclass(frozen=True, slots=True)
class LoreActivation:
    """A turn's activation: ``inserted`` in prompt order (constants first, then by
    ``insertion_order``); ``left_out`` holds what the budget dropped and failed rolls."""

    inserted: tuple[LoreHit, ...] = ()
    left_out: tuple[LoreHit, ...] = ()
    budget: int = 0
    tokens: int = 0

    def as_record(self) -> dict[str, object]:
        return {
            "budget": self.budget,
            "tokens": self.tokens,
            "inserted": [hit.as_record() for hit in self.inserted],
            "left_out": [hit.as_record() for hit in self.left_out],
        }


NO_ACTIVATION = LoreActivation()


@dataclass(slots=True)
class _Candidate:
    book_index: int
    entry_index: int
    key: str | None
    step: int


@dataclass(slots=True)
class _Scan:
    """Which distinct keys of each entry one text matched."""

    primary: dict[int, set[str]] = field(default_factory=dict)
    secondary: dict[int, set[str]] = field(default_factory=dict)

    def note(self, entry: int, secondary: bool, text: str) -> None:
        (self.secondary if secondary else self.primary).setdefault(entry, set()).add(text)


def lore_budget(context_window: int, books: Sequence[CompiledLorebook]) -> int:
    """The smallest ``token_budget`` the books set, else `DEFAULT_BUDGET_PERCENT` % of the
    context window."""
    set_budgets = [b.book.token_budget for b in books if b.book.token_budget is not None]
    if set_budgets:
        return min(set_budgets)
    return context_window * DEFAULT_BUDGET_PERCENT // 100


def activate_lorebooks(
    books: Sequence[CompiledLorebook],
    *,
    messages: Sequence[str],
    seed: str,
    budget: int,
    token_counter: TokenCounter,
    recursion_steps: int = DEFAULT_RECURSION_STEPS,
) -> LoreActivation:
    """Decide which entries of ``books`` a turn inserts (see the module docstring).

    Args:
        books: Compiled books, the persona's before the guild's.
        messages: The visible messages' words, oldest first, ending with the trigger's.
        seed: What makes the turn's rolls repeatable (the trigger id).
        budget: Tokens all inserted content may use (`lore_budget`); content is counted as
            written (macros unexpanded), once per book and tokenizer.
        token_counter: The turn's tokenizer.
        recursion_steps: At most this many rescans of fired content.

    Returns:
        The activation; `NO_ACTIVATION` when no book has an enabled entry.
    """
    if not any(compiled.entries for compiled in books):
        return NO_ACTIVATION
    candidates: dict[tuple[int, int], _Candidate] = {}
    for b, compiled in enumerate(books):
        for e, entry in enumerate(compiled.entries):
            if entry.constant:
                candidates[(b, e)] = _Candidate(b, e, None, 0)
        depth = max(1, compiled.book.scan_depth)
        text = MESSAGE_SEPARATOR.join(messages[-depth:])
        for e, key in _matches(compiled, text, recursion=False):
            candidates.setdefault((b, e), _Candidate(b, e, key, 0))

    fresh = list(candidates.values())
    for step in range(1, recursion_steps + 1):
        buffer = MESSAGE_SEPARATOR.join(
            books[c.book_index].entries[c.entry_index].content
            for c in fresh
            if not books[c.book_index].entries[c.entry_index].prevent_recursion
        )
        if not buffer:
            break
        fresh = []
        for b, compiled in enumerate(books):
            if not compiled.book.recursive_scanning:
                continue
            for e, key in _matches(compiled, buffer, recursion=True):
                if (b, e) not in candidates:
                    candidates[(b, e)] = _Candidate(b, e, key, step)
                    fresh.append(candidates[(b, e)])
        if not fresh:
            break

    return _admit(books, list(candidates.values()), seed=seed, budget=budget, counter=token_counter)


def _matches(compiled: CompiledLorebook, text: str, *, recursion: bool) -> list[tuple[int, str]]:
    """(entry index, first matching primary key) for every keyed entry ``text`` activates."""
    scan = _Scan()
    lowered = text.lower()
    found = [*compiled.folded.find(lowered), *compiled.exact.find(text)]
    for key in found:
        scan.note(key.entry, key.secondary, key.text)
    for pattern in compiled.patterns:
        if pattern.regex.search(lowered if pattern.folded else text):
            scan.note(pattern.entry, pattern.secondary, pattern.text)
    result = []
    for index, matched in scan.primary.items():
        entry = compiled.entries[index]
        if entry.constant or (recursion and entry.exclude_recursion):
            continue
        if entry.selective and not _secondary_ok(entry, compiled, index, scan):
            continue
        first = next(key.strip() for key in entry.keys if key.strip() in matched)
        result.append((index, first))
    result.sort()
    return result


def _secondary_ok(entry: LoreEntry, compiled: CompiledLorebook, index: int, scan: _Scan) -> bool:
    total = compiled.key_counts[index][1]
    if total == 0:
        return True
    matched = len(scan.secondary.get(index, ()))
    match entry.selective_logic:
        case SelectiveLogic.AND_ANY:
            return matched > 0
        case SelectiveLogic.AND_ALL:
            return matched == total
        case SelectiveLogic.NOT_ANY:
            return matched == 0
        case SelectiveLogic.NOT_ALL:
            return matched < total


def _admit(
    books: Sequence[CompiledLorebook],
    candidates: list[_Candidate],
    *,
    seed: str,
    budget: int,
    counter: TokenCounter,
) -> LoreActivation:
    """Roll, then admit by priority within the budget; return hits in prompt order."""
    lucky: list[tuple[_Candidate, LoreEntry]] = []
    left_out: list[LoreHit] = []
    for candidate in candidates:
        book = books[candidate.book_index].book
        entry = books[candidate.book_index].entries[candidate.entry_index]
        if entry.probability < 100 and not _rolls(seed, book.name, entry):
            left_out.append(
                LoreHit(book.name, entry, candidate.key, candidate.step, LoreOutcome.UNLUCKY)
            )
        else:
            lucky.append((candidate, entry))
    lucky.sort(
        key=lambda pair: (
            not pair[1].constant,
            -pair[1].priority,
            pair[1].insertion_order,
            pair[0].book_index,
            pair[0].entry_index,
        )
    )
    used = 0
    inserted: list[tuple[_Candidate, LoreHit]] = []
    over = False
    for candidate, entry in lucky:
        compiled = books[candidate.book_index]
        book = compiled.book
        key = (counter.name, candidate.entry_index)
        tokens = compiled.token_counts.get(key)
        if tokens is None:
            tokens = compiled.token_counts[key] = counter.count(entry.content)
        over = over or used + tokens > budget
        outcome = LoreOutcome.OVER_BUDGET if over else LoreOutcome.INSERTED
        hit = LoreHit(book.name, entry, candidate.key, candidate.step, outcome, tokens)
        if over:
            left_out.append(hit)
        else:
            used += tokens
            inserted.append((candidate, hit))
    inserted.sort(
        key=lambda pair: (
            not pair[1].entry.constant,
            pair[1].entry.insertion_order,
            pair[0].book_index,
            pair[0].entry_index,
        )
    )
    return LoreActivation(
        inserted=tuple(hit for _, hit in inserted),
        left_out=tuple(left_out),
        budget=budget,
        tokens=used,
    )


def _rolls(seed: str, book_name: str, entry: LoreEntry) -> bool:
    """The entry's roll for this turn: a generator seeded with the turn and the entry (a string
    seed hashes the same in every process)."""
    roll = random.Random(f"{seed}\x00{book_name}\x00{entry.uid}").random() * 100
    return roll < entry.probability
