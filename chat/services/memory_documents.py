"""Guild documents: an admin's text, Markdown or PDF file read at upload, cut into passages and
embedded in the background; turns recall the passages like memories (`memory_recall`).

- `document_upload(guild_id=…, name=…, data=…)`: read the file (size-capped; a file that cannot
  be read is refused with a sentence and nothing is stored) and store its text, pending.
- `document_embed(document_id=…)`: cut the text into passages (`pipeline.documents`) and embed
  them in batches, counting progress on the row (the Celery task runs it). A provider's
  embedding model (one that reports its tokens: `OpenAIEmbeddings`) is a model call like any
  other: each batch counts against the guild's budget as ``embedding`` (a spent budget fails
  the document with the reason); the offline model runs in this process and costs nothing.
- `document_delete(document_id=…)`.
"""

from __future__ import annotations

import io
import logging
from posixpath import splitext

import numpy as np
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from chat.llm.embeddings import EmbeddingError, EmbeddingModel, vector_bytes
from chat.models import Document, DocumentChunk
from chat.models_memory import memory_version_bump
from chat.pipeline.documents import chunk_text
from chat.pipeline.spend import CallKind, TokenUsage, Verdict, call_cost
from chat.pipeline.tokens import default_token_counter
from chat.services.memory_store import default_embedding_model
from chat.services.spend import (
    Counted,
    Spend,
    SpendSite,
    guild_site,
    prices_table,
    spend_record,
    spend_state,
)
from personas.models import GuildConfig

logger = logging.getLogger(__name__)

EMBED_BATCH = 64
TEXT_TYPES = {".txt": "text", ".text": "text", ".md": "markdown", ".markdown": "markdown"}


class DocumentRefused(Exception):
    """A file that cannot be kept as a document; the message says why, for the admin."""


def document_upload(*, guild_id: int, name: str, data: bytes) -> Document:
    """Read ``data`` (the file ``name``) and store it as a pending document of the guild.

    Text and Markdown must be UTF-8; a PDF must be readable and hold text (a scanned PDF holds
    only images). Raises `DocumentRefused` for a file over ``DOCUMENT_MAX_BYTES``, of another
    type, unreadable or without text; nothing is stored then.
    """
    name = name.strip() or "document"
    if len(data) > settings.DOCUMENT_MAX_BYTES:
        raise DocumentRefused(
            f"{name} is {len(data):,} bytes; a document may be at most "
            f"{settings.DOCUMENT_MAX_BYTES:,} bytes"
        )
    extension = splitext(name.lower())[1]
    if extension == ".pdf":
        kind, text = "pdf", _pdf_text(name, data)
    elif extension in TEXT_TYPES:
        kind = TEXT_TYPES[extension]
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise DocumentRefused(
                f"{name} is not UTF-8 text (byte {error.start} cannot be read)"
            ) from None
    else:
        raise DocumentRefused(f"{name}: only .txt, .md and .pdf files can be documents")
    text = text.replace("\x00", "").strip()
    if not text:
        scanned = " (a scanned PDF?)" if kind == "pdf" else ""
        raise DocumentRefused(f"{name} holds no text{scanned}")
    with transaction.atomic():
        return Document.objects.create(
            guild_id=guild_id, name=name[:200], content_type=kind, size=len(data), text=text
        )


def _pdf_text(name: str, data: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise DocumentRefused(f"{name} is an encrypted PDF: upload it without a password")
        return "\n\n".join(page.extract_text() or "" for page in reader.pages)
    except DocumentRefused:
        raise
    except (PdfReadError, ValueError, KeyError, TypeError, OSError) as error:
        raise DocumentRefused(f"{name} is not a readable PDF: {error}") from None


def document_embed(*, document_id: int, embedder: EmbeddingModel | None = None) -> Document | None:
    """Cut the document into passages and embed them, ``EMBED_BATCH`` at a time, counting
    ``chunks_done``; the document ends ``ready``, or ``failed`` with the embedding error.
    None when the document is gone. Passages are rewritten from the start each time (a retried
    run repeats nothing twice)."""
    document = Document.objects.filter(id=document_id).first()
    if document is None:
        return None
    embedder = embedder or default_embedding_model()
    passages = chunk_text(document.text)
    with transaction.atomic():
        document.chunks.all().delete()
        DocumentChunk.objects.bulk_create(
            DocumentChunk(document=document, position=n, text=passage)
            for n, passage in enumerate(passages)
        )
        document.status = Document.Status.EMBEDDING
        document.chunks_total, document.chunks_done, document.error = len(passages), 0, ""
        document.save()
    chunks = list(document.chunks.order_by("position"))
    site = _paying_site(document.guild_id, embedder)
    for start in range(0, len(chunks), EMBED_BATCH):
        batch = chunks[start : start + EMBED_BATCH]
        try:
            vectors = _embed_counted(embedder, [chunk.text for chunk in batch], site)
        except EmbeddingError as error:
            Document.objects.filter(id=document.id).update(
                status=Document.Status.FAILED, error=str(error)
            )
            memory_version_bump(document.guild_id)
            logger.warning("document %s not embedded: %s", document.id, error)
            document.refresh_from_db()
            return document
        for chunk, vector in zip(batch, vectors, strict=True):
            chunk.embedding, chunk.embedding_model = vector_bytes(vector), embedder.name
        DocumentChunk.objects.bulk_update(batch, ["embedding", "embedding_model"])
        Document.objects.filter(id=document.id).update(chunks_done=start + len(batch))
    with transaction.atomic():
        Document.objects.filter(id=document.id).update(status=Document.Status.READY)
        memory_version_bump(document.guild_id)
    document.refresh_from_db()
    return document


def _paying_site(guild_id: int, embedder: EmbeddingModel) -> SpendSite | None:
    """Who pays for the embedder's calls: the guild, when the embedder is a provider's (it
    reports its tokens); None for the offline model."""
    if getattr(embedder, "embed_counted", None) is None:
        return None
    guild = GuildConfig.objects.filter(guild_id=guild_id).first()
    return guild_site(guild=guild) if guild is not None else None


def _embed_counted(
    embedder: EmbeddingModel, texts: list[str], site: SpendSite | None
) -> np.ndarray:
    """Embed one batch (a row per text); with a paying ``site``: refused (`EmbeddingError`,
    permanent) while its budget is spent, and counted as one ``embedding`` call (the
    provider's tokens, else the tokenizer's)."""
    if site is None:
        return embedder.embed(texts)
    now = timezone.now()
    decision = spend_state(site=site, now=now) if site.limited else None
    if decision is not None and decision.verdict is Verdict.REFUSE:
        refusal = Spend().refusal(decision, site=site, now=now)
        raise EmbeddingError(
            f"a limit said no: {refusal.reason}; embed it again once the budget renews",
            permanent=True,
        )
    embedded = embedder.embed_counted(texts)  # type: ignore[attr-defined]
    reported = embedded.prompt_tokens
    counter = default_token_counter()
    tokens = TokenUsage(
        prompt_tokens=reported if reported is not None else sum(counter.count(t) for t in texts),
        estimated=reported is None,
    )
    price = prices_table().get(embedder.name)
    spend_record(
        site=site,
        now=now,
        counted=Counted(
            CallKind.EMBEDDING,
            embedder.name,
            tokens,
            call_cost(tokens, price=price, reported_usd=None),
        ),
    )
    vectors: np.ndarray = embedded.vectors
    return vectors


def document_delete(*, document_id: int) -> int:
    """Delete a document and its passages; returns how many documents went (0 or 1)."""
    _, by_model = Document.objects.filter(id=document_id).delete()
    return by_model.get(Document._meta.label, 0)


def documents_embed_stale(*, embedder: EmbeddingModel | None = None) -> list[int]:
    """Embed again every ready document with a passage of another model than ``embedder``'s
    (the model changed; each shows its progress again while it runs); returns their ids."""
    embedder = embedder or default_embedding_model()
    stale = sorted(
        set(
            DocumentChunk.objects.filter(document__status=Document.Status.READY)
            .exclude(embedding_model=embedder.name)
            .values_list("document_id", flat=True)
        )
    )
    for document_id in stale:
        document_embed(document_id=document_id, embedder=embedder)
    return stale
