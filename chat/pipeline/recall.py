"""Long-term memory recall: which stored memories and document passages a turn is shown.

Memories are short facts kept per guild: *personal* ones about one person (a proxied member's
belong to the member), *guild* ones about the server, *persona* ones a persona said it would
remember, and passages of the guild's *documents*. A turn ranks them against what is being said
(`recall`) and shows the best few after the cacheable prefix (`context.build_turn_context`), so
the provider's prompt cache keeps what it keeps without them.

Ranking is a hybrid of two similarities, each in [0, 1]:

- **keyword**: BM25-style term weights (rare words count more, repeated words saturate),
  divided by what a text holding every word of the query once would score, so a text
  matching all of them scores about 1 and one matching a single word of five about a fifth.
  Stop words and the words every question is made of ("called", "name", "again", "remind")
  are not terms at all: "what's my dog called again?" must not find "a gym called Crux";
- **vector**: the cosine of the embedding vectors (unit rows: a dot product), below 0 as 0.

``score = weights.vector × vector + weights.keyword × keyword``. What is shown must reach an
absolute floor (``min_score``) and a share of the turn's best score (``relative``): a
paraphrase and its fact share no word and only a modest cosine, so no fixed score tells a true
match from noise across questions, but within one question the right memory stands out from
the person's others. Those go best first until ``k`` or the token budget is reached.

Who may be recalled is decided here too (`RecallScope`): a personal memory only when its person
speaks in the window, the persona's own only for that persona.

Pure: vectors, texts, weights and the token counter come in; numpy does the arithmetic.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from chat.pipeline.types import HistoryMessage

MEMORY_HEADER = "Things you remember that may bear on this conversation:"
"""The first line of the prompt item that shows recalled memories."""


class MemoryKind(StrEnum):
    """What a stored memory is about. Values are stored in the database."""

    PERSONAL = "personal"
    GUILD = "guild"
    PERSONA = "persona"
    DOCUMENT = "document"


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """A stored memory (or document passage) as ranking sees it.

    Attributes:
        id: The row's id (a document passage's own id; ids of different kinds may repeat).
        kind: What it is about.
        text: The fact or passage.
        user_id: A personal memory's person (the account; for a proxied member, the member's
            account), else None.
        member_id: A proxied member's id in the proxy system ('' for the account itself).
        persona_id: A persona memory's persona, else None.
        subject: How the prompt names what it is about: the person's name, the document's
            title ('' for guild and persona memories).
    """

    id: int
    kind: MemoryKind
    text: str
    user_id: int | None = None
    member_id: str = ""
    persona_id: int | None = None
    subject: str = ""

    @property
    def key(self) -> str:
        """A key unique across kinds: ``personal:12``, ``document:3``."""
        return f"{self.kind}:{self.id}"


@dataclass(frozen=True, slots=True)
class RecallWeights:
    """How the hybrid score mixes its parts, and BM25's two constants. ``b`` is 0: memories
    are short facts of similar length, and damping longer ones only reordered a person's facts
    by their length (measured on `benchmarks.recall_eval`: recall@5 0.91 at 0, 0.84 at the usual
    0.75)."""

    vector: float = 0.6
    keyword: float = 0.4
    k1: float = 1.2
    b: float = 0.0


@dataclass(frozen=True, slots=True)
class RecallScope:
    """What one turn may be shown.

    Attributes:
        persona_id: The persona speaking: its own memories are eligible, other personas' not.
        people: ``(user_id, member_id)`` of everyone speaking in the window (``member_id`` ''
            for an account speaking as itself): only their personal memories are eligible.
        kinds: The kinds considered at all.
    """

    persona_id: int | None
    people: frozenset[tuple[int, str]]
    kinds: frozenset[MemoryKind] = frozenset(MemoryKind)


@dataclass(frozen=True, slots=True)
class RecalledMemory:
    """One memory chosen for a turn, with its scores and why it was chosen."""

    record: MemoryRecord
    score: float
    keyword: float
    vector: float
    tokens: int = 0

    @property
    def why(self) -> str:
        """A short reason for the dashboard: the eligibility rule and the two similarities."""
        eligible = {
            MemoryKind.PERSONAL: f"about {self.record.subject or 'a person'}, who is in the window",
            MemoryKind.GUILD: "a server memory",
            MemoryKind.PERSONA: "this persona's own memory",
            MemoryKind.DOCUMENT: f"a passage of {self.record.subject or 'a document'}",
        }[self.record.kind]
        return f"{eligible}; keyword {self.keyword:.2f}, vector {self.vector:.2f}"


_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOPWORDS_TEXT = """
    a about above after again all am an and any are as at be been before being below between
    both but by can could did do does doing down during each few for from further had has have
    having he her here hers herself him himself his how i if in into is it its itself just me
    more most my myself no nor not now of off on once only or other our ours ourselves out over
    own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while
    who whom why will with would you your yours yourself yourselves s t d ll m re ve don ever
    tell know remember"""
_COMMON_WORDS_TEXT = """
    again also anyone anything around back call called calls can cant could did didnt does
    doesnt dont even ever get gets getting go goes going got guess hey hi hello isnt kind let
    lets like lol maybe much name named names need ok okay one please really remind said say
    says see something still stuff sure thank thanks thing things think though want way well
    whats wheres whos yeah yes yet"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split()) | frozenset(_COMMON_WORDS_TEXT.split())
"""Words keyword ranking ignores: English stop words, and the words questions and chat are made
of whatever they ask about ("called", "name", "again", "remind", "thanks"), which otherwise match
any memory that happens to use them."""


def terms(text: str) -> list[str]:
    """The words keyword ranking compares: lowercase, stop words dropped, a light suffix
    stemming (``cats`` → ``cat``, ``baking`` → ``bak``, ``played`` → ``play``) so that
    inflections of one word meet."""
    found = []
    for word in _WORD.findall(text.lower()):
        if word in STOPWORDS:
            continue
        found.append(_stem(word))
    return found


def _stem(word: str) -> str:
    for suffix in ("ing", "ies", "ed", "es", "s"):
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


@dataclass(frozen=True)
class MemoryIndex:
    """The memories of one guild ready for ranking: their vectors as one matrix and an inverted
    index of their terms. Built once (`build_memory_index`) and searched many times.

    Attributes:
        records: The memories, row ``n`` of every array below describing ``records[n]``.
        vectors: Unit float32 rows, shape (n, d); a memory without a vector has a zero row.
        postings: term → (rows holding it, how often each holds it).
        lengths: Each memory's number of terms.
    """

    records: tuple[MemoryRecord, ...]
    vectors: np.ndarray
    postings: dict[str, tuple[np.ndarray, np.ndarray]] = field(repr=False)
    lengths: np.ndarray = field(repr=False)
    ids: np.ndarray = field(repr=False)
    guild_rows: np.ndarray = field(repr=False)
    document_rows: np.ndarray = field(repr=False)
    persona_rows: dict[int, np.ndarray] = field(repr=False)
    """persona id → rows of its own memories."""
    person_rows: dict[tuple[int, str], np.ndarray] = field(repr=False)
    """(user id, member id) → rows of that person's memories."""
    rows_by_key: dict[str, int] = field(repr=False)
    """`MemoryRecord.key` → its row."""

    def __len__(self) -> int:
        return len(self.records)

    @property
    def average_length(self) -> float:
        return float(self.lengths.mean()) if len(self.lengths) else 0.0


def build_memory_index(
    records: Sequence[MemoryRecord], vectors: np.ndarray | None, *, dimensions: int = 0
) -> MemoryIndex:
    """Index ``records``; ``vectors`` holds one unit row per record (None or a zero row for one
    without a vector)."""
    count = len(records)
    if vectors is None:
        vectors = np.zeros((count, dimensions), dtype=np.float32)
    vectors = np.asarray(vectors, dtype=np.float32)
    vectors = vectors.reshape(count, -1 if count else (vectors.shape[-1] if vectors.ndim else 0))
    postings_lists: dict[str, tuple[list[int], list[int]]] = {}
    lengths = np.zeros(count, dtype=np.float32)
    guild: list[int] = []
    documents: list[int] = []
    by_persona: dict[int, list[int]] = {}
    by_person: dict[tuple[int, str], list[int]] = {}
    for row, record in enumerate(records):
        record_terms = terms(record.text)
        lengths[row] = len(record_terms)
        for term, frequency in Counter(record_terms).items():
            rows, frequencies = postings_lists.setdefault(term, ([], []))
            rows.append(row)
            frequencies.append(frequency)
        if record.kind is MemoryKind.PERSONAL and record.user_id is not None:
            by_person.setdefault((record.user_id, record.member_id), []).append(row)
        elif record.kind is MemoryKind.PERSONA and record.persona_id is not None:
            by_persona.setdefault(record.persona_id, []).append(row)
        elif record.kind is MemoryKind.GUILD:
            guild.append(row)
        elif record.kind is MemoryKind.DOCUMENT:
            documents.append(row)
    return MemoryIndex(
        records=tuple(records),
        vectors=vectors,
        postings={
            term: (np.array(rows, dtype=np.int64), np.array(freq, dtype=np.float32))
            for term, (rows, freq) in postings_lists.items()
        },
        lengths=lengths,
        ids=np.array([record.id for record in records], dtype=np.int64),
        guild_rows=np.array(guild, dtype=np.int64),
        document_rows=np.array(documents, dtype=np.int64),
        persona_rows={key: np.array(rows, dtype=np.int64) for key, rows in by_persona.items()},
        person_rows={key: np.array(rows, dtype=np.int64) for key, rows in by_person.items()},
        rows_by_key={record.key: row for row, record in enumerate(records)},
    )


def still_remembered(index: MemoryIndex, key: str, line: str) -> bool:
    """Whether the memory ``key`` that an earlier turn showed as ``line`` is still kept with
    that text. Forgotten, deleted on the dashboard, withdrawn by a privacy choice or edited
    since, it is not, and no later request may show that line again."""
    row = index.rows_by_key.get(key)
    if row is None:
        return False
    return line.endswith(f": {' '.join(index.records[row].text.split())}")


def keyword_scores(
    index: MemoryIndex, query: str, weights: RecallWeights, *, rows: np.ndarray | None = None
) -> np.ndarray:
    """The keyword similarity to ``query`` in [0, 1] (see the module docstring) of every memory,
    or of those in ``rows`` (ascending, in that order); zeros where no query word occurs.

    With ``rows``, each query word's postings are searched for those rows (a binary search
    each), so a turn's cost follows the memories it may see, not the guild's."""
    count = len(index) if rows is None else len(rows)
    scores = np.zeros(count, dtype=np.float32)
    asked = set(terms(query))
    known = [term for term in asked if term in index.postings]
    if not known or count == 0:
        return scores
    total, average = len(index), max(index.average_length, 1.0)
    # A word no memory holds counts as the rarest: a text holding every word of the query
    # would score the idf of each.
    best = (len(asked) - len(known)) * math.log(1.0 + (total + 0.5) / 0.5)
    for term in known:
        holding, frequencies = index.postings[term]
        idf = math.log(1.0 + (total - len(holding) + 0.5) / (len(holding) + 0.5))
        best += idf
        at = holding  # where in ``scores`` each posting lands
        if rows is not None:
            position = np.minimum(np.searchsorted(holding, rows), len(holding) - 1)
            at = np.flatnonzero(holding[position] == rows)
            holding, frequencies = rows[at], frequencies[position[at]]
        damping = weights.k1 * (1.0 - weights.b + weights.b * index.lengths[holding] / average)
        scores[at] += idf * frequencies * (weights.k1 + 1.0) / (frequencies + damping)
    normalised: np.ndarray = np.minimum(scores / best, 1.0)
    return normalised


def vector_scores(
    index: MemoryIndex, query_vector: np.ndarray | None, *, rows: np.ndarray | None = None
) -> np.ndarray:
    """The cosine similarity to ``query_vector`` (unit rows) of every memory, or of those in
    ``rows`` (in that order), negatives as 0; zeros when there is no query vector or its
    dimensions differ from the index's."""
    count = len(index) if rows is None else len(rows)
    if (
        query_vector is None
        or count == 0
        or index.vectors.shape[1] != np.asarray(query_vector).reshape(-1).shape[0]
    ):
        return np.zeros(count, dtype=np.float32)
    vectors = index.vectors if rows is None else index.vectors[rows]
    return np.maximum(vectors @ np.asarray(query_vector, dtype=np.float32).reshape(-1), 0.0)


def eligible_rows(index: MemoryIndex, scope: RecallScope | None) -> np.ndarray:
    """The rows (ascending) of the memories ``scope`` may be shown: guild memories and
    document passages, the persona's own, and the personal memories of the people in the
    window, of the kinds ``scope.kinds`` names. None: every memory (the dashboard's search)."""
    if scope is None:
        return np.arange(len(index), dtype=np.int64)
    empty = np.zeros(0, dtype=np.int64)
    parts = []
    if MemoryKind.GUILD in scope.kinds:
        parts.append(index.guild_rows)
    if MemoryKind.DOCUMENT in scope.kinds:
        parts.append(index.document_rows)
    if MemoryKind.PERSONA in scope.kinds and scope.persona_id is not None:
        parts.append(index.persona_rows.get(scope.persona_id, empty))
    if MemoryKind.PERSONAL in scope.kinds:
        parts += [index.person_rows.get(person, empty) for person in scope.people]
    return np.sort(np.concatenate(parts)) if parts else empty


def recall(
    index: MemoryIndex,
    *,
    query: str,
    query_vector: np.ndarray | None,
    scope: RecallScope | None,
    k: int,
    min_score: float,
    relative: float = 0.0,
    weights: RecallWeights = RecallWeights(),
    token_budget: int | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> tuple[RecalledMemory, ...]:
    """The memories to show for ``query``, best first.

    Steps:
        1. Keep the memories ``scope`` allows (`eligible_rows`).
        2. Score them: keyword and vector similarity, mixed by ``weights``; keep those that
           reach ``min_score`` and ``relative`` times the best score among them (0: no
           relative cut).
        3. Take them best first (ties: the newer id first) until ``k`` are taken or the next one's
           prompt line (`memory_line`, counted by ``count_tokens``) would pass ``token_budget``;
           a line too long for what is left is skipped, a shorter one after it may still fit.

    ``weights.vector`` 0 gives keyword-only ranking, ``weights.keyword`` 0 vector-only.
    """
    if len(index) == 0 or k <= 0:
        return ()
    rows = eligible_rows(index, scope)
    keyword = (
        keyword_scores(index, query, weights, rows=None if scope is None else rows)
        if weights.keyword
        else np.zeros(len(rows), dtype=np.float32)
    )
    vector = (
        vector_scores(index, query_vector, rows=None if scope is None else rows)
        if weights.vector
        else np.zeros(len(rows), dtype=np.float32)
    )
    score = weights.vector * vector + weights.keyword * keyword
    best = float(score.max()) if len(score) else 0.0
    passing = np.flatnonzero(score >= max(min_score, relative * best))
    if len(passing) == 0:
        return ()
    shortlist = k * 8 + 64  # enough for k even when the token budget skips long lines
    if len(passing) > shortlist:
        passing = passing[np.argpartition(-score[passing], shortlist)[:shortlist]]
    ids = index.ids[rows[passing]]
    order = passing[np.lexsort((-ids, -score[passing]))]
    chosen: list[RecalledMemory] = []
    spent = 0
    for n in order:
        record = index.records[int(rows[n])]
        tokens = count_tokens(memory_line(record)) if count_tokens is not None else 0
        if token_budget is not None and spent + tokens > token_budget:
            continue
        spent += tokens
        chosen.append(
            RecalledMemory(
                record=record,
                score=float(score[n]),
                keyword=float(keyword[n]),
                vector=float(vector[n]),
                tokens=tokens,
            )
        )
        if len(chosen) >= k:
            break
    return tuple(chosen)


def memory_line(record: MemoryRecord) -> str:
    """How the prompt shows one memory: ``About Alice: …`` for a person, ``About the server:``
    for the guild, ``You said you would remember: …`` for the persona's own, ``From <title>:``
    for a document passage."""
    text = " ".join(record.text.split())
    match record.kind:
        case MemoryKind.PERSONAL:
            return f"About {record.subject or 'someone here'}: {text}"
        case MemoryKind.GUILD:
            return f"About the server: {text}"
        case MemoryKind.PERSONA:
            return f"You said you would remember: {text}"
        case MemoryKind.DOCUMENT:
            return f"From {record.subject or 'a document'}: {text}"


def memory_note_text(lines: Iterable[str]) -> str | None:
    """The recalled memories as one note's text (`MEMORY_HEADER`, then ``- line`` each); None
    when there are none."""
    shown = [f"- {line}" for line in lines if line.strip()]
    return "\n".join([MEMORY_HEADER, *shown]) if shown else None


def window_people(
    history: Iterable[HistoryMessage], *, trigger_id: int, unremembered: frozenset[int]
) -> dict[tuple[int, str], str]:
    """Who speaks in the window up to the trigger, whose personal memories a turn may recall:
    ``(account id, proxied member id or '')`` → the name the window shows. Personas, other
    bots and the accounts in ``unremembered`` (partial or full privacy, blacklisted) are left
    out; a proxied member counts as themself, not as their account."""
    people: dict[tuple[int, str], str] = {}
    for message in history:
        if message.id > trigger_id or message.author.persona_name is not None:
            continue
        if message.author.is_bot and message.proxy is None:
            continue
        if message.accountable_user_id in unremembered:
            continue
        member = message.proxy.member_id if message.proxy is not None else ""
        people[(message.accountable_user_id, member)] = message.shown_name
    return people


def names_someone_else(fact: str, *, author: str, others: Iterable[str]) -> str | None:
    """For a personal fact attributed to ``author``: the name of another person of the
    conversation it names while not naming ``author`` (whole words, any case), or None. "Alice
    hates the oboe" cited from Bob's message names Alice: it is not Bob's to tell."""
    if fact_names(fact, author):
        return None
    return next((name for name in others if name != author and fact_names(fact, name)), None)


def fact_names(fact: str, name: str) -> bool:
    """True when ``fact`` holds every word of ``name`` as a whole word, in any case."""
    words = set(normalized_text(fact).split())
    parts = normalized_text(name).split()
    return bool(parts) and all(part in words for part in parts)


def recall_query(
    trigger: HistoryMessage,
    replied: HistoryMessage | None,
    *,
    hidden: frozenset[int],
    addressing: Iterable[str] = (),
) -> str:
    """What a turn searches its memories with: what the person asks. That is the trigger's
    text, after the text of the message it replies to (``replied``, None when it replies to
    none), not whatever else was said last (the persona's own previous reply, someone else's
    chatter). The words in ``addressing`` (the personas' names and trigger words) are taken
    out, whole words in any case: "tomori, …" says who is asked, not what. Hidden users'
    words never count (full privacy, blacklisted): a hidden author's trigger or reply target
    adds nothing."""
    texts = [
        message.content
        for message in (replied, trigger)
        if message is not None and message.accountable_user_id not in hidden
    ]
    text = "\n".join(t for t in texts if t.strip())
    words = sorted({w.strip().lower() for w in addressing if w.strip()}, key=len, reverse=True)
    if words and text:
        pattern = r"(?<!\w)(?:" + "|".join(re.escape(w) for w in words) + r")(?!\w)"
        text = re.sub(pattern, " ", text, flags=re.IGNORECASE)
    lines = (re.sub(r"^[\s,.:;!?-]+", "", " ".join(line.split())) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def normalized_text(text: str) -> str:
    """``text`` compared for exact duplicates: lowercase words, punctuation and spacing
    ignored."""
    return " ".join(_WORD.findall(text.lower()))


def near_duplicate(
    text: str,
    vector: np.ndarray | None,
    existing: Sequence[tuple[int, str, np.ndarray | None]],
    *,
    min_similarity: float,
) -> int | None:
    """The id of the stored memory ``text`` repeats, or None.

    A memory repeats another when their words are the same (`normalized_text`), or when their
    vectors' cosine similarity reaches ``min_similarity`` ("likes green tea" after "likes tea";
    "likes coffee" stays apart). The most similar one wins. ``existing`` holds ``(id, text,
    unit vector or None)`` of the memories in the same scope.
    """
    wanted = normalized_text(text)
    for memory_id, other, _ in existing:
        if normalized_text(other) == wanted:
            return memory_id
    if vector is None:
        return None
    query = np.asarray(vector, dtype=np.float32).reshape(-1)
    best_id, best = None, min_similarity
    for memory_id, _, other_vector in existing:
        if other_vector is None or np.asarray(other_vector).shape[-1] != query.shape[0]:
            continue
        similarity = float(np.dot(np.asarray(other_vector, dtype=np.float32), query))
        if similarity >= best:
            best_id, best = memory_id, similarity
    return best_id
