"""From a model's raw text to the words a persona says.

Two things never reach Discord: reasoning (``<think>…</think>`` blocks, which some models put in
the content itself) and the ``Name:`` label the prompt teaches (every dialogue line is shown as
``Name: content``, so models often start their answer with their own name).
"""

from __future__ import annotations

import re

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_UNCLOSED_LEADING_THINK = re.compile(r"^\s*<think>.*\Z", re.DOTALL | re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """``text`` without ``<think>…</think>`` blocks; other whitespace is kept, because a
    continuation of a prefill may start with the space that separates it from the prefill.

    A leading ``<think>`` that is never closed (the model ran out of tokens while reasoning)
    swallows the rest, so a reasoning-only answer has no words left.
    """
    return _UNCLOSED_LEADING_THINK.sub("", _THINK_BLOCK.sub("", text))


def strip_name_label(text: str, *, name: str) -> str:
    """``text`` without one leading ``Name:`` label (case-insensitive, optionally bold), trimmed.

    Only the persona's own name is removed: ``Someone else: hi`` is the model's content.
    """
    if not name:
        return text.strip()
    label = re.compile(rf"^\s*(\*\*)?{re.escape(name)}(\*\*)?\s*:(\*\*)?\s*", re.IGNORECASE)
    return label.sub("", text, count=1).strip()
