"""Embedding models: the offline all-MiniLM-L6-v2 default and WordLlama, the OpenAI-compatible
endpoint (against the fake model server over HTTP) and the deterministic hashing model."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from chat.llm.embeddings import (
    EmbeddingError,
    HashingEmbeddings,
    MiniLMEmbeddings,
    OpenAIEmbeddings,
    WordLlamaEmbeddings,
    hashed_vector,
    unit_rows,
    vector_bytes,
    vector_from_bytes,
)
from chat.llm.fake_server import FakeLLMServer

MINILM = MiniLMEmbeddings()


def test_minilm_unquantized_gives_sentence_transformers_vectors():
    # The first values of sentence-transformers' own all-MiniLM-L6-v2 vector for "hello world".
    expected = [-0.034478, 0.03102, 0.00673, 0.02611, -0.039362]

    [vector] = MiniLMEmbeddings(quantized=False).embed(["hello world"])

    assert vector.shape == (384,) and vector.dtype == np.float32
    assert np.allclose(vector[:5], expected, atol=1e-5)
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-5)


def test_minilm_int8_vectors_point_where_the_exact_ones_do():
    texts = ["hello world", "I have a border collie named Pixel", "what's my dog called?"]
    exact = MiniLMEmbeddings(quantized=False).embed(texts)
    kept = MINILM.embed(texts)

    assert kept.shape == (3, 384) and np.allclose(np.linalg.norm(kept, axis=1), 1.0, atol=1e-5)
    assert ((exact * kept).sum(axis=1) > 0.998).all()
    assert np.abs(exact @ exact.T - kept @ kept.T).max() < 0.02


def test_minilm_finds_a_paraphrase_that_shares_no_word():
    facts = [
        "I have a border collie named Pixel",
        "I teach chemistry at a secondary school",
        "I started bouldering at a gym called Crux",
    ]
    vectors = MINILM.embed([*facts, "what's my dog called again?", "what do I do for a living?"])

    assert int(np.argmax(vectors[:3] @ vectors[3])) == 0
    assert int(np.argmax(vectors[:3] @ vectors[4])) == 1


def test_minilm_vectors_do_not_depend_on_the_batch():
    short, long = "hi", "a much longer text that pads the short one with many tokens " * 3
    alone = MINILM.embed([short, long])
    together = MINILM.embed([long, *["filler"] * 40, short])  # two batches, other padding

    assert np.allclose(alone[0], together[-1], atol=1e-5)
    assert np.allclose(alone[1], together[0], atol=1e-5)


def test_minilm_cuts_a_long_text_at_its_token_limit():
    words = " ".join(f"word{n}" for n in range(2000))
    [vector] = MINILM.embed([words])
    [again] = MINILM.embed([words + " and more words after the limit"])
    assert np.allclose(vector, again, atol=1e-6)


def test_wordllama_loads_from_its_package_and_ranks_a_paraphrase_first():
    model = WordLlamaEmbeddings()
    facts = ["Alice works as a nurse", "Alice keeps two cats", "Bob sings in a choir"]

    vectors = model.embed([*facts, "does alice have pets", "who is a singer"])

    assert vectors.shape == (5, 256) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert int(np.argmax(vectors[:3] @ vectors[3])) == 1
    assert int(np.argmax(vectors[:3] @ vectors[4])) == 2


def test_hashing_vectors_are_deterministic_and_share_direction_with_shared_words():
    model = HashingEmbeddings()
    a, b, c = model.embed(["green tea", "likes green tea", "a red truck"])
    assert np.array_equal(a, model.embed(["green tea"])[0])
    assert float(a @ b) > float(a @ c)


async def test_the_openai_compatible_endpoint_is_asked_in_batches_and_read_in_order():
    async with FakeLLMServer() as server:
        model = OpenAIEmbeddings(base_url=server.base_url, model="embed-small", batch_size=2)
        vectors = await asyncio.to_thread(model.embed, ["one fish", "two fish", "red fish"])

        assert [body["input"] for body in server.embedding_bodies] == [
            ["one fish", "two fish"],
            ["red fish"],
        ]
        assert server.embedding_bodies[0]["model"] == "embed-small"
    expected = unit_rows(np.array([hashed_vector(t) for t in ["one fish", "two fish", "red fish"]]))
    assert np.allclose(vectors, expected)


async def test_an_endpoint_error_is_an_embedding_error_naming_the_url():
    async with FakeLLMServer() as server:
        model = OpenAIEmbeddings(base_url=server.base_url + "/missing", model="m")
        with pytest.raises(EmbeddingError, match="/missing/embeddings answered HTTP 404") as error:
            await asyncio.to_thread(model.embed, ["x"])
    assert error.value.permanent


def test_an_unreachable_endpoint_is_a_transient_embedding_error():
    model = OpenAIEmbeddings(base_url="http://127.0.0.1:9/v1", model="m", timeout=1)
    with pytest.raises(EmbeddingError) as error:
        model.embed(["x"])
    assert not error.value.permanent


def test_vectors_round_trip_through_their_stored_bytes():
    vector = unit_rows(np.array([3.0, 4.0]))[0]
    assert np.array_equal(vector_from_bytes(vector_bytes(vector)), vector)
    assert len(vector_bytes(vector)) == 8


def test_wordllama_vectors_are_the_packages_own():
    import os

    import wordllama
    from wordllama import WordLlama

    texts = ["Alice keeps two cats", "émigré café — naïve 🙂", "word " * 300]
    theirs = WordLlama.load(
        cache_dir=os.path.dirname(wordllama.__file__), disable_download=True
    ).embed(texts, norm=True)
    assert np.allclose(WordLlamaEmbeddings().embed(texts), theirs, atol=1e-5)
    # An empty text has no tokens: a zero vector (theirs divides by a zero norm).
    assert not np.any(WordLlamaEmbeddings().embed([""]))
