"""Recall of long-term memories: one guild's memories indexed in process, searched per turn.

Each process keeps one `MemoryIndex` per guild (the vectors as one matrix, the terms as an
inverted index) and rebuilds it when the guild's memories change: the guild's
`MemoryVersion` stamp, one primary-key read, tells (an aggregate over the guild's rows,
as at first, cost 20 ms a turn at 10,000 memories and 200 ms at 100,000). Ranking is the
pure `chat.pipeline.recall`.

`memories_recall_for_turn` is what every turn calls: what the person asks (the trigger and the
message it replies to, `recall.recall_query`) is the query; the speaking persona's own
memories, the guild's, and the personal memories of the people speaking in the window (never
anyone else's) are eligible. `memories_shown_before` gives what the window's earlier turns
showed, less what has been forgotten since.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np
from django.conf import settings

from chat import metrics
from chat.caches import BoundedCache
from chat.llm.embeddings import EmbeddingError, EmbeddingModel, vector_from_bytes
from chat.models import Document, DocumentChunk, Memory, Turn
from chat.models_memory import memory_version
from chat.pipeline.recall import (
    MemoryIndex,
    MemoryKind,
    MemoryRecord,
    RecalledMemory,
    RecallScope,
    RecallWeights,
    build_memory_index,
    memory_line,
    recall,
    still_remembered,
)
from chat.pipeline.triggers import TurnReason
from chat.services.memory_store import default_embedding_model, memories_embed_missing


@dataclass(frozen=True)
class _Cached:
    version: str
    index: MemoryIndex


EMBED_WHILE_INDEXING = 32
QUERY_VECTORS_KEPT = 256
"""Query vectors kept (by model and text): the personas answering one message ask the same
question, and embedding it is most of what a recall costs."""
_indexes: dict[tuple[int, str], _Cached] = {}
_query_vectors: BoundedCache[tuple[str, str], np.ndarray] = BoundedCache(QUERY_VECTORS_KEPT)
_lock = threading.Lock()


def guild_memory_index(*, guild_id: int, embedder: EmbeddingModel) -> MemoryIndex:
    """The guild's memories and ready document passages indexed for ``embedder``'s vectors,
    rebuilt only when they changed. A few memories without a vector of this model (at most
    `EMBED_WHILE_INDEXING`: written while the endpoint failed) are embedded first; more (the
    model changed) are left to the background task (`memories_embed_missing`), ranked by
    keywords alone until then."""
    key = (guild_id, embedder.name)
    version = memory_version(guild_id)
    cached = _indexes.get(key)
    if cached is not None and cached.version == version:
        return cached.index
    missing = Memory.objects.filter(guild_id=guild_id).exclude(embedding_model=embedder.name)
    if 0 < missing.count() <= EMBED_WHILE_INDEXING:
        memories_embed_missing(guild_id=guild_id, embedder=embedder)
        version = memory_version(guild_id)
    rows = list(
        Memory.objects.filter(guild_id=guild_id)
        .order_by("id")
        .values_list(
            "id",
            "kind",
            "text",
            "user_id",
            "member_id",
            "persona_id",
            "subject_name",
            "embedding",
            "embedding_model",
        )
    )
    records = [
        MemoryRecord(
            id=row[0],
            kind=MemoryKind(row[1]),
            text=row[2],
            user_id=row[3],
            member_id=row[4],
            persona_id=row[5],
            subject=row[6],
        )
        for row in rows
    ]
    vectors = [
        vector_from_bytes(row[7]) if row[7] and row[8] == embedder.name else None for row in rows
    ]
    passages = DocumentChunk.objects.filter(
        document__guild_id=guild_id, document__status=Document.Status.READY
    ).values_list("id", "text", "document__name", "embedding", "embedding_model")
    for chunk_id, text, title, embedding, model in passages:
        records.append(
            MemoryRecord(id=chunk_id, kind=MemoryKind.DOCUMENT, text=text, subject=title)
        )
        vectors.append(
            vector_from_bytes(embedding) if embedding and model == embedder.name else None
        )
    dimensions = next((len(v) for v in vectors if v is not None), 0)
    matrix = np.zeros((len(records), dimensions), dtype=np.float32)
    for n, vector in enumerate(vectors):
        if vector is not None and len(vector) == dimensions:
            matrix[n] = vector
    index = build_memory_index(records, matrix)
    with _lock:
        _indexes[key] = _Cached(version, index)
    return index


def recall_weights() -> RecallWeights:
    """The hybrid score's mix: ``MEMORY_RECALL_VECTOR_PERCENT`` of the vector similarity, the
    rest of the keyword one."""
    vector = settings.MEMORY_RECALL_VECTOR_PERCENT / 100
    return RecallWeights(vector=vector, keyword=1.0 - vector)


def memory_search(
    *,
    guild_id: int,
    query: str,
    k: int = 20,
    scope: RecallScope | None = None,
    min_score: float = 0.0,
    embedder: EmbeddingModel | None = None,
) -> tuple[RecalledMemory, ...]:
    """The guild's memories ranked for ``query`` as a turn ranks them (scores included), best
    first; ``scope`` None searches every memory of the guild (the dashboard's view)."""
    embedder = embedder or default_embedding_model()
    index = guild_memory_index(guild_id=guild_id, embedder=embedder)
    if len(index) == 0:
        return ()
    return recall(
        index,
        query=query,
        query_vector=_query_vector(embedder, query),
        scope=scope,
        k=k,
        min_score=min_score,
        weights=recall_weights(),
    )


@metrics.MEMORY_RECALL_SECONDS.time()
def memories_recall_for_turn(
    *,
    guild_id: int | None,
    persona_id: int,
    people: Mapping[tuple[int, str], str],
    query: str,
    token_budget: int,
    count_tokens: Callable[[str], int],
    embedder: EmbeddingModel | None = None,
) -> tuple[RecalledMemory, ...]:
    """What one persona turn recalls.

    ``people`` maps each ``(user_id, member_id)`` speaking in the window (privacy already
    applied: nobody with partial or full privacy) to the name the window shows; their personal
    memories are eligible and shown under that name. ``token_budget`` caps the recalled lines
    (``MEMORY_RECALL_BUDGET_PERCENT`` of the prompt budget); ``MEMORY_RECALL_K``,
    ``MEMORY_RECALL_MIN_SCORE_PERCENT`` and ``MEMORY_RECALL_RELATIVE_PERCENT`` (of the best
    score) bound the rest. A DM (no guild) recalls nothing. Each call is timed
    (`chat.metrics.MEMORY_RECALL_SECONDS`).
    """
    if guild_id is None or settings.MEMORY_RECALL_K == 0 or not query.strip():
        return ()
    embedder = embedder or default_embedding_model()
    index = guild_memory_index(guild_id=guild_id, embedder=embedder)
    if len(index) == 0:
        return ()
    recalled = recall(
        index,
        query=query,
        query_vector=_query_vector(embedder, query),
        scope=RecallScope(persona_id=persona_id, people=frozenset(people)),
        k=settings.MEMORY_RECALL_K,
        min_score=settings.MEMORY_RECALL_MIN_SCORE_PERCENT / 100,
        relative=settings.MEMORY_RECALL_RELATIVE_PERCENT / 100,
        weights=recall_weights(),
        token_budget=token_budget,
        count_tokens=count_tokens,
    )
    return tuple(_named(memory, people) for memory in recalled)


def memories_shown_before(
    *,
    guild_id: int,
    persona_id: int,
    channel_id: int,
    anchor_id: int | None,
    message_ids: Iterable[int],
    trigger_id: int,
    embedder: EmbeddingModel | None = None,
) -> dict[int, tuple[tuple[str, ...], ...]]:
    """What the persona's earlier turns in the channel showed of its memories since its window
    last moved, and is still remembered: for each earlier turn (its trigger one of
    ``message_ids``, the window's, older than ``trigger_id``) whose window started at
    ``anchor_id``, the message it showed them after (`TurnContext.memories_after`) → the sets
    of lines shown there, oldest first, as the turn records keep them. No anchor: nothing.
    Maintenance and extraction turns send no prompt and count for nothing.

    A line whose memory has been forgotten (``/memory forget``), deleted on the dashboard,
    withdrawn by a privacy choice or edited since is left out, checked against the guild's
    index as it is now (`recall.still_remembered`): the next request no longer shows it, at
    the cost of the provider's cache past that point for one turn. A set left empty goes.

    Only turns of the same anchor count: when the window moves, the provider's cached prefix
    ends at the configuration anyway, and the memories kept until then go with it, so the
    prompt holds the sets of one stride of turns at most."""
    earlier = [message_id for message_id in message_ids if message_id < trigger_id]
    if anchor_id is None or not earlier:
        return {}
    recorded = (
        Turn.objects.filter(
            persona_id=persona_id,
            channel_id=channel_id,
            trigger_message_id__in=earlier,
            window__anchor_message_id=str(anchor_id),
        )
        .exclude(reason__in=[TurnReason.MAINTENANCE, TurnReason.EXTRACTION])
        .order_by("trigger_message_id")
        .values_list("recalled", flat=True)
    )
    rows = [recalled for recalled in recorded if recalled and recalled[0].get("after")]
    if not rows:
        return {}
    index = guild_memory_index(guild_id=guild_id, embedder=embedder or default_embedding_model())
    shown: dict[int, tuple[tuple[str, ...], ...]] = {}
    for recalled in rows:
        lines = tuple(
            memory["line"]
            for memory in recalled
            if still_remembered(index, memory["key"], memory["line"])
        )
        if lines:
            after = int(recalled[0]["after"])
            shown[after] = (*shown.get(after, ()), lines)
    return shown


def _named(memory: RecalledMemory, people: Mapping[tuple[int, str], str]) -> RecalledMemory:
    """A personal memory shown under the name its person has in the window now."""
    record = memory.record
    if record.kind is not MemoryKind.PERSONAL or record.user_id is None:
        return memory
    name = people.get((record.user_id, record.member_id))
    if not name or name == record.subject:
        return memory
    return replace(memory, record=replace(record, subject=name))


def _query_vector(embedder: EmbeddingModel, query: str) -> np.ndarray | None:
    """The query's vector, embedded once for the turns that ask it (`QUERY_VECTORS_KEPT`);
    None when the model fails (ranking then uses keywords alone; a failure is not kept)."""
    key = (embedder.name, query)
    with _lock:
        kept = _query_vectors.get(key)
    if kept is not None:
        return kept
    try:
        vector: np.ndarray = embedder.embed([query])[0]
    except EmbeddingError:
        return None
    with _lock:
        _query_vectors.put(key, vector)
    return vector


def recalled_record(
    *, memories: tuple[RecalledMemory, ...], after: int | None = None
) -> list[dict[str, object]]:
    """What the turn record keeps of each recalled memory (JSON-ready); ``after`` is the
    message the prompt showed them after (`TurnContext.memories_after`), which later turns
    of the window keep them after (`memories_shown_before`)."""
    return [
        {
            "key": memory.record.key,
            "kind": str(memory.record.kind),
            "id": memory.record.id,
            "line": memory_line(memory.record),
            "score": round(memory.score, 4),
            "keyword": round(memory.keyword, 4),
            "vector": round(memory.vector, 4),
            "tokens": memory.tokens,
            "why": memory.why,
            "after": str(after) if after is not None else None,
        }
        for memory in memories
    ]
