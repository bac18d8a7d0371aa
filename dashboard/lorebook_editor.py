"""The lorebook editor: a persona's lorebook as one form row per entry.

Each row edits an entry's keys, secondary keys and their logic, content, constant, enabled,
order, position (or depth and role), case and whole-word switches; the fields the rows do not
show (an entry's id, name, comment, priority, probability, recursion switches, extensions; the
book's own settings) are kept as they were. The rows become the persona's configuration row
with the new book, validated by the import's rules (a problem names its entry) and saved as
one; a row with neither keys nor content, or marked *remove*, is dropped.
"""

from __future__ import annotations

from typing import Any

from django.http import QueryDict

ROW_FIELDS = ("keys", "secondary_keys", "content", "selective_logic", "insertion_order",
              "position", "depth", "role")  # fmt: skip
ROW_SWITCHES = ("constant", "enabled", "case_sensitive", "match_whole_words", "remove")
LOGIC_CHOICES = (("and_any", "AND ANY"), ("and_all", "AND ALL"), ("not_any", "NOT ANY"),
                 ("not_all", "NOT ALL"))  # fmt: skip
POSITION_CHOICES = (("before_char", "Before the character"), ("after_char", "After the character"),
                    ("at_depth", "At a depth"))  # fmt: skip
ROLE_CHOICES = (("system", "system"), ("user", "user"), ("assistant", "assistant"))
BLANK_ENTRY: dict[str, Any] = {
    "keys": [], "secondary_keys": [], "content": "", "selective_logic": "and_any",
    "insertion_order": 100, "position": "before_char", "depth": 4, "role": "system",
    "constant": False, "enabled": True, "case_sensitive": False, "match_whole_words": False,
}  # fmt: skip


def _words(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _number(text: str, default: int) -> int | str:
    """An integer from the form; the text itself when it is not one (the schema says why)."""
    try:
        return int(text.strip())
    except ValueError:
        return text.strip() or default


def rows_for(book: dict | None) -> list[dict[str, Any]]:
    """The editor's rows for a stored book: each entry with its keys as comma lists."""
    rows = []
    for entry in (book or {}).get("entries", []):
        row = {**BLANK_ENTRY, **entry}
        row["keys_text"] = ", ".join(row["keys"])
        row["secondary_text"] = ", ".join(row["secondary_keys"])
        rows.append(row)
    return rows


def book_from_rows(data: QueryDict, stored: dict | None) -> dict[str, Any]:
    """The lorebook the posted rows describe (``entries-N-field`` inputs, ``entry_count`` of
    them), over ``stored``: row N keeps the stored entry N's other fields."""
    book = dict(stored or {})
    old = list(book.get("entries", []))
    entries = []
    for index in range(int(data.get("entry_count", "0") or 0)):
        prefix = f"entries-{index}-"
        if data.get(prefix + "remove"):
            continue
        keys = _words(data.get(prefix + "keys", ""))
        content = data.get(prefix + "content", "")
        if not keys and not content.strip():
            continue
        entry = dict(old[index]) if index < len(old) else {}
        secondary = _words(data.get(prefix + "secondary_keys", ""))
        entry.update(
            keys=keys,
            secondary_keys=secondary,
            selective=bool(secondary),
            selective_logic=data.get(prefix + "selective_logic", "and_any"),
            content=content,
            insertion_order=_number(data.get(prefix + "insertion_order", ""), 100),
            position=data.get(prefix + "position", "before_char"),
            depth=_number(data.get(prefix + "depth", ""), 4),
            role=data.get(prefix + "role", "system"),
            **{name: bool(data.get(prefix + name)) for name in ROW_SWITCHES if name != "remove"},
        )
        entries.append(entry)
    book["entries"] = entries
    return book
