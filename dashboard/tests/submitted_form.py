"""What a browser sends when a page's form is submitted unchanged.

`submitted_form` reads the page's edit form (the first ``<form method="post">`` without an
``action``: delete and logout forms have one) and returns its fields as the browser would post
them: text inputs' values, checked checkboxes (``on`` unless they say otherwise), each select's
selected option (else its first), and textareas with the one newline after the start tag
dropped and every line break sent as ``\\r\\n`` (HTML's form submission rule).
"""

from __future__ import annotations

from html.parser import HTMLParser


class _FormReader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.fields: list[tuple[str, str]] = []
        self.state = "before"  # before → inside → after
        self.textarea: tuple[str, list[str]] | None = None
        self.select: tuple[str, list[str], list[str]] | None = None  # name, first, selected
        self.option: tuple[str | None, bool, list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {key: value or "" for key, value in attrs}
        if tag == "form" and self.state == "before":
            if a.get("method", "").lower() == "post" and "action" not in a:
                self.state = "inside"
            return
        if self.state != "inside":
            return
        if tag == "input" and "name" in a and "disabled" not in a:
            kind = a.get("type", "text").lower()
            if kind in ("checkbox", "radio"):
                if "checked" in a:
                    self.fields.append((a["name"], a.get("value") or "on"))
            elif kind not in ("submit", "button", "file", "image", "reset"):
                self.fields.append((a["name"], a.get("value", "")))
        elif tag == "textarea" and "name" in a:
            self.textarea = (a["name"], [])
        elif tag == "select" and "name" in a:
            self.select = (a["name"], [], [])
        elif tag == "option" and self.select is not None:
            self.option = (a.get("value"), "selected" in a, [])

    def handle_data(self, data: str) -> None:
        if self.textarea is not None:
            self.textarea[1].append(data)
        if self.option is not None:
            self.option[2].append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self.state == "inside":
            self.state = "after"
        elif tag == "textarea" and self.textarea is not None:
            name, parts = self.textarea
            text = "".join(parts).removeprefix("\n")
            self.fields.append((name, text.replace("\n", "\r\n")))
            self.textarea = None
        elif tag == "option" and self.option is not None and self.select is not None:
            value, selected, text = self.option
            value = "".join(text).strip() if value is None else value
            self.select[1].append(value)
            if selected:
                self.select[2].append(value)
            self.option = None
        elif tag == "select" and self.select is not None:
            name, options, selected = self.select
            self.fields.append((name, (selected or options)[0]))
            self.select = None


def submitted_form(html: str) -> dict[str, list[str]]:
    """The page's edit form as posted unchanged: field name → values, in document order."""
    reader = _FormReader()
    reader.feed(html)
    assert reader.state != "before", "the page has no edit form"
    posted: dict[str, list[str]] = {}
    for name, value in reader.fields:
        posted.setdefault(name, []).append(value)
    return posted
