"""Application commands and interactions, as Discord's API v10 serves them to a bot.

`Interactions` belongs to a `Sandbox` (`sandbox.interactions`) and keeps:

- the **registered commands** per application and scope (global, or one guild), replaced whole by
  ``PUT /applications/{app}/commands`` and ``PUT /applications/{app}/guilds/{guild}/commands``
  (a command keeps its id while its name and type stay);
- the **interactions** users start (`run`): each is dispatched as INTERACTION_CREATE carrying
  the invoking member with ``permissions`` (a string bitfield), the command's ``data`` (options,
  or the target message in ``resolved`` for a message command), a ``token`` and
  ``app_permissions``; and recorded (`InteractionRecord`) with every answer the bot gives it,
  each with its flags, files and how long after the dispatch it came.

Discord's rules kept here: the first callback must come within `ACK_SECONDS` of the dispatch
(later: 404 Unknown interaction), only once (400 code 40060); ``@original`` edits and
follow-ups need that callback first and a token younger than `TOKEN_SECONDS`. An ephemeral
message (flag 64) is seen only by the invoking user: it never enters the channel's history and
no gateway event announces it. A command whose ``default_member_permissions`` the member lacks
is not offered by Discord's client (`run` refuses it) unless the guild's integration settings
override that (`run(..., overridden=True)`), which is why a bot checks permissions itself.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chat.sandbox.errors import DiscordAPIError, ErrorCode, unknown
from chat.sandbox.records import Message, Upload

if TYPE_CHECKING:
    from chat.sandbox.state import Sandbox

APPLICATION_COMMAND = 2
"""The interaction type of a command invocation."""
CHAT_INPUT, USER_COMMAND, MESSAGE_COMMAND = 1, 2, 3
SUB_COMMAND, SUB_COMMAND_GROUP = 1, 2
CALLBACK_MESSAGE = 4
"""CHANNEL_MESSAGE_WITH_SOURCE: answer now."""
CALLBACK_DEFERRED = 5
"""DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE: "thinking…", the answer follows as an @original edit."""
EPHEMERAL = 1 << 6
LOADING = 1 << 7
ACK_SECONDS = 3.0
TOKEN_SECONDS = 15 * 60.0
ATTACHMENT_SIZE_LIMIT = 10 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class InteractionAnswer:
    """One thing the bot did to answer: the callback (``via="callback"``, with its ``type``),
    an edit of the original response (``"original"``) or a follow-up (``"followup"``)."""

    via: str
    type: int | None
    content: str
    flags: int
    files: tuple[Upload, ...]
    embeds: tuple[Mapping[str, Any], ...]
    seconds: float
    """Since the INTERACTION_CREATE dispatch."""

    @property
    def ephemeral(self) -> bool:
        return bool(self.flags & EPHEMERAL)


@dataclass(slots=True)
class InteractionRecord:
    """An interaction a user started, and how the bot answered it."""

    id: int
    token: str
    application_id: int
    guild_id: int
    channel_id: int
    user_id: int
    command: str
    """The invoked name, subcommands joined by spaces (``"memory show"``, ``"Why (not)?"``)."""
    started: float
    answers: list[InteractionAnswer] = field(default_factory=list)
    original: Message | None = None
    original_flags: int = 0
    watchers: list[Callable[[], None]] = field(default_factory=list)
    """Called after each answer (the control API waits on them)."""

    def add(self, answer: InteractionAnswer) -> None:
        self.answers.append(answer)
        for watcher in list(self.watchers):
            watcher()

    @property
    def acknowledged(self) -> bool:
        return any(a.via == "callback" for a in self.answers)

    @property
    def deferred(self) -> bool:
        return any(a.via == "callback" and a.type == CALLBACK_DEFERRED for a in self.answers)

    @property
    def answered(self) -> bool:
        """Whether the user sees an answer: an immediate message, or a deferral followed by an
        edit or a follow-up."""
        return any(a.via != "callback" or a.type == CALLBACK_MESSAGE for a in self.answers)

    @property
    def content(self) -> str:
        """What the user reads last: the newest answer that carries a message."""
        shown = [a for a in self.answers if a.via != "callback" or a.type == CALLBACK_MESSAGE]
        return shown[-1].content if shown else ""

    @property
    def files(self) -> tuple[Upload, ...]:
        return tuple(f for a in self.answers for f in a.files)

    def describe(self) -> dict[str, Any]:
        """As the control API reports it (files by name and size)."""
        return {
            "id": str(self.id),
            "command": self.command,
            "user_id": str(self.user_id),
            "channel_id": str(self.channel_id),
            "answered": self.answered,
            "content": self.content,
            "answers": [
                {
                    "via": a.via,
                    "type": a.type,
                    "content": a.content,
                    "ephemeral": a.ephemeral,
                    "files": [{"filename": f.filename, "size": len(f.data)} for f in a.files],
                    "seconds": round(a.seconds, 3),
                }
                for a in self.answers
            ],
        }


class Interactions:
    """The application commands and interactions of one `Sandbox`."""

    def __init__(self, sandbox: Sandbox, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._sandbox = sandbox
        self._clock = clock
        self._commands: dict[tuple[int, int | None], list[dict[str, Any]]] = {}
        self._records: dict[int, InteractionRecord] = {}
        self._by_token: dict[str, InteractionRecord] = {}

    # ----------------------------------------------------------------------- commands

    def commands(self, application_id: int, guild_id: int | None = None) -> list[dict[str, Any]]:
        """The registered commands of the scope (None: global), as ``GET`` returns them."""
        self._check_application(application_id)
        if guild_id is not None:
            self._sandbox.guild(guild_id)
        return [dict(c) for c in self._commands.get((application_id, guild_id), [])]

    def sync(
        self, application_id: int, guild_id: int | None, commands: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        """Bulk overwrite: the scope's commands become ``commands``. A command that keeps its
        name and type keeps its id. Returns the stored commands."""
        self._check_application(application_id)
        if guild_id is not None:
            self._sandbox.guild(guild_id)
        scope = (application_id, guild_id)
        before = {(c["name"], c["type"]): c for c in self._commands.get(scope, [])}
        stored = []
        for spec in commands:
            kind = int(spec.get("type") or CHAT_INPUT)
            name = spec.get("name")
            if not isinstance(name, str) or not name:
                raise DiscordAPIError(400, ErrorCode.INVALID_FORM_BODY, "Invalid Form Body")
            previous = before.get((name, kind))
            permissions = spec.get("default_member_permissions")
            command = {
                "id": previous["id"] if previous else str(self._sandbox.next_id()),
                "application_id": str(application_id),
                "version": str(self._sandbox.next_id()),
                "type": kind,
                "name": name,
                "description": spec.get("description", "") if kind == CHAT_INPUT else "",
                "options": list(spec.get("options") or []),
                "default_member_permissions": None if permissions is None else str(permissions),
                "dm_permission": spec.get("dm_permission", True),
                "contexts": spec.get("contexts"),
                "integration_types": spec.get("integration_types", [0]),
                "nsfw": bool(spec.get("nsfw", False)),
            }
            if guild_id is not None:
                command["guild_id"] = str(guild_id)
            stored.append(command)
        self._commands[scope] = stored
        return [dict(c) for c in stored]

    # --------------------------------------------------------------------- interactions

    def run(
        self,
        channel_id: int,
        user_id: int,
        name: str,
        options: Mapping[str, Any] | None = None,
        *,
        target_message_id: int | None = None,
        overridden: bool = False,
    ) -> InteractionRecord:
        """``user_id`` invokes a command in ``channel_id``: ``name`` is the command with its
        subcommands (``"memory forget"``), ``options`` the option values by name; for a
        message command, ``target_message_id`` is the message it was used on.

        Raises `DiscordAPIError`: 404 (code 10063) when no such command is registered for
        the guild or globally; 403 (code 50013) when the member lacks the command's
        ``default_member_permissions`` and ``overridden`` is false; 400 for an option the
        command does not have, a missing required option, or a value outside the choices.
        Dispatches INTERACTION_CREATE and returns the record the bot's answers go to.
        """
        sandbox = self._sandbox
        channel = sandbox.channel(channel_id)
        guild_id = int(channel["guild_id"])
        member = sandbox.member(guild_id, user_id)
        application_id = sandbox.bot_user_id
        kind = MESSAGE_COMMAND if target_message_id is not None else CHAT_INPUT
        words = name.split() if kind == CHAT_INPUT else [name]
        command = self._find(application_id, guild_id, words[0], kind)
        permissions = sandbox.member_permissions(guild_id, user_id)
        required = command["default_member_permissions"]
        if required is not None and not overridden and not _grants(permissions, int(required)):
            raise DiscordAPIError(
                403, ErrorCode.MISSING_PERMISSIONS, f"{name}: this command is not available to you"
            )
        data: dict[str, Any] = {"id": command["id"], "name": command["name"], "type": kind}
        if "guild_id" in command:
            data["guild_id"] = command["guild_id"]
        if kind == CHAT_INPUT:
            data["options"] = _options(command, words, dict(options or {}))
        else:
            target = sandbox.message(channel_id, target_message_id)
            data["target_id"] = str(target_message_id)
            data["resolved"] = {"messages": {str(target_message_id): target}}
        interaction_id = sandbox.next_id()
        token = f"aW50ZXJhY3Rpb246{interaction_id}:{secrets.token_urlsafe(24)}"
        record = InteractionRecord(
            id=interaction_id,
            token=token,
            application_id=application_id,
            guild_id=guild_id,
            channel_id=channel_id,
            user_id=user_id,
            command=" ".join(words),
            started=self._clock(),
        )
        self._records[interaction_id] = record
        self._by_token[token] = record
        payload = {
            "id": str(interaction_id),
            "application_id": str(application_id),
            "type": APPLICATION_COMMAND,
            "data": data,
            "guild_id": str(guild_id),
            "guild": {"id": str(guild_id), "locale": "en-US", "features": []},
            "channel_id": str(channel_id),
            "channel": channel,
            "member": {**member, "permissions": str(permissions)},
            "token": token,
            "version": 1,
            "app_permissions": str(sandbox.member_permissions(guild_id, application_id)),
            "locale": "en-US",
            "guild_locale": "en-US",
            "entitlements": [],
            "authorizing_integration_owners": {"0": str(guild_id)},
            "context": 0,
            "attachment_size_limit": ATTACHMENT_SIZE_LIMIT,
        }
        sandbox.dispatch_raw("INTERACTION_CREATE", payload, guild_id=guild_id)
        return record

    def record(self, interaction_id: int) -> InteractionRecord:
        try:
            return self._records[interaction_id]
        except KeyError:
            raise unknown(ErrorCode.UNKNOWN_INTERACTION) from None

    def records(self) -> list[InteractionRecord]:
        """Every interaction so far, oldest first."""
        return list(self._records.values())

    def owns_token(self, application_id: int, token: str) -> bool:
        """Whether ``/webhooks/{application_id}/{token}`` is an interaction's webhook."""
        record = self._by_token.get(token)
        return record is not None and record.application_id == application_id

    # -------------------------------------------------------------------------- answers

    def callback(
        self, interaction_id: int, token: str, body: Mapping[str, Any], uploads: Sequence[Upload]
    ) -> dict[str, Any]:
        """``POST /interactions/{id}/{token}/callback``: type 4 (a message now) or 5 (deferred).
        Returns the ``with_response`` body: the interaction and the message it created."""
        record = self._records.get(interaction_id)
        if record is None or not secrets.compare_digest(record.token, token):
            raise DiscordAPIError(404, ErrorCode.UNKNOWN_INTERACTION, "Unknown interaction")
        seconds = self._clock() - record.started
        if record.acknowledged:
            raise DiscordAPIError(
                400,
                ErrorCode.INTERACTION_ACKNOWLEDGED,
                "Interaction has already been acknowledged.",
            )
        if seconds > ACK_SECONDS:
            raise DiscordAPIError(404, ErrorCode.UNKNOWN_INTERACTION, "Unknown interaction")
        kind = body.get("type")
        if kind not in (CALLBACK_MESSAGE, CALLBACK_DEFERRED):
            raise DiscordAPIError(
                400, ErrorCode.INVALID_FORM_BODY, f"Interaction callback type {kind} is not served"
            )
        data = body.get("data") or {}
        flags = int(data.get("flags") or 0)
        content = data.get("content") or ""
        embeds = list(data.get("embeds") or [])
        if kind == CALLBACK_MESSAGE and not (content or embeds or uploads):
            raise DiscordAPIError(400, ErrorCode.EMPTY_MESSAGE, "Cannot send an empty message")
        if kind == CALLBACK_DEFERRED:
            flags, content, embeds, uploads = (flags & EPHEMERAL) | LOADING, "", [], ()
        record.original_flags = flags
        record.original = self._message(record, content, embeds, uploads, flags)
        record.add(
            InteractionAnswer(
                "callback", kind, content, flags, tuple(uploads), tuple(embeds), seconds
            )
        )
        message = self._payload(record.original, flags)
        return {
            "interaction": {
                "id": str(record.id),
                "type": APPLICATION_COMMAND,
                "response_message_id": message["id"],
                "response_message_loading": kind == CALLBACK_DEFERRED,
                "response_message_ephemeral": bool(flags & EPHEMERAL),
            },
            "resource": {"type": kind, "message": message},
        }

    def original(self, application_id: int, token: str) -> dict[str, Any]:
        """``GET /webhooks/{app}/{token}/messages/@original``."""
        record = self._live(application_id, token)
        assert record.original is not None
        return self._payload(record.original, record.original_flags)

    def edit_original(
        self, application_id: int, token: str, body: Mapping[str, Any], uploads: Sequence[Upload]
    ) -> dict[str, Any]:
        """``PATCH /webhooks/{app}/{token}/messages/@original``: the response's new content,
        embeds and files (a deferral's "thinking…" becomes the answer)."""
        record = self._live(application_id, token)
        original = record.original
        assert original is not None
        if body.get("content") is not None:
            original.content = body["content"]
        if body.get("embeds") is not None:
            original.embeds = list(body["embeds"])
        if uploads:
            original.attachments = [
                self._sandbox.store_upload(record.channel_id, u) for u in uploads
            ]
        record.original_flags &= ~LOADING
        if original.id in self._sandbox.channel_message_ids(record.channel_id):
            self._sandbox.edit_message(
                record.channel_id,
                original.id,
                editor_id=record.application_id,
                content=original.content,
            )
        record.add(
            InteractionAnswer(
                "original",
                None,
                original.content,
                record.original_flags,
                tuple(uploads),
                tuple(original.embeds),
                self._clock() - record.started,
            )
        )
        return self._payload(original, record.original_flags)

    def followup(
        self, application_id: int, token: str, body: Mapping[str, Any], uploads: Sequence[Upload]
    ) -> dict[str, Any]:
        """``POST /webhooks/{app}/{token}``: another message answering the interaction."""
        record = self._live(application_id, token)
        flags = int(body.get("flags") or 0) & EPHEMERAL
        content = body.get("content") or ""
        embeds = list(body.get("embeds") or [])
        if not (content or embeds or uploads):
            raise DiscordAPIError(400, ErrorCode.EMPTY_MESSAGE, "Cannot send an empty message")
        message = self._message(record, content, embeds, uploads, flags)
        record.add(
            InteractionAnswer(
                "followup",
                None,
                content,
                flags,
                tuple(uploads),
                tuple(embeds),
                self._clock() - record.started,
            )
        )
        return self._payload(message, flags)

    # -------------------------------------------------------------------------- private

    def _check_application(self, application_id: int) -> None:
        if application_id != self._sandbox.bot_user_id:
            raise DiscordAPIError(404, ErrorCode.GENERAL, "Unknown Application")

    def _find(self, application_id: int, guild_id: int, name: str, kind: int) -> dict[str, Any]:
        for scope in (guild_id, None):
            for command in self._commands.get((application_id, scope), []):
                if command["name"] == name and command["type"] == kind:
                    return command
        raise DiscordAPIError(
            404, ErrorCode.UNKNOWN_APPLICATION_COMMAND, f"Unknown application command: {name}"
        )

    def _live(self, application_id: int, token: str) -> InteractionRecord:
        """The interaction behind an interaction webhook, once acknowledged and while its
        token lives."""
        record = self._by_token.get(token)
        if record is None or record.application_id != application_id:
            raise unknown(ErrorCode.UNKNOWN_WEBHOOK)
        if self._clock() - record.started > TOKEN_SECONDS:
            raise DiscordAPIError(401, ErrorCode.INVALID_WEBHOOK_TOKEN, "Invalid Webhook Token")
        if not record.acknowledged:
            raise unknown(ErrorCode.UNKNOWN_MESSAGE)
        return record

    def _message(
        self,
        record: InteractionRecord,
        content: str,
        embeds: Sequence[Mapping[str, Any]],
        uploads: Sequence[Upload],
        flags: int,
    ) -> Message:
        """An answer's message: in the channel (a MESSAGE_CREATE) unless ephemeral."""
        sandbox = self._sandbox
        if not flags & EPHEMERAL and not flags & LOADING:
            payload = sandbox.create_message(
                record.channel_id,
                author_id=record.application_id,
                content=content,
                embeds=embeds,
                uploads=uploads,
            )
            return sandbox.stored_message(record.channel_id, int(payload["id"]))
        return Message(
            id=sandbox.next_id(),
            channel_id=record.channel_id,
            guild_id=record.guild_id,
            author_id=record.application_id,
            content=content,
            embeds=[dict(e) for e in embeds],
            attachments=[sandbox.store_upload(record.channel_id, u) for u in uploads],
            mention_ids=[],
            mention_role_ids=[],
            mention_everyone=False,
        )

    def _payload(self, message: Message, flags: int) -> dict[str, Any]:
        payload = self._sandbox.message_payload(message)
        payload["flags"] = flags
        payload["application_id"] = str(self._sandbox.bot_user_id)
        return payload


def _grants(permissions: int, required: int) -> bool:
    return permissions & required == required


def _options(
    command: Mapping[str, Any], words: Sequence[str], values: dict[str, Any]
) -> list[dict[str, Any]]:
    """The ``data.options`` tree for ``words`` (command, then subcommand names) and the leaf
    options' ``values``, checked against the command's declared options."""
    declared = list(command.get("options") or [])
    path = list(words[1:])
    if not path:
        return _leaf_options(command["name"], declared, values)
    sub = next((o for o in declared if o["name"] == path[0] and o["type"] in (1, 2)), None)
    if sub is None:
        raise DiscordAPIError(
            400, ErrorCode.INVALID_FORM_BODY, f"/{command['name']} has no subcommand {path[0]!r}"
        )
    nested = {"name": sub["name"], "options": sub.get("options") or []}
    return [{"type": sub["type"], "name": sub["name"], "options": _options(nested, path, values)}]


def _leaf_options(
    name: str, declared: Sequence[Mapping[str, Any]], values: dict[str, Any]
) -> list[dict[str, Any]]:
    by_name = {o["name"]: o for o in declared}
    for given in values:
        if given not in by_name:
            raise DiscordAPIError(
                400, ErrorCode.INVALID_FORM_BODY, f"/{name} has no option {given!r}"
            )
    options = []
    for option in declared:
        if option["name"] not in values:
            if option.get("required"):
                raise DiscordAPIError(
                    400,
                    ErrorCode.INVALID_FORM_BODY,
                    f"/{name}: the option {option['name']!r} is required",
                )
            continue
        value = values[option["name"]]
        choices = option.get("choices")
        if choices and value not in [c["value"] for c in choices]:
            raise DiscordAPIError(
                400,
                ErrorCode.INVALID_FORM_BODY,
                f"/{name}: {option['name']} must be one of "
                + ", ".join(str(c["value"]) for c in choices),
            )
        options.append({"type": option["type"], "name": option["name"], "value": value})
    return options
