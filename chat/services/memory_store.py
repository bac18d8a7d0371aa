"""Long-term memories: writing, searching and forgetting them (mem0's small surface).

- `memory_add(scope=…, text=…, source=…)`: keep a fact; a near duplicate of one already in the
  same scope updates it instead of adding (`recall.near_duplicate`); bounded per scope.
- `memory_search(guild_id=…, query=…, k=…)`: the guild's memories ranked as a turn ranks them
  (`memory_recall`), for the dashboard and the ``/memory`` commands.
- `memory_forget(scope=…, memory_id=…)`: forget one memory of a scope, or all of them.
- `memories_forget_user(guild_id=…, user_id=…)`: forget everything kept about a person (their
  proxied members included), in one guild or everywhere.

Nothing is kept about a user with ``partial`` or ``full`` privacy: `memory_add` refuses, and
switching to either deletes what exists (`chat.models.forget_memories_on_private`).

The embedding model is passed in (`EmbeddingModel`); `default_embedding_model` gives the
process's own, built once from the settings (offline all-MiniLM-L6-v2 unless
``OFFLINE_EMBEDDING_MODEL`` or ``LLM_EMBEDDING_MODEL`` names another).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import numpy as np
from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet

from chat.llm.embeddings import (
    EmbeddingError,
    EmbeddingModel,
    MiniLMEmbeddings,
    OpenAIEmbeddings,
    WordLlamaEmbeddings,
    vector_bytes,
    vector_from_bytes,
)
from chat.models import Memory
from chat.models_memory import memory_version_bump
from chat.pipeline.recall import MemoryKind, near_duplicate
from chat.pipeline.types import PrivacyLevel
from personas.models import UserPrivacy

logger = logging.getLogger(__name__)

PRIVATE_LEVELS = (PrivacyLevel.PARTIAL, PrivacyLevel.FULL)


class MemoryRefused(Exception):
    """A memory that may not be kept; the message is a sentence for the person who asked."""


@functools.cache
def default_embedding_model() -> EmbeddingModel:
    """The process's embedding model, built once: an OpenAI-compatible endpoint when
    ``LLM_EMBEDDING_MODEL`` is set (on ``LLM_EMBEDDING_BASE_URL``, else ``LLM_BASE_URL``), else
    the offline model ``OFFLINE_EMBEDDING_MODEL`` names (all-MiniLM-L6-v2 or WordLlama, loaded
    on its first use)."""
    if settings.LLM_EMBEDDING_MODEL:
        return OpenAIEmbeddings(
            base_url=settings.LLM_EMBEDDING_BASE_URL or settings.LLM_BASE_URL,
            model=settings.LLM_EMBEDDING_MODEL,
            api_key=settings.LLM_API_KEY,
        )
    if settings.OFFLINE_EMBEDDING_MODEL == "wordllama":
        return WordLlamaEmbeddings()
    return MiniLMEmbeddings()


@dataclass(frozen=True)
class MemoryScope:
    """Whose memories: a person's in a guild (a proxied member's with ``member_id``), the
    guild's, or a persona's. Build one with `personal`, `guild` or `persona`."""

    guild_id: int
    kind: MemoryKind
    user_id: int | None = None
    member_id: str = ""
    persona_id: int | None = None
    subject_name: str = ""

    @classmethod
    def personal(
        cls, guild_id: int, user_id: int, *, member_id: str = "", name: str = ""
    ) -> MemoryScope:
        return cls(guild_id, MemoryKind.PERSONAL, user_id, member_id, None, name)

    @classmethod
    def guild(cls, guild_id: int) -> MemoryScope:
        return cls(guild_id, MemoryKind.GUILD)

    @classmethod
    def persona(cls, guild_id: int, persona_id: int) -> MemoryScope:
        return cls(guild_id, MemoryKind.PERSONA, persona_id=persona_id)

    def rows(self) -> QuerySet[Memory]:
        """The scope's stored memories (a queryset)."""
        rows = Memory.objects.filter(guild_id=self.guild_id, kind=self.kind)
        if self.kind is MemoryKind.PERSONAL:
            return rows.filter(user_id=self.user_id, member_id=self.member_id)
        if self.kind is MemoryKind.PERSONA:
            return rows.filter(Q(persona_id=self.persona_id))
        return rows

    @property
    def limit(self) -> int:
        return {
            MemoryKind.PERSONAL: settings.MEMORY_PERSONAL_LIMIT,
            MemoryKind.GUILD: settings.MEMORY_GUILD_LIMIT,
            MemoryKind.PERSONA: settings.MEMORY_PERSONA_LIMIT,
        }[self.kind]

    @property
    def max_chars(self) -> int:
        if self.kind is MemoryKind.PERSONAL:
            return settings.MEMORY_PERSONAL_MAX_CHARS
        return settings.MEMORY_GUILD_MAX_CHARS

    def describe(self) -> str:
        """The scope in words, for refusals: "Alice", "this server", "this persona"."""
        if self.kind is MemoryKind.PERSONAL:
            return self.subject_name or "this person"
        return "this server" if self.kind is MemoryKind.GUILD else "this persona"


@dataclass(frozen=True)
class MemoryWrite:
    """What `memory_add` did: ``added`` a new memory or ``updated`` the one it repeats."""

    memory: Memory
    outcome: str


def user_is_private(*, user_id: int, guild_id: int) -> bool:
    """True when the user chose ``partial`` or ``full`` privacy in the guild: nothing is kept
    about them there."""
    return UserPrivacy.objects.filter(
        user_id=user_id, guild__guild_id=guild_id, level__in=PRIVATE_LEVELS
    ).exists()


def memory_add(
    *,
    scope: MemoryScope,
    text: str,
    source: Memory.Source | str,
    turn_id: int | None = None,
    message_id: int | None = None,
    embedder: EmbeddingModel | None = None,
) -> MemoryWrite:
    """Keep ``text`` in ``scope``.

    Steps:
        1. Refuse (`MemoryRefused`) an empty text, one longer than the scope's limit
           (``MEMORY_PERSONAL_MAX_CHARS`` / ``MEMORY_GUILD_MAX_CHARS``), and any personal memory
           about a user with partial or full privacy.
        2. Embed the text (an embedding failure keeps it without a vector: recall embeds it
           later; duplicates are then found by words only).
        3. In one transaction, with the scope's rows locked: a near duplicate in the scope
           (same words, or vectors at least ``MEMORY_DUPLICATE_SIMILARITY_PERCENT`` similar)
           takes the new text, source and origin; otherwise a new row is added, unless the
           scope already holds its limit (`MemoryRefused`).
    """
    text = " ".join(text.split())
    if not text:
        raise MemoryRefused("a memory needs some text")
    if len(text) > scope.max_chars:
        raise MemoryRefused(
            f"a memory here holds at most {scope.max_chars} characters; this one has {len(text)}"
        )
    if (
        scope.kind is MemoryKind.PERSONAL
        and scope.user_id is not None
        and user_is_private(user_id=scope.user_id, guild_id=scope.guild_id)
    ):
        raise MemoryRefused(
            f"nothing is remembered about {scope.describe()}: they chose not to be remembered"
        )
    embedder = embedder or default_embedding_model()
    vector = _embed_one(embedder, text)
    values = {
        "text": text,
        "source": str(source),
        "turn_id": turn_id,
        "message_id": message_id,
        "embedding": vector_bytes(vector) if vector is not None else None,
        "embedding_model": embedder.name if vector is not None else "",
    }
    with transaction.atomic():
        existing = list(scope.rows().select_for_update().order_by("id"))
        same_model = [
            (
                row.id,
                row.text,
                vector_from_bytes(row.embedding)
                if row.embedding and row.embedding_model == embedder.name
                else None,
            )
            for row in existing
        ]
        duplicate_id = near_duplicate(
            text,
            vector,
            same_model,
            min_similarity=settings.MEMORY_DUPLICATE_SIMILARITY_PERCENT / 100,
        )
        if duplicate_id is not None:
            memory = next(row for row in existing if row.id == duplicate_id)
            for name, value in values.items():
                setattr(memory, name, value)
            if scope.subject_name:
                memory.subject_name = scope.subject_name
            memory.save()
            return MemoryWrite(memory, "updated")
        if len(existing) >= scope.limit:
            raise MemoryRefused(
                f"{scope.describe()} already has {scope.limit} memories here; "
                "forget one before adding another"
            )
        memory = Memory.objects.create(
            guild_id=scope.guild_id,
            kind=str(scope.kind),
            user_id=scope.user_id,
            member_id=scope.member_id,
            persona_id=scope.persona_id,
            subject_name=scope.subject_name[:100],
            **values,
        )
    return MemoryWrite(memory, "added")


def memory_update(*, memory_id: int, text: str, embedder: EmbeddingModel | None = None) -> Memory:
    """An admin's edit: the memory takes ``text`` (re-embedded), within its scope's character
    limit. Raises `MemoryRefused` for an empty or too long text, `Memory.DoesNotExist` for an
    unknown id."""
    memory = Memory.objects.get(id=memory_id)
    scope = scope_of(memory=memory)
    text = " ".join(text.split())
    if not text or len(text) > scope.max_chars:
        raise MemoryRefused(f"a memory here holds 1 to {scope.max_chars} characters")
    embedder = embedder or default_embedding_model()
    vector = _embed_one(embedder, text)
    memory.text = text
    memory.embedding = vector_bytes(vector) if vector is not None else None
    memory.embedding_model = embedder.name if vector is not None else ""
    memory.save()
    return memory


def scope_of(*, memory: Memory) -> MemoryScope:
    """The scope a stored memory belongs to."""
    return MemoryScope(
        guild_id=memory.guild_id,
        kind=MemoryKind(memory.kind),
        user_id=memory.user_id,
        member_id=memory.member_id,
        persona_id=memory.persona_id,
        subject_name=memory.subject_name,
    )


def memory_forget(*, scope: MemoryScope, memory_id: int | None = None) -> int:
    """Forget the scope's memory ``memory_id`` (only when it is in this scope), or with None
    every memory of the scope. Returns how many were forgotten."""
    rows = scope.rows()
    if memory_id is not None:
        rows = rows.filter(id=memory_id)
    deleted, _ = rows.delete()
    return int(deleted)


def memories_forget_user(*, guild_id: int | None, user_id: int) -> int:
    """Forget every personal memory about ``user_id`` and their proxied members: in the guild
    ``guild_id``, or with None in every guild. Returns how many were forgotten."""
    rows = Memory.objects.filter(kind=MemoryKind.PERSONAL, user_id=user_id)
    if guild_id is not None:
        rows = rows.filter(guild_id=guild_id)
    deleted, _ = rows.delete()
    return deleted


def memories_embed_missing(
    *, guild_id: int | None = None, embedder: EmbeddingModel | None = None, batch: int = 256
) -> int:
    """Embed the memories that have no vector of ``embedder``'s model (written while the
    endpoint failed, or under another model), ``batch`` at a time; returns how many were
    embedded. Stops at the first embedding failure (the rest wait for the next call)."""
    embedder = embedder or default_embedding_model()
    rows = Memory.objects.exclude(embedding_model=embedder.name)
    if guild_id is not None:
        rows = rows.filter(guild_id=guild_id)
    done = 0
    while True:
        pending = list(rows.order_by("id")[:batch])
        if not pending:
            return done
        try:
            vectors = embedder.embed([row.text for row in pending])
        except EmbeddingError as error:
            logger.warning("memories left without vectors: %s", error)
            return done
        with transaction.atomic():
            for row, vector in zip(pending, vectors, strict=True):
                Memory.objects.filter(id=row.id, text=row.text).update(
                    embedding=vector_bytes(vector), embedding_model=embedder.name
                )
            for changed in {row.guild_id for row in pending}:
                memory_version_bump(changed)
        done += len(pending)


def _embed_one(embedder: EmbeddingModel, text: str) -> np.ndarray | None:
    try:
        vector: np.ndarray = embedder.embed([text])[0]
        return vector
    except EmbeddingError as error:
        logger.warning("a memory is kept without a vector for now: %s", error)
        return None
