"""The macro engine: identity macros and tool conditionals in configured text."""

from __future__ import annotations

import pytest

from chat.pipeline.macros import MacroContext, expand_macros, names_the_user

CONTEXT = MacroContext(bot="Tomori", char="Kaito", user="Alice", tools=frozenset({"read_file"}))


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        ("plain text", "plain text"),
        ("{bot}, {char} and {user}", "Tomori, Kaito and Alice"),
        ("{{if tool:read_file}}call it{{/if}}", "call it"),
        ("{{if tool:web_search}}search{{/if}}", ""),
        ("{{if tool:read_file}}yes{{else}}no{{/if}}", "yes"),
        ("{{if tool:web_search}}yes{{else}}no{{/if}}", "no"),
        ("a{{if tool:read_file}}b{{if tool:web_search}}c{{else}}d{{/if}}e{{/if}}f", "abdef"),
        ("{{if tool:web_search}}{{if tool:read_file}}x{{/if}}{{else}}y{{/if}}", "y"),
        ("{{if tool:read_file}}{user}{{/if}}", "Alice"),
        ("{name}, {{name}} and {User} stay", "{name}, {{name}} and {User} stay"),
        ("{{char}} greets {{user}}", "Kaito greets Alice"),
        ("<BOT> greets <USER>", "Kaito greets Alice"),
        ("{{Char}}, {{USER}}, <bot>, <User>", "Kaito, Alice, Kaito, Alice"),
        ("{{if tool:read_file}}{{user}}{{/if}}", "Alice"),
        ("</user> and <users> stay", "</user> and <users> stay"),
        ("{{if tool:read_file}}unclosed", "{{if tool:read_file}}unclosed"),
        ("stray {{/if}} and {{else}}", "stray {{/if}} and {{else}}"),
        ("{{if tool:read_file}}line\nbreak{{/if}}", "line\nbreak"),
    ],
)
def test_expand_macros(template, expected):
    assert expand_macros(template, CONTEXT) == expected


def test_inserted_names_are_never_expanded_again():
    context = MacroContext(bot="{user}", char="{{if tool:read_file}}x{{/if}}", user="Alice")

    assert expand_macros("{bot}|{char}", context) == "{user}|{{if tool:read_file}}x{{/if}}"


@pytest.mark.parametrize(
    ("template", "expected"),
    [("{user}", True), ("{{user}}", True), ("<USER>", True), ("{char} <BOT>", False)],
)
def test_every_spelling_of_user_counts_as_naming_the_user(template, expected):
    assert names_the_user(template) is expected
