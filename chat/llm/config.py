"""The deployment's model settings, read from ``django.conf.settings`` at call time.

The only Django-aware entry points besides ``chat.llm.recording``: everything else in
``chat.llm`` takes these values as arguments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from chat.llm.base import ModelSpec
from chat.llm.openai_compat import OpenAICompatibleClient

if TYPE_CHECKING:
    from personas.models import Persona


def client_from_settings() -> OpenAICompatibleClient:
    """A client for ``LLM_BASE_URL`` with ``LLM_API_KEY`` and the default ``Timeouts``; close it
    when done (``async with``).

    Raises ``ImproperlyConfigured`` naming ``LLM_BASE_URL`` when it is empty.
    """
    if not settings.LLM_BASE_URL:
        raise ImproperlyConfigured(
            "LLM_BASE_URL is empty: set it to an OpenAI-compatible endpoint, "
            "e.g. http://127.0.0.1:11434/v1"
        )
    return OpenAICompatibleClient(base_url=settings.LLM_BASE_URL, api_key=settings.LLM_API_KEY)


def persona_model_specs(persona: Persona, *, stop: tuple[str, ...] = ()) -> tuple[ModelSpec, ...]:
    """The models to try for ``persona``, in order: its model (``LLM_MODEL`` when it names none),
    then its fallback models; blanks and repeats dropped.

    Every spec carries the persona's temperature and output limit. Vision and prefill support
    stay off (notices and instructions) because no setting records them yet.
    """
    names = [persona.llm_model or settings.LLM_MODEL, *persona.fallback_models]
    unique = dict.fromkeys(name.strip() for name in names if name.strip())
    return tuple(
        ModelSpec(
            name,
            temperature=persona.temperature,
            max_output_tokens=persona.max_output_tokens,
            stop=stop,
        )
        for name in unique
    )
