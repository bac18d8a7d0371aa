"""Discord's JSON error responses: `{"message": "...", "code": N}` plus, for invalid form bodies,
an `errors` tree (`{"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", ...}]}}`).

The world (`state.py`) raises `DiscordAPIError`; the HTTP layers render it. Codes are Discord's
(https://discord.com/developers/docs/topics/opcodes-and-status-codes#json).
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any


class ErrorCode(IntEnum):
    GENERAL = 0
    UNKNOWN_CHANNEL = 10003
    UNKNOWN_GUILD = 10004
    UNKNOWN_MEMBER = 10007
    UNKNOWN_MESSAGE = 10008
    UNKNOWN_ROLE = 10011
    UNKNOWN_USER = 10013
    UNKNOWN_EMOJI = 10014
    UNKNOWN_WEBHOOK = 10015
    UNKNOWN_STICKER = 10060
    UNKNOWN_INTERACTION = 10062
    UNKNOWN_APPLICATION_COMMAND = 10063
    INTERACTION_ACKNOWLEDGED = 40060
    MISSING_ACCESS = 50001
    MISSING_PERMISSIONS = 50013
    MAX_WEBHOOKS = 30007
    EDIT_OTHERS_MESSAGE = 50005
    EMPTY_MESSAGE = 50006
    INVALID_WEBHOOK_TOKEN = 50027
    INVALID_FORM_BODY = 50035
    INVALID_JSON = 50109


class DiscordAPIError(Exception):
    """An error response: HTTP `status`, Discord `code`, `message`, optional form `errors` tree."""

    def __init__(
        self,
        status: int,
        code: ErrorCode,
        message: str,
        *,
        errors: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {message} (code {int(code)})")
        self.status = status
        self.code = code
        self.message = message
        self.errors = errors

    def body(self) -> dict[str, Any]:
        """The JSON body Discord sends for this error."""
        body: dict[str, Any] = {"message": self.message, "code": int(self.code)}
        if self.errors is not None:
            body["errors"] = self.errors
        return body


def invalid_json() -> DiscordAPIError:
    """The 400 code 50109 for a body that does not decode as JSON."""
    return DiscordAPIError(400, ErrorCode.INVALID_JSON, "The request body contains invalid JSON.")


def unknown(code: ErrorCode) -> DiscordAPIError:
    """The 404 for a missing entity, e.g. ``unknown(ErrorCode.UNKNOWN_CHANNEL)``."""
    entity = code.name.removeprefix("UNKNOWN_").lower()
    return DiscordAPIError(404, code, f"Unknown {entity.capitalize()}")


FieldErrors = dict[tuple[str | int, ...], tuple[str, str]]
"""Field path -> (Discord error code, message)."""


def invalid_form_body(field_errors: FieldErrors) -> DiscordAPIError:
    """A 400 code 50035 whose `errors` tree has one `(code, message)` per field path.

    ``{("content",): ("BASE_TYPE_MAX_LENGTH", "Must be 2000 or fewer in length.")}`` becomes
    ``{"content": {"_errors": [{"code": "BASE_TYPE_MAX_LENGTH", "message": "..."}]}}``.
    """
    tree: dict[str, Any] = {}
    for path, (error_code, message) in field_errors.items():
        node = tree
        for part in path:
            node = node.setdefault(str(part), {})
        node.setdefault("_errors", []).append({"code": error_code, "message": message})
    return DiscordAPIError(400, ErrorCode.INVALID_FORM_BODY, "Invalid Form Body", errors=tree)
