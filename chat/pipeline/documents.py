"""Documents cut into passages for recall: `chunk_text`.

Passages of about ``size`` characters that overlap by about ``overlap`` (TomoriBot's 1,000 and
200 by default), cut at a paragraph, line, sentence or word boundary when one lies in the last
fifth of a passage, so a passage rarely ends mid-word. Pure.
"""

from __future__ import annotations

CHUNK_SIZE = 1000
CHUNK_OVERLAP = 200
_BOUNDARIES = ("\n\n", "\n", ". ", "? ", "! ", " ")


def chunk_text(text: str, *, size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP) -> list[str]:
    """``text`` as overlapping passages (stripped, none empty); [] for blank text.

    Raises ValueError unless ``0 <= overlap < size``.
    """
    if not 0 <= overlap < size:
        raise ValueError(f"overlap must be in 0..{size - 1}, got {overlap}")
    text = text.strip()
    passages: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + size)
        if end < len(text):
            window = text[start:end]
            for boundary in _BOUNDARIES:
                cut = window.rfind(boundary, int(size * 0.8))
                if cut > 0:
                    end = start + cut + len(boundary)
                    break
        passage = text[start:end].strip()
        if passage:
            passages.append(passage)
        if end >= len(text):
            break
        start = max(end - overlap, start + 1)
    return passages
