"""The checks of a configuration document that no single field makes (`personas.config_schema`
runs them once the document's structure is valid): unique ids and names, one main persona per
guild and one persona answering DMs, settings that apply only together, lorebook entry ids and
regular expressions, blocks naming known personas."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from personas.case_schema import case_problems, names_problems

if TYPE_CHECKING:
    from personas.config_schema import ConfigDocument, LorebookSpec


def cross_reference_problems(document: ConfigDocument) -> Iterable[tuple[str, str]]:
    """Problems no single field shows: duplicates, two main personas, unknown block personas."""
    yield from _duplicates(
        ((f"guilds[{g}].id", guild.id) for g, guild in enumerate(document.guilds)), "guild id"
    )
    yield from _duplicates(
        ((f"prices[{p}].model", price.model) for p, price in enumerate(document.prices or [])),
        "price for a model",
    )
    yield from _duplicates(
        (
            (f"guilds[{g}].channels[{c}].id", channel.id)
            for g, guild in enumerate(document.guilds)
            for c, channel in enumerate(guild.channels)
        ),
        "channel id",
    )
    dm_personas = [
        (f"guilds[{g}].personas[{p}].answers_dms", persona.name)
        for g, guild in enumerate(document.guilds)
        for p, persona in enumerate(guild.personas)
        if persona.answers_dms
    ]
    for path, _ in dm_personas[1:]:
        yield path, f"only one persona can answer DMs; {dm_personas[0][1]!r} already does"
    for g, guild in enumerate(document.guilds):
        where = f"guilds[{g}]"
        yield from _duplicates(  # a user's privacy is per guild: once in each
            ((f"{where}.users[{u}].id", user.id) for u, user in enumerate(guild.users)),
            "user id",
        )
        yield from _duplicates(
            (
                (f"{where}.personas[{p}].name", persona.name.casefold())
                for p, persona in enumerate(guild.personas)
            ),
            "persona name (names are compared ignoring case)",
        )
        mains = [p for p, persona in enumerate(guild.personas) if persona.main]
        for p in mains[1:]:
            yield (
                f"{where}.personas[{p}].main",
                f"only one persona per guild can be main; "
                f"{guild.personas[mains[0]].name!r} already is",
            )
        for p, persona in enumerate(guild.personas):
            models = [("llm", persona.llm)] + [
                (f"llm.fallback_models[{f}]", fallback)
                for f, fallback in enumerate(persona.llm.fallback_models)
                if not isinstance(fallback, str)
            ]
            for path, model in models:
                if model.instruct_template is not None and model.api != "completions":
                    yield (
                        f"{where}.personas[{p}].{path}.instruct_template",
                        'applies only with "api": "completions"',
                    )
            if persona.llm.context_window <= persona.llm.max_output_tokens:
                yield (
                    f"{where}.personas[{p}].llm.context_window",
                    "must be larger than max_output_tokens",
                )
        for p, persona in enumerate(guild.personas):
            cases = persona.tests or []
            for c, case in enumerate(cases):
                yield from case_problems(case, f"{where}.personas[{p}].tests[{c}]")
            yield from names_problems(
                [
                    (f"{where}.personas[{p}].tests[{c}].name", "", case.name)
                    for c, case in enumerate(cases)
                ]
            )
        books = [(f"{where}.lorebook", guild.lorebook)] + [
            (f"{where}.personas[{p}].lorebook", persona.lorebook)
            for p, persona in enumerate(guild.personas)
        ]
        for path, book in books:
            if book is not None:
                yield from lorebook_problems(book, path)
        known = {persona.name.casefold() for persona in guild.personas}
        for b, block in enumerate(guild.blocks):
            if block.persona is not None and block.persona.casefold() not in known:
                yield (
                    f"{where}.blocks[{b}].persona",
                    f"names no persona of this guild: {block.persona!r}",
                )
        yield from _duplicates(
            (
                (f"{where}.blocks[{b}]", (_fold(block.persona), block.user_id, block.type))
                for b, block in enumerate(guild.blocks)
            ),
            "block (same persona, user and type)",
        )


def lorebook_problems(book: LorebookSpec, where: str) -> Iterable[tuple[str, str]]:
    """What no single field of a lorebook shows: two entries with one id, and keys of a
    ``use_regex`` entry that are not valid patterns."""
    yield from _duplicates(
        (
            (f"{where}.entries[{e}].id", entry.id)
            for e, entry in enumerate(book.entries)
            if entry.id is not None
        ),
        "entry id",
    )
    for e, entry in enumerate(book.entries):
        if not entry.use_regex:
            continue
        for kind in ("keys", "secondary_keys"):
            for k, key in enumerate(getattr(entry, kind)):
                try:
                    re.compile(key.strip())
                except re.error as error:
                    yield (
                        f"{where}.entries[{e}].{kind}[{k}]",
                        f"is not a valid regular expression (use_regex is on): {error}",
                    )


def _fold(name: str | None) -> str | None:
    return None if name is None else name.casefold()


def _duplicates(keyed: Iterable[tuple[str, object]], what: str) -> Iterable[tuple[str, str]]:
    seen: dict[object, str] = {}
    for path, key in keyed:
        if key in seen:
            yield path, f"duplicate {what}; first given at {seen[key]}"
        else:
            seen[key] = path
