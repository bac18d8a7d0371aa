"""Embedding models behind one small protocol (`EmbeddingModel`), like the chat model's.

Three implementations:

- `WordLlamaEmbeddings`: the offline default. The ``wordllama`` wheel ships its 256-dimension
  weights and tokenizer; it is loaded from the package's own folder with downloads disabled, so
  nothing is fetched at run time. Loaded once per process, on the first text it embeds.
- `OpenAIEmbeddings`: any OpenAI-compatible ``POST {base_url}/embeddings`` endpoint
  (``LLM_EMBEDDING_MODEL`` / ``LLM_EMBEDDING_BASE_URL``); a provider's model, so its calls are
  counted (`OpenAIEmbeddings.embed_counted` gives the tokens the provider reported).
- `HashingEmbeddings`: deterministic vectors from hashed words, for tests and the fake model
  server (texts that share words point the same way).

Every model returns float32 rows of unit length, so a dot product is the cosine similarity.
No Django here: the caller passes settings in.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np
from pydantic import BaseModel, ValidationError

WORDLLAMA_DIMENSIONS = 256
WORDLLAMA_BATCH = 64
"""Texts tokenized and pooled together (each batch is padded to its longest text)."""
HASHING_DIMENSIONS = 64
_WORD = re.compile(r"[a-z0-9]+")


class EmbeddingError(Exception):
    """The embedding model could not embed: the endpoint failed or answered nonsense, or the
    offline model could not be loaded. ``permanent`` is True when retrying cannot help."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent


class EmbeddingModel(Protocol):
    """Turns texts into unit-length float32 vectors.

    ``name`` identifies the model (stored with every vector: a vector of another model is never
    compared with this one's); ``embed`` returns one row per text, shape ``(len(texts), d)``.
    Raises `EmbeddingError`.
    """

    @property
    def name(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` as float32 rows of unit length (a zero row stays zero)."""
    rows = np.asarray(vectors, dtype=np.float32)
    if rows.ndim == 1:
        rows = rows.reshape(1, -1)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)


class WordLlamaEmbeddings:
    """The offline default: WordLlama's 256-d model from the installed ``wordllama`` package.

    WordLlama embeds a text as the mean of its tokens' rows in one embedding matrix. The
    matrix (``weights/l2_supercat_256.safetensors``) and the tokenizer
    (``tokenizers/l2_supercat_tokenizer_config.json``) are read from the package's folder with
    ``safetensors`` and ``tokenizers`` directly, without importing ``wordllama`` itself: its
    import pulls in ``huggingface_hub`` and more (29 MB of a worker's memory) that an offline
    load never uses. `chat/tests/llm/test_embeddings.py` checks the vectors against
    ``WordLlama.load(...).embed``. The first `embed` loads it (under a second); later calls
    reuse it, from any thread.
    """

    name = f"wordllama-l2-supercat-{WORDLLAMA_DIMENSIONS}"

    def __init__(self) -> None:
        self._loaded: tuple[Any, np.ndarray] | None = None
        self._lock = threading.Lock()

    def _model(self) -> tuple[Any, np.ndarray]:
        with self._lock:
            if self._loaded is None:
                self._loaded = _load_wordllama()
            return self._loaded

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, WORDLLAMA_DIMENSIONS), dtype=np.float32)
        tokenizer, matrix = self._model()
        rows = []
        for start in range(0, len(texts), WORDLLAMA_BATCH):
            batch = list(texts[start : start + WORDLLAMA_BATCH])
            encoded = tokenizer.encode_batch(batch, add_special_tokens=False)
            ids = np.clip(np.array([e.ids for e in encoded], dtype=np.int64), 0, len(matrix) - 1)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
            summed = (matrix[ids] * mask[..., np.newaxis]).sum(axis=1, dtype=np.float32)
            rows.append(summed / np.maximum(mask.sum(axis=1, keepdims=True), 1.0))
        return unit_rows(np.concatenate(rows))


def _load_wordllama() -> tuple[Any, np.ndarray]:
    """The tokenizer and the float32 embedding matrix from the ``wordllama`` package's folder
    (found without importing the package). Raises `EmbeddingError` when they cannot be read."""
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(
            "wordllama is not installed (requirements.txt pins it)", permanent=True
        )
    folder = Path(spec.submodule_search_locations[0])
    weights = folder / "weights" / f"l2_supercat_{WORDLLAMA_DIMENSIONS}.safetensors"
    tokenizer_file = folder / "tokenizers" / "l2_supercat_tokenizer_config.json"
    try:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(tokenizer_file))
        tokenizer.enable_padding()
        tokenizer.no_truncation()
        matrix = np.ascontiguousarray(load_file(str(weights))["embedding.weight"], dtype=np.float32)
    except Exception as error:  # the readers raise many kinds
        raise EmbeddingError(
            f"the wordllama model could not be read from {folder}: {error}", permanent=True
        ) from error
    return tokenizer, matrix


class HashingEmbeddings:
    """Deterministic vectors for tests: each lowercase word adds ±1 to one of ``dimensions``
    buckets chosen by its hash, so texts sharing words have a high cosine similarity and the
    same text always gets the same vector."""

    def __init__(self, dimensions: int = HASHING_DIMENSIONS) -> None:
        self.dimensions = dimensions
        self.name = f"hashing-{dimensions}"

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return unit_rows(
            np.array([hashed_vector(t, self.dimensions) for t in texts]).reshape(
                len(texts), self.dimensions
            )
        )


def hashed_vector(text: str, dimensions: int = HASHING_DIMENSIONS) -> list[float]:
    """`HashingEmbeddings`' raw (not normalised) vector of one text."""
    vector = [0.0] * dimensions
    for word in _WORD.findall(text.lower()):
        digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
        bucket = int.from_bytes(digest[:4], "little") % dimensions
        vector[bucket] += 1.0 if digest[4] & 1 else -1.0
    return vector


class _EmbeddingItem(BaseModel):
    index: int
    embedding: list[float]


class _EmbeddingUsage(BaseModel):
    prompt_tokens: int | None = None


class _EmbeddingResponse(BaseModel):
    data: list[_EmbeddingItem]
    usage: _EmbeddingUsage | None = None


@dataclass(frozen=True)
class Embedded:
    """A provider's embeddings: the vectors and the prompt tokens it reported for them (None:
    it reported none)."""

    vectors: np.ndarray
    prompt_tokens: int | None


class OpenAIEmbeddings:
    """``POST {base_url}/embeddings`` with ``{"model", "input": [...]}``: the OpenAI-compatible
    embeddings API (OpenAI, Ollama, vLLM, llama.cpp, LM Studio). Synchronous: callers run it on
    a worker thread. Texts go in batches of ``batch_size``."""

    def __init__(
        self,
        *,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout: float = 30.0,
        batch_size: int = 128,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.name = model
        self._url = base_url.rstrip("/") + "/embeddings"
        self._headers = headers
        self._timeout = timeout
        self._batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_counted(texts).vectors

    def embed_counted(self, texts: Sequence[str]) -> Embedded:
        """`embed`, with the prompt tokens the provider reported (summed over the batches;
        None when any batch reported none)."""
        rows: list[list[float]] = []
        tokens: int | None = 0
        for start in range(0, len(texts), self._batch_size):
            batch, counted = self._batch(list(texts[start : start + self._batch_size]))
            rows.extend(batch)
            tokens = tokens + counted if tokens is not None and counted is not None else None
        if not rows:
            return Embedded(np.zeros((0, 0), dtype=np.float32), tokens)
        return Embedded(unit_rows(np.array(rows, dtype=np.float32)), tokens)

    def _batch(self, texts: list[str]) -> tuple[list[list[float]], int | None]:
        try:
            response = httpx.post(
                self._url,
                json={"model": self.name, "input": texts},
                headers=self._headers,
                timeout=self._timeout,
            )
        except httpx.HTTPError as error:
            raise EmbeddingError(f"{self._url}: {error.__class__.__name__}: {error}") from error
        if response.status_code != 200:
            permanent = 400 <= response.status_code < 500 and response.status_code != 429
            raise EmbeddingError(
                f"{self._url} answered HTTP {response.status_code}: {response.text[:300]}",
                permanent=permanent,
            )
        try:
            parsed = _EmbeddingResponse.model_validate_json(response.content)
        except ValidationError as error:
            raise EmbeddingError(f"{self._url} answered no embeddings list: {error}") from error
        items = sorted(parsed.data, key=lambda item: item.index)
        if len(items) != len(texts) or len({len(item.embedding) for item in items}) > 1:
            raise EmbeddingError(
                f"{self._url} answered {len(items)} vectors for {len(texts)} texts"
            )
        reported = parsed.usage.prompt_tokens if parsed.usage is not None else None
        return [item.embedding for item in items], reported


def vector_bytes(vector: np.ndarray) -> bytes:
    """A vector as stored in the database: little-endian float32 bytes."""
    return np.asarray(vector, dtype="<f4").tobytes()


def vector_from_bytes(data: bytes) -> np.ndarray:
    """The inverse of `vector_bytes`."""
    return np.frombuffer(data, dtype="<f4")
