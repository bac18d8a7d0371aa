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


_THINK_OPEN = "<think>"


def settled_reply(raw: str, *, name: str, prefill: str = "") -> str:
    """The words of a reply still being written that more text cannot change.

    ``raw`` is the model's text so far and ``prefill`` what the request put in the persona's
    mouth; the reply, once complete, is ``strip_name_label(prefill + strip_reasoning(raw),
    name=name)``, and what this returns is always the start of that (give or take whitespace
    at its end). Held back until decided: a ``<think>`` block not closed yet (and a tail that
    may be the start of ``<think>``), and a start that may still become the ``Name:`` label.
    Leading whitespace is dropped; trailing whitespace is kept, because a blank line there
    ends a paragraph.
    """
    for length in range(min(len(_THINK_OPEN) - 1, len(raw)), 0, -1):
        if _THINK_OPEN.startswith(raw[-length:].lower()):
            raw = raw[:-length]  # perhaps the start of <think>
            break
    text = _THINK_BLOCK.sub("", raw)
    opened = text.lower().find(_THINK_OPEN)
    if opened != -1:
        text = text[:opened]
    text = (prefill + text).lstrip()
    if not name:
        return text
    label = re.compile(rf"^(\*\*)?{re.escape(name)}(\*\*)?\s*:(\*\*)?\s*", re.IGNORECASE)
    found = label.match(text)
    if found is not None:
        rest = text[found.end() :]
        return "" if rest == "*" else rest  # "*" may yet close a bold label ("**Name:**")
    return "" if _may_become_label(text, name) else text


def _may_become_label(text: str, name: str) -> bool:
    """Whether more text could make ``text`` (stripped at its start) the ``Name:`` label."""
    bare = text.removeprefix("**").removeprefix("*")
    if name.lower().startswith(bare.lower()):
        return True
    if not bare.lower().startswith(name.lower()):
        return False
    return not bare[len(name) :].strip(" \t\n*")
