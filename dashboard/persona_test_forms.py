"""The persona test case form: a thin wrapper over the case schema (`personas.case_schema`).

The form shows a case's name, its conversation as text (one message a line, ``author:
content``, the last line the message the persona answers; an indented line goes on the
previous message) and its expectations. It edits the stored case as the file writes it and
keeps every key it does not show: a case saved from a turn keeps its times, replies, memories,
notes and baseline while its conversation text is unchanged (rewritten, the conversation is
the lines as written). Every rule is the schema's: ``clean`` validates the case with
`personas.case_schema.parse_case` and puts each problem on the field its JSON path names
(``history[2].author`` on the conversation, as its line number).
"""

from __future__ import annotations

import copy
import re
from typing import Any

from django import forms

from dashboard.form_fields import unix_newlines
from personas.case_schema import PersonaCaseSpec, parse_case
from personas.config_schema import ConfigError

LINE = re.compile(r"^(?P<author>[^:\n]{1,100}):(?P<content>.*)$")
EXPECT_FIELDS = {
    "expect.contains": "contains",
    "expect.not_contains": "not_contains",
    "expect.matches": "matches",
    "expect.max_chars": "max_chars",
    "expect.judge": "judge",
    "expect.similar_to_baseline": "similar_to_baseline",
}


def conversation_text(spec: dict[str, Any]) -> str:
    """A case's conversation as the form shows it: ``author: content`` a line, continuation
    lines indented, the message last."""
    lines = []
    for message in [*spec.get("history", []), spec["message"]]:
        first, *rest = message["content"].split("\n")
        lines.append(f"{message['author']}: {first}")
        lines.extend(f"  {line}" for line in rest)
    return "\n".join(lines)


def conversation_lines(text: str) -> list[dict[str, str]]:
    """The messages a conversation text writes (the inverse of `conversation_text`). Raises
    ``ValidationError`` naming the first line that is neither ``author: content`` nor
    indented."""
    messages: list[dict[str, str]] = []
    for number, line in enumerate(unix_newlines(text).split("\n"), start=1):
        if not line.strip():
            continue
        if line[0].isspace() and messages:
            messages[-1]["content"] += "\n" + line.strip()
            continue
        match = LINE.match(line)
        if match is None or not match["author"].strip():
            raise forms.ValidationError(
                f"line {number} is not “author: what they said”: {line[:60]!r}"
            )
        messages.append({"author": match["author"].strip(), "content": match["content"].strip()})
    if not messages:
        raise forms.ValidationError("write at least the message the persona answers")
    return messages


def _text_list(text: str) -> list[str]:
    """One text a line (blank lines dropped)."""
    return [line.strip() for line in unix_newlines(text).split("\n") if line.strip()]


class CaseForm(forms.Form):
    """A case of the persona's set; ``spec`` holds the parsed case once valid."""

    name = forms.CharField(max_length=200)
    conversation = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}),
        strip=False,
        help_text="One message a line, “author: what they said”; the last line is the "
        "message the persona answers. Indent a line to continue the message above. An author "
        "named like one of the guild's personas speaks as that persona.",
    )
    contains = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Texts the reply must contain, one a line (ignoring case)",
    )
    not_contains = forms.CharField(
        label="Does not contain",
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="Texts the reply must not contain, one a line (ignoring case)",
    )
    matches = forms.CharField(
        label="Matches",
        required=False,
        help_text="A regular expression found in the reply (Python's); ^…$ for the whole reply",
    )
    max_chars = forms.IntegerField(label="At most (characters)", required=False)
    judge = forms.CharField(
        label="Judge's rubric",
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="The judge model answers yes or no, with its reason (JUDGE_MODEL, else the "
        "persona's model)",
    )
    similar_to_baseline = forms.FloatField(
        label="Similar to the baseline (0–1)",
        required=False,
        help_text="The embeddings' cosine at least this (a case saved from a turn has a baseline)",
    )

    def __init__(self, data: Any = None, *, stored: dict[str, Any] | None = None, **kwargs: Any):
        self.stored = copy.deepcopy(stored) if stored is not None else None
        if stored is not None and data is None:
            expect = stored.get("expect", {})
            kwargs.setdefault(
                "initial",
                {
                    "name": stored["name"],
                    "conversation": conversation_text(stored),
                    "contains": "\n".join(expect.get("contains", [])),
                    "not_contains": "\n".join(expect.get("not_contains", [])),
                    "matches": expect.get("matches", ""),
                    "max_chars": expect.get("max_chars"),
                    "judge": expect.get("judge", ""),
                    "similar_to_baseline": expect.get("similar_to_baseline"),
                },
            )
        super().__init__(data, **kwargs)
        self.spec: PersonaCaseSpec | None = None

    def clean_conversation(self) -> list[dict[str, str]]:
        return conversation_lines(self.cleaned_data["conversation"])

    def to_case(self, cleaned: dict[str, Any]) -> dict[str, Any]:
        """The edited case: the stored one (if any) with each shown key set from its field."""
        case = copy.deepcopy(self.stored) if self.stored is not None else {}
        case["name"] = cleaned["name"]
        messages = cleaned["conversation"]
        if self.stored is None or messages != conversation_lines(conversation_text(self.stored)):
            case["history"], case["message"] = messages[:-1], messages[-1]
            for key in ("earlier_memories",):  # they point at history lines by number
                case.pop(key, None)
        expect = dict(case.get("expect", {}))
        lists = {
            "contains": _text_list(cleaned["contains"] or ""),
            "not_contains": _text_list(cleaned["not_contains"] or ""),
        }
        values = {
            **lists,
            "matches": cleaned["matches"] or None,
            "max_chars": cleaned["max_chars"],
            "judge": unix_newlines(cleaned["judge"]) if cleaned["judge"] else None,
            "similar_to_baseline": cleaned["similar_to_baseline"],
        }
        for key, value in values.items():
            if value in (None, []):
                expect.pop(key, None)
            else:
                expect[key] = value
        case["expect"] = expect
        return case

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if self.errors:
            return cleaned
        try:
            self.spec = parse_case(self.to_case(cleaned))
        except ConfigError as error:
            self.add_problems(error.problems)
        return cleaned

    def add_problems(self, problems: list[tuple[str, str]]) -> None:
        """(JSON path, message) problems on the fields showing them; a problem of a message on
        the conversation, naming which message (and which key of it)."""
        history = len(self.cleaned_data.get("conversation") or []) - 1
        for path, message in problems:
            field = next((f for p, f in EXPECT_FIELDS.items() if path.startswith(p)), None)
            if path == "name":
                self.add_error("name", message)
            elif field is not None:
                self.add_error(field, message)
            elif path.startswith(("history[", "message")):
                index = history if path.startswith("message") else int(path[8 : path.index("]")])
                key = path.split(".", 1)[1] if "." in path else ""
                self.add_error(
                    "conversation", f"message {index + 1}{f' ({key})' if key else ''}: {message}"
                )
            elif path == "history":
                self.add_error("conversation", message)
            else:
                self.add_error(None, f"{path}: {message}")


class TestFileForm(forms.Form):
    """A test file to import into the persona's set (`personas.case_schema.CaseFile`)."""

    file = forms.FileField(label="Test file (JSON)")
