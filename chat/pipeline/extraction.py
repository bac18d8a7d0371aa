"""Memory extraction: after a conversation goes quiet, one model call proposes the durable facts
its people said about themselves and about the server.

This module writes the request (`build_extraction_messages`), validates the answer
(`parse_extraction`: JSON, checked by pydantic) and decides whom each proposed fact is about
(`resolve_subject`). Storing, deduplicating and bounding them is the store's business.

Pure: the conversation lines, the names and the answer text come in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from chat.pipeline.model_answers import problems_line

SERVER = "server"
"""The ``about`` of a fact about the server itself."""
MAX_FACTS = 12

_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


class ProposedFact(BaseModel):
    """One fact the model proposes: whom it is about (a name as the conversation shows it, or
    ``server``) and the fact, short, in the third person."""

    model_config = ConfigDict(extra="ignore")

    about: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
    fact: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=500)]


class ExtractionAnswer(BaseModel):
    """The model's whole answer: ``{"facts": [...]}``, at most `MAX_FACTS`."""

    model_config = ConfigDict(extra="ignore")

    facts: list[ProposedFact] = Field(default_factory=list, max_length=MAX_FACTS)


class ExtractionError(ValueError):
    """The answer was not the JSON asked for; the message says where."""


def build_extraction_messages(
    *, conversation: Sequence[str], people: Sequence[str], known: Sequence[str]
) -> list[dict[str, str]]:
    """The Chat Completions messages of one extraction.

    ``conversation`` is the stretch to read, one ``Name: text`` line per message, already
    filtered (nobody with partial or full privacy, no blacklisted user). ``people`` are the
    names facts may be about; ``known`` the facts already kept about them, so the model proposes
    only what is new.
    """
    system = (
        "You read a stretch of a Discord conversation and pick out durable facts worth "
        "remembering for weeks: what a person said about themselves (their life, work, "
        "preferences, plans, pets, people close to them) and the server's shared facts "
        "(events, rules, traditions). Never record guesses, passing moods, jokes, what someone "
        "said about another person, or anything a person asked to keep private. Write each "
        "fact short, in the third person, naming the person. Answer with JSON only: "
        '{"facts": [{"about": "<a name from the list, or server>", "fact": "<the fact>"}]}; '
        '{"facts": []} when there is nothing durable.'
    )
    parts = ["People in the conversation: " + (", ".join(people) or "(none)")]
    if known:
        parts += ["", "Already remembered (do not repeat):", *(f"- {fact}" for fact in known)]
    parts += ["", "The conversation:", *(conversation or ["(no messages)"])]
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": "\n".join(parts)},
    ]


def parse_extraction(text: str) -> ExtractionAnswer:
    """The model's answer validated: JSON (a ```json fence around it is tolerated) of the shape
    `ExtractionAnswer` describes. Raises `ExtractionError` naming what is wrong and where."""
    match = _FENCE.match(text)
    body = match.group(1) if match else text.strip()
    try:
        data = json.loads(body)
    except json.JSONDecodeError as error:
        raise ExtractionError(f"the answer is not JSON: {error}") from None
    try:
        return ExtractionAnswer.model_validate(data)
    except ValidationError as error:
        problems = problems_line(error, whole="answer")
        raise ExtractionError(
            f"the answer does not match the shape asked for: {problems}"
        ) from None


def resolve_subject(about: str, people: Mapping[str, tuple[int, str]]) -> tuple[int, str] | None:
    """Whom a proposed fact is about: ``(user_id, member_id)`` of the person the conversation
    shows under the name ``about`` (any case), None when it names nobody of the conversation.
    `SERVER` is handled by the caller."""
    wanted = about.strip().casefold()
    for name, person in people.items():
        if name.casefold() == wanted:
            return person
    return None
