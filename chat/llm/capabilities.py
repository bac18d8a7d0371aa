"""What a model can take, by its name: images, a prefill, consecutive messages of one role.

A persona's model settings may say it outright (``llm.vision``, ``llm.prefill``,
``llm.merge_same_role`` in the configuration file; null = decide by name). When they do not,
the model's name decides, by the first matching row of `DEFAULT_CAPABILITIES` (shell-style
patterns, case-insensitive; the provider prefix of a routed name such as
``openai/gpt-4o`` or ``anthropic/claude-3-5-sonnet`` is ignored). An unknown model gets the safe
choice: no images (a notice instead), no prefill (an instruction instead), roles as they come.

Images, prefill, merged roles, by the first matching row:

- ``gpt-4o*``, ``chatgpt-4o*``, ``gpt-4.1*``, ``gpt-4-turbo*``, ``gpt-5*``, ``o1*``, ``o3*``,
  ``o4*``: images.
- ``claude-3*``, ``claude-*-4*``, ``claude-sonnet*``, ``claude-opus*``, ``claude-haiku*``:
  images, prefill, merged roles.
- ``claude*`` (older): prefill, merged roles.
- ``gemini*``, ``gemma3*``, ``gemma-3*``: images, merged roles.
- ``llava*``, ``bakllava*``, ``*vision*``, ``qwen*-vl*``, ``qwen*vl*``, ``*-vl-*``,
  ``pixtral*``, ``minicpm-v*``, ``moondream*``: images.
- ``deepseek*``, ``mistral*``, ``mixtral*``: prefill.
- anything else: none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from fnmatch import fnmatchcase


@dataclass(frozen=True, slots=True)
class ModelCapabilities:
    """What one model takes. ``vision``: images as ``image_url`` parts; ``prefill``: a final
    ``assistant`` message is continued; ``merge_same_role``: the provider needs adjacent
    messages of one role merged (alternating roles)."""

    vision: bool = False
    prefill: bool = False
    merge_same_role: bool = False


_VISION = ModelCapabilities(vision=True)
_ANTHROPIC = ModelCapabilities(vision=True, prefill=True, merge_same_role=True)

DEFAULT_CAPABILITIES: tuple[tuple[tuple[str, ...], ModelCapabilities], ...] = (
    (
        ("gpt-4o*", "chatgpt-4o*", "gpt-4.1*", "gpt-4-turbo*", "gpt-5*", "o1*", "o3*", "o4*"),
        _VISION,
    ),
    (
        ("claude-3*", "claude-*-4*", "claude-sonnet*", "claude-opus*", "claude-haiku*"),
        _ANTHROPIC,
    ),
    (("claude*",), ModelCapabilities(prefill=True, merge_same_role=True)),
    (("gemini*", "gemma3*", "gemma-3*"), ModelCapabilities(vision=True, merge_same_role=True)),
    (
        (
            "llava*",
            "bakllava*",
            "*vision*",
            "qwen*-vl*",
            "qwen*vl*",
            "*-vl-*",
            "pixtral*",
            "minicpm-v*",
            "moondream*",
        ),
        _VISION,
    ),
    (("deepseek*", "mistral*", "mixtral*"), ModelCapabilities(prefill=True)),
)


def default_capabilities(model_name: str) -> ModelCapabilities:
    """What ``model_name`` takes by the table above (the first matching row wins)."""
    name = model_name.strip().lower()
    base = name.rsplit("/", 1)[-1]
    for patterns, capabilities in DEFAULT_CAPABILITIES:
        if any(fnmatchcase(base, pattern) for pattern in patterns):
            return capabilities
    return ModelCapabilities()


def model_capabilities(
    model_name: str,
    *,
    vision: bool | None = None,
    prefill: bool | None = None,
    merge_same_role: bool | None = None,
) -> ModelCapabilities:
    """``model_name``'s capabilities by name, with each override that is not None applied."""
    capabilities = default_capabilities(model_name)
    overrides = {
        key: value
        for key, value in (
            ("vision", vision),
            ("prefill", prefill),
            ("merge_same_role", merge_same_role),
        )
        if value is not None
    }
    return replace(capabilities, **overrides) if overrides else capabilities
