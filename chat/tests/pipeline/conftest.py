"""Shared setup for pipeline tests."""

from __future__ import annotations

import pytest

from chat.pipeline.tokens import O200kTokenCounter


@pytest.fixture(scope="session", autouse=True)
def _loaded_tokenizer() -> None:
    """Load the tokenizer once, before any test, so no hypothesis example pays for it."""
    O200kTokenCounter().count("load")
