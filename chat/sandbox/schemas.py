"""Request bodies and query strings the sandbox accepts, validated like Discord validates them.

Each model lists the fields the sandbox acts on and checks their types and shapes; unknown fields
are ignored, as Discord ignores them. Limits that hold however a message is made (content
length, embed count) are the world's to enforce (`chat.sandbox.state`).

`parse` turns a pydantic failure into Discord's 400 code 50035 with an `errors` tree whose
leaves carry Discord's error codes (`BASE_TYPE_MAX_LENGTH`, `USERNAME_INVALID_CONTAINS`…).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from chat.sandbox.errors import invalid_form_body

Snowflake = Annotated[int, Field(ge=0)]
"""An id; Discord accepts both JSON strings and numbers (discord.py sends numbers in bodies)."""

SchemaT = TypeVar("SchemaT", bound=BaseModel)

_FORBIDDEN_NAME_PARTS = ("discord", "clyde")
_FORBIDDEN_NAMES = ("everyone", "here")


def _check_webhook_name(name: str) -> str:
    """Discord's rules for webhook names (and per-message username overrides)."""
    if not 1 <= len(name) <= 80:
        raise PydanticCustomError("BASE_TYPE_BAD_LENGTH", "Must be between 1 and 80 in length.")
    lowered = name.lower()
    for part in _FORBIDDEN_NAME_PARTS:
        if part in lowered:
            raise PydanticCustomError(
                "USERNAME_INVALID_CONTAINS", 'Username cannot contain "{part}"', {"part": part}
            )
    if lowered in _FORBIDDEN_NAMES:
        raise PydanticCustomError(
            "USERNAME_INVALID", 'Username cannot be "{name}"', {"name": lowered}
        )
    return name


WebhookName = Annotated[str, AfterValidator(_check_webhook_name)]


class _Schema(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class AllowedMentions(_Schema):
    parse: list[Literal["users", "roles", "everyone"]] = []
    users: list[Snowflake] = []
    roles: list[Snowflake] = []
    replied_user: bool = False


class MessageReference(_Schema):
    message_id: Snowflake
    channel_id: Snowflake | None = None
    guild_id: Snowflake | None = None
    fail_if_not_exists: bool = True


class AttachmentRef(_Schema):
    """An `attachments` entry: an upload's index (`files[N]` part) or a kept attachment's id."""

    id: Snowflake
    filename: str | None = None
    description: str | None = None


class MessageCreate(_Schema):
    content: str | None = ""
    """discord.py sends null with a message that is only stickers, as Discord accepts."""
    nonce: int | str | None = None
    enforce_nonce: bool = False
    tts: bool = False
    embeds: list[dict[str, Any]] = []
    allowed_mentions: AllowedMentions | None = None
    message_reference: MessageReference | None = None
    attachments: list[AttachmentRef] = []
    flags: int = 0
    sticker_ids: Annotated[list[Snowflake], Field(max_length=3)] = []


class MessageEdit(_Schema):
    """A PATCH body: `None` fields are left as they are."""

    content: str | None = None
    embeds: list[dict[str, Any]] | None = None
    allowed_mentions: AllowedMentions | None = None
    attachments: list[AttachmentRef] | None = None


class BulkDelete(_Schema):
    messages: Annotated[list[Snowflake], Field(min_length=2, max_length=100)]


class OpenDM(_Schema):
    recipient_id: Snowflake


class AttachmentRefresh(_Schema):
    attachment_urls: Annotated[list[str], Field(min_length=1, max_length=50)]


class WebhookCreate(_Schema):
    name: WebhookName
    avatar: str | None = None


class WebhookExecute(_Schema):
    content: str = ""
    username: WebhookName | None = None
    avatar_url: str | None = None
    tts: bool = False
    embeds: list[dict[str, Any]] = []
    allowed_mentions: AllowedMentions | None = None
    attachments: list[AttachmentRef] = []
    flags: int = 0


class HistoryQuery(_Schema):
    """`GET /channels/{id}/messages`: at most one anchor is used (around, then before, then
    after), as Discord treats them as mutually exclusive."""

    limit: Annotated[int, Field(ge=1, le=100)] = 50
    around: Snowflake | None = None
    before: Snowflake | None = None
    after: Snowflake | None = None


class GuildsQuery(_Schema):
    """`GET /users/@me/guilds`: up to ``limit`` guilds (200 at most) after or before an id."""

    limit: Annotated[int, Field(ge=1, le=200)] = 200
    before: Snowflake | None = None
    after: Snowflake | None = None
    with_counts: bool = False


def _discord_error(error: ErrorDetails) -> tuple[str, str]:
    """`(code, message)` for one pydantic error, in Discord's vocabulary."""
    ctx = error.get("ctx", {})
    match error["type"]:
        case "missing":
            return "BASE_TYPE_REQUIRED", "This field is required"
        case "string_too_long" | "too_long":
            return "BASE_TYPE_MAX_LENGTH", f"Must be {ctx['max_length']} or fewer in length."
        case "string_too_short" | "too_short":
            return "BASE_TYPE_MIN_LENGTH", f"Must be {ctx['min_length']} or more in length."
        case "less_than_equal":
            return "NUMBER_TYPE_MAX", f"int value should be less than or equal to {ctx['le']}."
        case "greater_than_equal":
            return "NUMBER_TYPE_MIN", f"int value should be greater than or equal to {ctx['ge']}."
        case "int_parsing" | "int_type":
            return "NUMBER_TYPE_COERCE", f'Value "{error["input"]}" is not int.'
        case custom if custom.isupper():
            return custom, error["msg"]
        case _:
            return "BASE_TYPE_BAD_TYPE", error["msg"]


def parse(schema: type[SchemaT], data: Mapping[str, Any] | None) -> SchemaT:
    """Validate `data` (a decoded JSON object or a query mapping) as `schema`.

    Raises `DiscordAPIError` 400 code 50035 naming each invalid field; a body that is not a JSON
    object is reported at the root.
    """
    if not isinstance(data, Mapping):
        raise invalid_form_body({("_root",): ("MODEL_TYPE_CONVERT", "Must be an object.")})
    try:
        return schema.model_validate(dict(data))
    except ValidationError as exc:
        raise invalid_form_body(
            {tuple(error["loc"]): _discord_error(error) for error in exc.errors()}
        ) from None


class Identify(_Schema):
    """Gateway op 2's data."""

    token: str
    intents: int | None = None
    shard: tuple[int, int] | None = None


class Resume(_Schema):
    """Gateway op 6's data."""

    token: str
    session_id: str
    seq: int | None = None


class RequestGuildMembers(_Schema):
    """Gateway op 8's data (one guild; `user_ids` wins over `query`)."""

    guild_id: Snowflake
    query: str = ""
    limit: Annotated[int, Field(ge=0)] = 0
    presences: bool = False
    user_ids: list[Snowflake] = []
    nonce: str | None = None
