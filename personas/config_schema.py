"""The guild configuration file (format version 1), validated with pydantic.

``parse_config_bytes`` reads a file's bytes (size limit, UTF-8, JSON) and ``parse_config_document``
validates a decoded document whole; both either return the document or raise ``ConfigError``
listing every problem with the JSON path it was found at, e.g.
``guilds[0].personas[1].context_note.depth: must be at most 100``. No input ends in a traceback:
oversized files, deep nesting, huge numbers and NUL characters are problems like any other.
Structural checks (types, ranges, lengths, counts, enums, unknown keys) come from the models
below and their value types (`personas.config_values`), whose bounds are the database's
(``personas.models``); cross-references (unique names, one main persona, blocks naming known
personas) are checked afterwards on the parsed document (`personas.config_checks`).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StringConstraints,
    Tag,
    ValidationError,
)

from chat.pipeline.lorebook import parse_regex_key
from chat.pipeline.moderation import CATEGORIES, guild_allowed_problem
from chat.pipeline.types import BlockType, PrivacyLevel
from personas.case_schema import CASES_PER_PERSONA_MAX, PersonaCaseSpec
from personas.config_checks import cross_reference_problems
from personas.config_values import (
    SNOWFLAKE_MAX,
    AvatarUrl,
    BlockReason,
    Depth,
    FetchLimit,
    Greeting,
    LimitNotice,
    ModelName,
    Name,
    NoteText,
    Prefill,
    SampleText,
    Snowflake,
    SystemPrompt,
    TokensPerDay,
    TriggerWord,
    UsdPerMillion,
    UsdPerMonth,
    UserTurnsCount,
    UserTurnsSeconds,
    check_aware,
    check_timezone,
)
from personas.models import (
    BLOCKS_PER_GUILD_MAX,
    CHANNELS_PER_GUILD_MAX,
    CONTEXT_WINDOW_MAX,
    CONTEXT_WINDOW_MIN,
    FALLBACK_MODELS_MAX,
    FETCH_LIMIT_DEFAULT,
    GREETINGS_MAX,
    GUILD_NAME_MAX,
    GUILDS_MAX,
    INSTRUCT_SEQUENCE_MAX,
    LORE_CONTENT_MAX,
    LORE_ENTRIES_MAX,
    LORE_KEY_LENGTH_MAX,
    LORE_KEYS_MAX,
    LORE_SCAN_DEPTH_MAX,
    LORE_TEXT_MAX,
    MAX_OUTPUT_TOKENS_MAX,
    MODEL_NAME_MAX,
    MODERATION_ON,
    PERSONAS_PER_GUILD_MAX,
    PRESET_PROMPTS_MAX,
    PRESET_TEXT_MAX,
    PRICES_MAX,
    SAMPLE_DIALOGUE_MAX,
    SHORT_TERM_MEMORY_REFRESH_EVERY_MAX,
    SYSTEM_PROMPT_MAX,
    TEMPERATURE_MAX,
    TEMPERATURE_MIN,
    TIMEZONE_NAME_MAX,
    TRIGGERS_MAX,
    USERS_PER_GUILD_MAX,
    ChannelMode,
    DeliveryMode,
)

CONFIG_VERSION = 1
CONFIG_FILE_MAX_BYTES = 4 * 1024 * 1024
NESTING_MAX = 16  # the format itself nests 6 levels deep
PROBLEMS_SHOWN_MAX = 50
DOCUMENT = "(document)"


class ConfigError(Exception):
    """A configuration document that cannot be imported; ``problems`` are (path, message) pairs.

    ``source`` names the file (or upload) when known. ``report()`` is the text shown to people:
    at most ``PROBLEMS_SHOWN_MAX`` problems, then how many more there are.
    """

    def __init__(self, problems: Sequence[tuple[str, str]], *, source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        super().__init__("\n".join(self.lines()))

    def lines(self, *, limit: int = PROBLEMS_SHOWN_MAX) -> list[str]:
        """``path: message`` for the first ``limit`` problems, then ``… and N more``."""
        lines = [f"{path}: {message}" for path, message in self.problems[:limit]]
        if len(self.problems) > limit:
            lines.append(f"… and {len(self.problems) - limit} more")
        return lines

    def report(self) -> str:
        """The whole report: what was not imported, then one indented line per problem."""
        lines = "\n".join(f"  {line}" for line in self.lines())
        return f"{self.source or 'The file'} was not imported (nothing was changed):\n{lines}"


NAME_OR_OBJECT = ("(name)", "(object)")
"""Tags of the settings that take a name or an object (``instruct_template``, a fallback
model): pydantic puts the chosen one in an error's location, and `json_path` leaves it out."""
SWITCH_OR_LIST = ("(switch)", "(list)")
"""Tags of a setting that takes a word or a list (a guild's ``moderation``), left out alike."""


def _name_or_object(value: object) -> str:
    return NAME_OR_OBJECT[0] if isinstance(value, str) else NAME_OR_OBJECT[1]


def _switch_or_list(value: object) -> str:
    return SWITCH_OR_LIST[1] if isinstance(value, list) else SWITCH_OR_LIST[0]


def check_moderation_category(category: str) -> str:
    problem = guild_allowed_problem(category)
    if problem is not None:
        raise ValueError(problem)
    return category


ModerationSetting = Annotated[
    Annotated[Literal["on", "off"], Tag(SWITCH_OR_LIST[0])]
    | Annotated[
        list[Annotated[str, AfterValidator(check_moderation_category)]],
        Field(max_length=len(CATEGORIES)),
        Tag(SWITCH_OR_LIST[1]),
    ],
    Discriminator(_switch_or_list),
]
"""A guild's reply moderation: ``"on"``, ``"off"``, or the categories allowed in every channel
(checked, never ``sexual/minors``)."""


def json_path(location: Iterable[str | int]) -> str:
    """A pydantic error location as a JSON path: ``("guilds", 0, "name")`` → ``guilds[0].name``."""
    path = ""
    for part in location:
        if part in NAME_OR_OBJECT or part in SWITCH_OR_LIST:
            continue
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or DOCUMENT


def parse_config_bytes(raw: bytes, *, source: str) -> ConfigDocument:
    """Read and validate a configuration file's bytes (the command's file, an upload).

    Checks, in order: at most ``CONFIG_FILE_MAX_BYTES`` bytes, UTF-8 (a byte-order mark is
    allowed), JSON, then ``parse_config_document``. Returns the document; raises ConfigError
    (with ``source`` set) naming every problem found, never any other exception for any input.
    """
    try:
        return parse_config_document(decode_json_file(raw))
    except ConfigError as error:
        error.source = source
        raise


def decode_json_file(raw: bytes, *, max_bytes: int | None = CONFIG_FILE_MAX_BYTES) -> object:
    """The JSON value of an uploaded or read file's bytes (a configuration file, a chat
    preset, a character card): at most ``max_bytes`` bytes (None: the caller bounded them),
    UTF-8 (a byte-order mark is allowed), JSON that Python can read (no number too large,
    no nesting deeper than its recursion limit). Raises ConfigError naming ``(document)``."""
    if max_bytes is not None and len(raw) > max_bytes:
        raise ConfigError([(DOCUMENT, f"is larger than {max_bytes:,} bytes; split it into files")])
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ConfigError([(DOCUMENT, f"is not UTF-8 text (byte {error.start})")]) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(
            [
                (
                    DOCUMENT,
                    f"is not valid JSON: {error.msg} at line {error.lineno}, column {error.colno}",
                )
            ]
        ) from None
    except RecursionError:
        raise ConfigError(
            [(DOCUMENT, f"is nested too deeply (at most {NESTING_MAX} levels)")]
        ) from None
    except ValueError as error:  # e.g. an integer literal of more than 4,300 digits
        raise ConfigError([(DOCUMENT, f"holds a number too large to read ({error})")]) from None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ContextNoteSpec(_Strict):
    text: NoteText = ""
    depth: Depth = 4


class SampleMessageSpec(_Strict):
    role: Literal["user", "assistant"]
    content: SampleText


InstructTemplateName = Literal["chatml", "llama3", "mistral", "alpaca"]
SequenceText = Annotated[str, StringConstraints(max_length=INSTRUCT_SEQUENCE_MAX)]
ModelApiName = Literal["chat", "completions"]


class InstructPresetSpec(BaseModel):
    """A SillyTavern instruct preset (its exported JSON): the fields a text-completion prompt
    is written with. Other fields of the preset are kept as given (and not used)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: SequenceText = ""
    input_sequence: SequenceText = ""
    input_suffix: SequenceText = ""
    output_sequence: SequenceText = ""
    output_suffix: SequenceText = ""
    system_sequence: SequenceText = ""
    system_suffix: SequenceText = ""
    last_output_sequence: SequenceText = ""
    stop_sequence: SequenceText = ""
    wrap: bool = True
    system_same_as_user: bool = False
    sequences_as_stop_strings: bool = True


InstructTemplateSpec = Annotated[
    Annotated[InstructTemplateName, Tag(NAME_OR_OBJECT[0])]
    | Annotated[InstructPresetSpec, Tag(NAME_OR_OBJECT[1])],
    Discriminator(_name_or_object),
]


class FallbackModelSpec(_Strict):
    """A fallback model asked through another API than chat: ``{"model": "…", "api":
    "completions", "instruct_template": "llama3"}``."""

    model: ModelName
    api: ModelApiName = "chat"
    instruct_template: InstructTemplateSpec | None = None
    context_window: (
        Annotated[int, Field(strict=True, ge=CONTEXT_WINDOW_MIN, le=CONTEXT_WINDOW_MAX)] | None
    ) = None
    """The fallback's own context window, when it is smaller than the persona's: attempts on it
    get their own budget. None: the persona's."""


FallbackModel = Annotated[
    Annotated[ModelName, Tag(NAME_OR_OBJECT[0])]
    | Annotated[FallbackModelSpec, Tag(NAME_OR_OBJECT[1])],
    Discriminator(_name_or_object),
]


class LLMSpec(_Strict):
    model: Annotated[str, StringConstraints(max_length=MODEL_NAME_MAX)] | None = None
    api: ModelApiName = "chat"
    """``completions``: a text-completion endpoint (``POST /completions``), its prompt written
    in ``instruct_template`` (``chatml`` when none is given)."""
    instruct_template: InstructTemplateSpec | None = None
    temperature: Annotated[
        float, Field(ge=TEMPERATURE_MIN, le=TEMPERATURE_MAX, allow_inf_nan=False)
    ] = 0.7
    max_output_tokens: Annotated[int, Field(strict=True, ge=1, le=MAX_OUTPUT_TOKENS_MAX)] = 512
    context_window: Annotated[
        int, Field(strict=True, ge=CONTEXT_WINDOW_MIN, le=CONTEXT_WINDOW_MAX)
    ] = 16000
    fallback_models: Annotated[list[FallbackModel], Field(max_length=FALLBACK_MODELS_MAX)] = []
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


def _check_key(value: str) -> str:
    try:
        parse_regex_key(value.strip())
    except re.error as error:
        raise ValueError(f"is not a valid /regular expression/: {error}") from None
    return value


LoreKey = Annotated[
    str, StringConstraints(max_length=LORE_KEY_LENGTH_MAX), AfterValidator(_check_key)
]
LoreText = Annotated[str, StringConstraints(max_length=LORE_TEXT_MAX)]
Extensions = Annotated[dict[str, Any], Field(max_length=100)]


class LoreEntrySpec(_Strict):
    """One lorebook entry: a Character Card V2/V3 ``character_book`` entry's fields, with
    SillyTavern's extensions (depth, role, logic, whole words, probability, recursion) as
    plain fields. ``extensions`` keeps whatever else a card carried, for export."""

    id: Annotated[int, Field(strict=True, ge=0, le=SNOWFLAKE_MAX)] | None = None
    name: LoreText = ""
    comment: LoreText = ""
    keys: Annotated[list[LoreKey], Field(max_length=LORE_KEYS_MAX)] = []
    secondary_keys: Annotated[list[LoreKey], Field(max_length=LORE_KEYS_MAX)] = []
    content: Annotated[str, StringConstraints(max_length=LORE_CONTENT_MAX)] = ""
    enabled: bool = True
    constant: bool = False
    selective: bool = False
    selective_logic: Literal["and_any", "and_all", "not_any", "not_all"] = "and_any"
    insertion_order: Annotated[int, Field(strict=True, ge=-(10**6), le=10**6)] = 100
    priority: Annotated[int, Field(strict=True, ge=-(10**6), le=10**6)] = 0
    case_sensitive: bool = False
    match_whole_words: bool = False
    use_regex: bool = False
    position: Literal["before_char", "after_char", "at_depth"] = "before_char"
    depth: Depth = 4
    role: Literal["system", "user", "assistant"] = "system"
    probability: Annotated[int, Field(strict=True, ge=0, le=100)] = 100
    exclude_recursion: bool = False
    prevent_recursion: bool = False
    extensions: Extensions = {}


class LorebookSpec(_Strict):
    """A persona's or a guild's lorebook (a card's ``character_book``). ``scan_depth``: how
    many of the newest messages are scanned; ``token_budget`` null: a quarter of the model's
    context window."""

    name: LoreText = ""
    description: LoreText = ""
    scan_depth: Annotated[int, Field(strict=True, ge=0, le=LORE_SCAN_DEPTH_MAX)] = 2
    token_budget: Annotated[int, Field(strict=True, ge=1, le=CONTEXT_WINDOW_MAX)] | None = None
    recursive_scanning: bool = False
    extensions: Extensions = {}
    entries: Annotated[list[LoreEntrySpec], Field(max_length=LORE_ENTRIES_MAX)] = []


class _Tavern(BaseModel):
    """SillyTavern's JSON: the fields used are checked; every other field is kept as given."""

    model_config = ConfigDict(extra="allow", frozen=True)


PresetIdentifier = Annotated[str, StringConstraints(min_length=1, max_length=PRESET_TEXT_MAX)]


class PresetPromptSpec(_Tavern):
    identifier: PresetIdentifier
    name: Annotated[str, StringConstraints(max_length=PRESET_TEXT_MAX)] = ""
    role: Literal["system", "user", "assistant"] | None = None
    content: Annotated[str, StringConstraints(max_length=SYSTEM_PROMPT_MAX)] | None = None
    marker: bool = False
    system_prompt: bool = False
    injection_position: Literal[0, 1] = 0
    injection_depth: Depth = 4


class PromptOrderEntrySpec(_Tavern):
    identifier: PresetIdentifier
    enabled: bool = True


class PromptOrderSpec(_Tavern):
    character_id: Annotated[int, Field(strict=True)]
    order: Annotated[list[PromptOrderEntrySpec], Field(max_length=PRESET_PROMPTS_MAX)] = []


class ChatPresetSpec(_Tavern):
    """A SillyTavern Chat Completion preset as exported (``prompts``, ``prompt_order``; its
    sampling settings and other fields are kept and not used)."""

    name: Annotated[str, StringConstraints(max_length=PRESET_TEXT_MAX)] = ""
    prompts: Annotated[list[PresetPromptSpec], Field(min_length=1, max_length=PRESET_PROMPTS_MAX)]
    prompt_order: Annotated[list[PromptOrderSpec], Field(max_length=PRESET_PROMPTS_MAX)] = []


class ShortTermMemorySpec(_Strict):
    """How the persona keeps its short-term memory: refreshed after ``refresh_every`` of its
    replies; shown in the system prompt (``depth`` null) or at that depth in the dialogue."""

    refresh_every: Annotated[
        int, Field(strict=True, ge=1, le=SHORT_TERM_MEMORY_REFRESH_EVERY_MAX)
    ] = 5
    depth: Depth | None = None


class BudgetSpec(_Strict):
    """A budget (DESIGN §3b): tokens a day and US dollars a calendar month, in the guild's time
    zone; a key left out (or null) is not limited."""

    tokens_per_day: TokensPerDay | None = None
    usd_per_month: UsdPerMonth | None = None


class UserTurnsSpec(_Strict):
    """At most ``count`` triggers of one user every ``per_seconds`` seconds."""

    count: UserTurnsCount
    per_seconds: UserTurnsSeconds


class LimitsSpec(BudgetSpec):
    """A guild's limits: its budget, a user's turns, and the notice a spent budget sends (the
    first trigger in each channel gets it, from the main persona; empty: the default text)."""

    user_turns: UserTurnsSpec | None = None
    notice: LimitNotice = ""


class UsdPerMillionSpec(_Strict):
    """A model's prices per million tokens: prompt tokens (``input``), prompt tokens the
    provider read from its cache (``cached_input``; null: ``input``'s price) and reply tokens
    (``output``)."""

    input: UsdPerMillion
    cached_input: UsdPerMillion | None = None
    output: UsdPerMillion


class PriceSpec(_Strict):
    """One row of the operator's price table: the model's name exactly as requests send it."""

    model: ModelName
    usd_per_million: UsdPerMillionSpec


class PersonaSpec(_Strict):
    name: Name
    main: bool = False
    answers_dms: bool = False
    """The persona that answers direct messages (at most one in the deployment; importing one
    takes the role from any other guild's persona). None does: DMs go unanswered."""
    enabled: bool = True
    avatar_url: AvatarUrl | None = None
    system_prompt: SystemPrompt = ""
    triggers: Annotated[list[TriggerWord], Field(max_length=TRIGGERS_MAX)] = []
    context_note: ContextNoteSpec | None = None
    prefill: Prefill = ""
    deliberate_tool_mode: bool = True
    tools_enabled: bool = True
    short_term_memory: ShortTermMemorySpec = ShortTermMemorySpec()
    force_lowercase: bool = False
    punctuation_splits: bool = False
    delivery_mode: DeliveryMode = DeliveryMode.PARAGRAPHS
    """How replies reach Discord: ``paragraphs`` (each as soon as it is written), ``whole``
    (once the model has finished) or ``edit`` (one message edited as it is written)."""
    sample_dialogue: Annotated[list[SampleMessageSpec], Field(max_length=SAMPLE_DIALOGUE_MAX)] = []
    first_mes: Greeting = ""
    """A character card's first message."""
    alternate_greetings: Annotated[list[Greeting], Field(max_length=GREETINGS_MAX)] = []
    """A character card's other greetings."""
    llm: LLMSpec = LLMSpec()
    lorebook: LorebookSpec | None = None
    chat_preset: ChatPresetSpec | None = None
    tests: Annotated[list[PersonaCaseSpec], Field(max_length=CASES_PER_PERSONA_MAX)] | None = None
    """The persona's test cases (`personas.case_schema`); null or absent: left as they are
    (an import with ``--prune`` then deletes them)."""
    limits: BudgetSpec | None = None
    """The persona's own budget, counted besides the guild's (null: only the guild's)."""


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
    reason: BlockReason = ""
    expires_at: Annotated[dt.datetime | None, AfterValidator(check_aware)] = None


class UserSpec(_Strict):
    id: Snowflake
    privacy: PrivacyLevel = PrivacyLevel.MINIMAL
    blacklisted: bool = False


class GuildSpec(_Strict):
    id: Snowflake
    name: Annotated[
        str, StringConstraints(strip_whitespace=True, min_length=1, max_length=GUILD_NAME_MAX)
    ]
    timezone: Annotated[
        str, StringConstraints(max_length=TIMEZONE_NAME_MAX), AfterValidator(check_timezone)
    ] = "UTC"
    message_fetch_limit: FetchLimit = FETCH_LIMIT_DEFAULT
    context_note: ContextNoteSpec | None = None
    lorebook: LorebookSpec | None = None
    planner_model: ModelName | None = None
    """The planner's model in autonomous channels; None: the deployment's LLM_PLANNER_MODEL,
    else the main persona's model."""
    chat_preset: ChatPresetSpec | None = None
    moderation: ModerationSetting = MODERATION_ON
    """Reply moderation (when the deployment has a moderation service): ``"on"``, ``"off"``,
    or the categories allowed in every channel of the guild."""
    moderation_input: bool = False
    """Check a triggering message too: a flagged one is not answered."""
    limits: LimitsSpec | None = None
    """Spend and rate limits (null: none)."""
    personas: Annotated[list[PersonaSpec], Field(max_length=PERSONAS_PER_GUILD_MAX)] = []
    channels: Annotated[list[ChannelSpec], Field(max_length=CHANNELS_PER_GUILD_MAX)] = []
    blocks: Annotated[list[BlockSpec], Field(max_length=BLOCKS_PER_GUILD_MAX)] = []
    users: Annotated[list[UserSpec], Field(max_length=USERS_PER_GUILD_MAX)] = []


class ConfigDocument(_Strict):
    version: Literal[1]
    prices: Annotated[list[PriceSpec], Field(max_length=PRICES_MAX)] | None = None
    """The operator's price table (null: left as it is)."""
    guilds: Annotated[list[GuildSpec], Field(max_length=GUILDS_MAX)]


def parse_config_document(data: object) -> ConfigDocument:
    """Validate a decoded JSON document whole.

    Returns the parsed document. Raises ConfigError with every problem of the raw document
    (nesting deeper than ``NESTING_MAX``, NUL characters in any string or key) and every
    structural problem (if any), or else with every cross-reference problem; nothing is
    half-accepted.
    """
    problems = _raw_problems(data)
    if not any(message.startswith("is nested too deeply") for _, message in problems):
        try:
            document = ConfigDocument.model_validate(data)
        except ValidationError as error:
            problems.extend((json_path(item["loc"]), _describe(item)) for item in error.errors())
        except RecursionError:  # not reachable below NESTING_MAX; kept as a last guard
            problems.append((DOCUMENT, f"is nested too deeply (at most {NESTING_MAX} levels)"))
    if problems:
        raise ConfigError(problems)
    problems = list(cross_reference_problems(document))
    if problems:
        raise ConfigError(problems)
    return document


def _raw_problems(data: object) -> list[tuple[str, str]]:
    """What is wrong with the decoded JSON before any schema applies, in document order:
    containers nested deeper than ``NESTING_MAX`` (not looked into) and NUL characters, which
    PostgreSQL cannot store, in any string or key. Iterative, so any depth is safe."""
    problems: list[tuple[str, str]] = []
    stack: list[tuple[tuple[str | int, ...], object, int]] = [((), data, 0)]
    while stack:
        location, value, depth = stack.pop()
        if isinstance(value, str):
            if "\x00" in value:
                problems.append((json_path(location), "must not contain NUL characters"))
        elif isinstance(value, dict | list):
            if depth >= NESTING_MAX:
                problems.append(
                    (json_path(location), f"is nested too deeply (at most {NESTING_MAX} levels)")
                )
                continue
            items = list(value.items() if isinstance(value, dict) else enumerate(value))
            for key, item in reversed(items):
                if isinstance(key, str) and "\x00" in key:
                    problems.append((json_path(location), "has a key with a NUL character"))
                stack.append(((*location, key), item, depth + 1))
    return problems


def _describe(item: dict) -> str:
    message = item["msg"].removeprefix("Value error, ")
    if item["type"] == "extra_forbidden":
        return "is not a known setting (check the spelling)"
    if item["type"] == "missing":
        return "is required"
    if item["type"] == "enum":
        return f"{message}, got {_short(item['input'])}"
    return message


def _short(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters so a huge input cannot flood the report."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


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
