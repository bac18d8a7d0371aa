"""Guild documents on the real database: reading text, Markdown and PDF (size cap, broken files
refused with nothing stored), cutting and embedding with progress, and recall of a passage."""

from __future__ import annotations

import itertools

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import override_settings

from chat.llm.embeddings import EmbeddingError, HashingEmbeddings, OpenAIEmbeddings
from chat.llm.fake_server import FakeLLMServer
from chat.models import Document, DocumentChunk, UsageDay
from chat.pipeline.documents import chunk_text
from chat.pipeline.recall import MemoryKind
from chat.services.memory_documents import (
    DocumentRefused,
    document_delete,
    document_embed,
    document_upload,
    documents_embed_stale,
)
from chat.services.memory_recall import memories_recall_for_turn
from personas.models import GuildConfig, ModelPrice

pytestmark = pytest.mark.django_db

GUILD = 100


def pdf_with_text(text: str) -> bytes:
    """A one-page PDF showing ``text`` in Helvetica, built by hand (objects, xref, trailer)."""
    stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


@pytest.mark.parametrize(
    ("name", "data", "kind", "text"),
    [
        ("rules.md", b"# Rules\n\nBe kind.", "markdown", "# Rules\n\nBe kind."),
        ("notes.txt", "café at noon".encode(), "text", "café at noon"),
        ("menu.pdf", pdf_with_text("The tea house opens at noon"), "pdf", "The tea house"),
    ],
)
def test_text_markdown_and_pdf_are_read_and_kept_pending(name, data, kind, text):
    document = document_upload(guild_id=GUILD, name=name, data=data)
    assert (document.content_type, document.status, document.size) == (kind, "pending", len(data))
    assert document.text.startswith(text)


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("broken.pdf", b"%PDF-1.4\nthis is not a pdf", "broken.pdf is not a readable PDF"),
        ("image.png", b"\x89PNG", "only .txt, .md and .pdf files"),
        ("latin.txt", "café".encode("latin-1"), "latin.txt is not UTF-8 text"),
        ("blank.md", b"  \n ", "blank.md holds no text"),
        ("big.txt", b"x" * 101, "at most 100 bytes"),
    ],
)
@override_settings(DOCUMENT_MAX_BYTES=100)
def test_a_file_that_cannot_be_read_is_refused_and_nothing_is_stored(name, data, reason):
    with pytest.raises(DocumentRefused, match=reason):
        document_upload(guild_id=GUILD, name=name, data=data)
    assert Document.objects.count() == 0


def test_embedding_cuts_passages_and_counts_progress_then_a_turn_recalls_one():
    text = "\n\n".join(
        f"Section {n}. " + ("The lighthouse keeper's log mentions storms. " * 20) for n in range(5)
    )
    text += "\n\nThe tea house on the pier opens at noon on Sundays."
    document = document_upload(guild_id=GUILD, name="harbour.md", data=text.encode())
    embedder = HashingEmbeddings()

    done = document_embed(document_id=document.id, embedder=embedder)

    passages = chunk_text(text)
    assert (done.status, done.chunks_done, done.chunks_total) == (
        "ready",
        len(passages),
        len(passages),
    )
    assert len(passages) > 4
    assert (
        list(DocumentChunk.objects.order_by("position").values_list("text", flat=True)) == passages
    )
    recalled = memories_recall_for_turn(
        guild_id=GUILD,
        persona_id=1,
        people={},
        query="when does the tea house on the pier open?",
        token_budget=2000,
        count_tokens=len,
        embedder=embedder,
    )
    assert recalled[0].record.kind is MemoryKind.DOCUMENT
    assert "tea house on the pier opens at noon" in recalled[0].record.text
    assert recalled[0].record.subject == "harbour.md"

    assert document_delete(document_id=document.id) == 1
    assert DocumentChunk.objects.count() == 0


class FailingEmbeddings:
    name = "failing"

    def embed(self, texts):
        raise EmbeddingError("the endpoint is down")


def test_an_embedding_failure_leaves_the_document_failed_with_the_reason():
    document = document_upload(guild_id=GUILD, name="a.txt", data=b"some text")
    done = document_embed(document_id=document.id, embedder=FailingEmbeddings())
    assert (done.status, done.error, done.chunks_done) == ("failed", "the endpoint is down", 0)


@pytest.mark.parametrize(("size", "overlap"), [(1000, 200), (50, 10)])
def test_passages_overlap_and_cover_the_text(size, overlap):
    text = " ".join(f"word{n}" for n in range(2000))
    passages = chunk_text(text, size=size, overlap=overlap)
    assert all(len(p) <= size for p in passages)
    assert passages[0].startswith("word0 ") and passages[-1].endswith("word1999")
    for first, second in itertools.pairwise(passages):
        assert second.split()[0] in first  # each passage starts inside the previous one


def test_a_change_of_model_embeds_the_documents_again():
    document = document_upload(guild_id=GUILD, name="a.txt", data=b"The pier opens at noon.")
    document_embed(document_id=document.id, embedder=HashingEmbeddings())
    other = HashingEmbeddings(dimensions=32)

    assert documents_embed_stale(embedder=other) == [document.id]
    assert set(DocumentChunk.objects.values_list("embedding_model", flat=True)) == {other.name}
    assert documents_embed_stale(embedder=other) == []


@pytest.mark.django_db(transaction=True)
async def test_a_providers_embeddings_count_against_the_guild_and_a_spent_budget_stops_them():
    guild = await GuildConfig.objects.acreate(guild_id=GUILD, name="Docs")
    await ModelPrice.objects.acreate(model="embedder-3", input="0.02", output="0")
    first = await sync_to_async(document_upload)(
        guild_id=GUILD, name="a.md", data=b"the tea house opens at noon"
    )
    try:
        async with FakeLLMServer() as server:
            embedder = OpenAIEmbeddings(base_url=server.base_url, model="embedder-3")
            done = await sync_to_async(document_embed)(document_id=first.id, embedder=embedder)
            assert done.status == Document.Status.READY
            [row] = [r async for r in UsageDay.objects.all()]
            assert (row.kind, row.model, row.calls, row.estimated_calls) == (
                "embedding",
                "embedder-3",
                1,
                0,
            )
            assert row.prompt_tokens == 6  # what the provider reported for the passage
            assert row.usd_pico == 6 * 2 * 10**4  # 6 tokens at $0.02 a million

            guild.limits = {"tokens_per_day": 5, "usd_per_month": None}
            await guild.asave()
            second = await sync_to_async(document_upload)(guild_id=GUILD, name="b.md", data=b"more")
            refused = await sync_to_async(document_embed)(document_id=second.id, embedder=embedder)
            assert refused.status == Document.Status.FAILED
            assert refused.error.startswith("a limit said no: the guild's budget of 5 tokens a day")
            assert len(server.embedding_bodies) == 1  # the refused batch asked nothing

        offline = await sync_to_async(document_upload)(guild_id=GUILD, name="c.md", data=b"local")
        await sync_to_async(document_embed)(document_id=offline.id, embedder=HashingEmbeddings())
        assert await UsageDay.objects.acount() == 1  # a model in this process costs nothing
    finally:
        await sync_to_async(connections.close_all)()
