"""The guild configuration file (format version 1), validated with pydantic.

``parse_config_document`` validates a whole document and either returns it or raises
``ConfigError`` listing every problem with the JSON path it was found at, e.g.
``guilds[0].personas[1].context_note.depth: must be at most 100``. Structural checks (types,
ranges, enums, unknown keys) come from the models below; cross-references (unique names, one
main persona, blocks naming known personas) are checked afterwards on the parsed document.
"""

from __future__ import annotations

import datetime as dt
import zoneinfo
from collections.abc import Iterable, Sequence
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)

from personas.models import (
    FETCH_LIMIT_DEFAULT,
    FETCH_LIMIT_MAX,
    FETCH_LIMIT_MIN,
    NOTE_DEPTH_MAX,
    BlockType,
    ChannelMode,
    PrivacyLevel,
)

CONFIG_VERSION = 1
SNOWFLAKE_MAX = 2**63 - 1


class ConfigError(Exception):
    """A configuration document that cannot be imported; ``problems`` are (path, message) pairs."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(f"{path}: {message}" for path, message in self.problems))


def json_path(location: Iterable[str | int]) -> str:
    """A pydantic error location as a JSON path: ``("guilds", 0, "name")`` → ``guilds[0].name``."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "(document)"


def _check_snowflake(value: str) -> str:
    if not value.isascii() or not value.isdigit():
        raise ValueError("must be a Discord id: a string of digits")
    if int(value) > SNOWFLAKE_MAX:
        raise ValueError("is too large to be a Discord id")
    return value


def _check_timezone(value: str) -> str:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"{value!r} is not an IANA time zone name such as 'Europe/Paris'"
        ) from None
    return value


def _check_aware(value: dt.datetime | None) -> dt.datetime | None:
    if value is not None and value.utcoffset() is None:
        raise ValueError("must include a time zone offset, e.g. 2026-12-01T00:00:00Z")
    return value


Snowflake = Annotated[str, Field(strict=True), AfterValidator(_check_snowflake)]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=80)]
Depth = Annotated[int, Field(strict=True, ge=0, le=NOTE_DEPTH_MAX)]
AvatarUrl = Annotated[str, StringConstraints(pattern=r"^https?://\S+$", max_length=500)]
FetchLimit = Annotated[int, Field(strict=True, ge=FETCH_LIMIT_MIN, le=FETCH_LIMIT_MAX)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ContextNoteSpec(_Strict):
    text: str = ""
    depth: Depth = 4


class SampleMessage(_Strict):
    role: Literal["user", "assistant"]
    content: str


class LLMSpec(_Strict):
    model: str | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.7
    max_output_tokens: Annotated[int, Field(strict=True, ge=1)] = 512
    context_window: Annotated[int, Field(strict=True, ge=2)] = 16000
    fallback_models: list[Annotated[str, StringConstraints(min_length=1)]] = []
    vision: bool | None = None
    """The model takes images (``image_url`` parts); null: decided by the model's name
    (`chat.llm.capabilities`)."""
    prefill: bool | None = None
    """The model continues a final ``assistant`` message; null: decided by its name."""
    merge_same_role: bool | None = None
    """Adjacent messages of one role are merged; null: decided by the model's name."""
    reasoning_in_think_tags: bool = False
    """Ask the model to wrap any reasoning in ``<think>`` tags (delivery strips them)."""
    verbatim_tool_nudge: bool = False
    """Remind the model at depth 3 to call tools verbatim (custom endpoints that need it)."""


class ShortTermMemorySpec(_Strict):
    """How the persona keeps its short-term memory: refreshed after ``refresh_every`` of its
    replies; shown in the system prompt (``depth`` null) or at that depth in the dialogue."""

    refresh_every: Annotated[int, Field(strict=True, ge=1, le=1000)] = 5
    depth: Depth | None = None


class PersonaSpec(_Strict):
    name: Name
    main: bool = False
    enabled: bool = True
    avatar_url: (
        Annotated[str, StringConstraints(pattern=r"^https?://\S+$", max_length=500)] | None
    ) = None
    system_prompt: str = ""
    triggers: list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]] = []
    context_note: ContextNoteSpec | None = None
    prefill: str = ""
    deliberate_tool_mode: bool = True
    tools_enabled: bool = True
    short_term_memory: ShortTermMemorySpec = ShortTermMemorySpec()
    force_lowercase: bool = False
    punctuation_splits: bool = False
    sample_dialogue: list[SampleMessage] = []
    llm: LLMSpec = LLMSpec()


class ChannelSpec(_Strict):
    id: Snowflake
    mode: ChannelMode = ChannelMode.REACTIVE
    enabled: bool = True
    message_fetch_limit: FetchLimit | None = None
    context_note: ContextNoteSpec | None = None


class BlockSpec(_Strict):
    persona: Name | None = None
    user_id: Snowflake
    type: BlockType = BlockType.BLOCK
    reason: Annotated[str, StringConstraints(max_length=500)] = ""
    expires_at: Annotated[dt.datetime | None, AfterValidator(_check_aware)] = None


class UserSpec(_Strict):
    id: Snowflake
    privacy: PrivacyLevel = PrivacyLevel.MINIMAL
    blacklisted: bool = False


class GuildSpec(_Strict):
    id: Snowflake
    name: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]
    timezone: Annotated[str, AfterValidator(_check_timezone)] = "UTC"
    message_fetch_limit: FetchLimit = FETCH_LIMIT_DEFAULT
    context_note: ContextNoteSpec | None = None
    personas: list[PersonaSpec] = []
    channels: list[ChannelSpec] = []
    blocks: list[BlockSpec] = []
    users: list[UserSpec] = []


class ConfigDocument(_Strict):
    version: Literal[1]
    guilds: list[GuildSpec]


def parse_config_document(data: object) -> ConfigDocument:
    """Validate a decoded JSON document whole.

    Returns the parsed document. Raises ConfigError with every structural problem (if any), or
    else with every cross-reference problem; nothing is half-accepted.
    """
    try:
        document = ConfigDocument.model_validate(data)
    except ValidationError as error:
        raise ConfigError(
            [(json_path(item["loc"]), _describe(item)) for item in error.errors()]
        ) from None
    problems = list(_cross_reference_problems(document))
    if problems:
        raise ConfigError(problems)
    return document


def _describe(item: dict) -> str:
    message = item["msg"].removeprefix("Value error, ")
    if item["type"] == "extra_forbidden":
        return "is not a known setting (check the spelling)"
    if item["type"] == "missing":
        return "is required"
    if item["type"] == "enum":
        return f"{message}, got {item['input']!r}"
    return message


def _cross_reference_problems(document: ConfigDocument) -> Iterable[tuple[str, str]]:
    """Problems no single field shows: duplicates, two main personas, unknown block personas."""
    yield from _duplicates(
        ((f"guilds[{g}].id", guild.id) for g, guild in enumerate(document.guilds)), "guild id"
    )
    yield from _duplicates(
        (
            (f"guilds[{g}].channels[{c}].id", channel.id)
            for g, guild in enumerate(document.guilds)
            for c, channel in enumerate(guild.channels)
        ),
        "channel id",
    )
    yield from _duplicates(
        (
            (f"guilds[{g}].users[{u}].id", user.id)
            for g, guild in enumerate(document.guilds)
            for u, user in enumerate(guild.users)
        ),
        "user id",
    )
    for g, guild in enumerate(document.guilds):
        where = f"guilds[{g}]"
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
            if persona.llm.context_window <= persona.llm.max_output_tokens:
                yield (
                    f"{where}.personas[{p}].llm.context_window",
                    "must be larger than max_output_tokens",
                )
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


def _fold(name: str | None) -> str | None:
    return None if name is None else name.casefold()


def _duplicates(keyed: Iterable[tuple[str, object]], what: str) -> Iterable[tuple[str, str]]:
    seen: dict[object, str] = {}
    for path, key in keyed:
        if key in seen:
            yield path, f"duplicate {what}; first given at {seen[key]}"
        else:
            seen[key] = path


RowCollection = Literal["personas", "channels", "blocks", "users"]
_ROW_SPECS = {
    "personas": PersonaSpec,
    "channels": ChannelSpec,
    "blocks": BlockSpec,
    "users": UserSpec,
}


def parse_config_row(
    collection: RowCollection | None,
    row: object,
    *,
    persona_names: Sequence[str] = (),
) -> GuildSpec | PersonaSpec | ChannelSpec | BlockSpec | UserSpec:
    """Validate one row of a guild exactly as ``parse_config_document`` validates it in a file.

    ``collection`` names the list the row belongs to (``None``: ``row`` is a guild's own
    settings). The row is placed in a one-guild document and the whole document is validated,
    so structural and cross-reference rules (e.g. ``llm.context_window`` larger than
    ``llm.max_output_tokens``) are the import's own. ``persona_names`` are the guild's personas a
    block may name.

    Returns the row's spec. Raises ConfigError whose paths are relative to the row
    (``llm.temperature``, ``sample_dialogue[1].content``; ``(row)`` for the row as a whole).
    """
    if collection is None:
        guild: object = row
        prefix = "guilds[0]"
    else:
        personas = [{"name": name} for name in persona_names] if collection == "blocks" else []
        guild = {"id": "1", "name": "guild", "personas": personas, collection: [row]}
        prefix = f"guilds[0].{collection}[0]"
    try:
        document = parse_config_document({"version": CONFIG_VERSION, "guilds": [guild]})
    except ConfigError as error:
        raise ConfigError(
            [(_relative_path(path, prefix), message) for path, message in error.problems]
        ) from None
    if collection is None:
        return document.guilds[0]
    spec = getattr(document.guilds[0], collection)[-1]
    assert isinstance(spec, _ROW_SPECS[collection])
    return spec


def _relative_path(path: str, prefix: str) -> str:
    if path == prefix:
        return "(row)"
    if path.startswith(prefix + "."):
        return path[len(prefix) + 1 :]
    return path
