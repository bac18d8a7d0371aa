"""The tools of Deliberate Tool Mode: their definitions, their dependencies, and running them.

Each tool's argument model is the single source of its JSON schema (``TOOL_DEFINITIONS``) and of its
validation, so what the model is shown and what is accepted cannot drift apart.

A ``ToolBox`` is built per turn. It offers a tool only when the turn's allowlist names it AND the
tool's dependency was given (an unconfigured tool is never offered, DESIGN §5):

==========================  =================================================================
tool                        dependency
==========================  =================================================================
read_file                   ``attachments`` lookup and an ``AttachmentReader``
reveal_message_metadata     a ``MessageMetadataLookup`` (``ref_N`` → author, time, refs)
update_short_term_memory    a ``ShortTermMemoryWriter`` (at most one write per turn)
remember                    a ``LongTermMemoryWriter`` (a guild's turn; at most three per turn)
analyze_image               ``attachments`` lookup and a ``VisionModel`` (a vision model call)
process_gif                 ``attachments``, an ``AttachmentReader`` and a ``VisionModel``: the
                            GIF is read, `GIF_FRAMES` frames sampled with Pillow, and the
                            vision model asked about them in order
process_youtube_video       ``VideoTranscripts`` (``YOUTUBE_TRANSCRIPT_URL``): the video's
                            title, channel and transcript
send_sticker                a ``StickerSender`` with at least one sticker (the guild's, for a
                            persona speaking through the bot account; at most one per reply)
==========================  =================================================================

Running a call never raises for anything the model did: unknown tools, tools not offered,
malformed or invalid arguments, unknown ids and a second memory write all come back as a JSON
``{"error": …}`` result the model can read and correct. Dependencies report expected failures
(a file that is gone, a fetch that failed) by raising ``ToolError``.
"""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from pydantic import ValidationError

from chat.llm.base import (
    ChatRequest,
    Completion,
    LLMClient,
    LLMError,
    ModelSpec,
    ToolCall,
    Usage,
)
from chat.llm.metering import UNMETERED, CallMeter
from chat.llm.reply import strip_reasoning
from chat.llm.tool_arguments import (
    AnalyzeImageArguments,
    ProcessGifArguments,
    ProcessYoutubeVideoArguments,
    ReadFileArguments,
    RememberArguments,
    RevealMessageMetadataArguments,
    SendStickerArguments,
    ToolArguments,
    UpdateShortTermMemoryArguments,
)
from chat.llm.turn_completion import AttemptRecord
from chat.llm.video_transcripts import TranscriptUnavailable, VideoTranscript, youtube_video_id
from chat.pipeline.markup import scrub_snowflakes
from chat.pipeline.model_answers import problems_line
from chat.pipeline.spend import CallKind
from chat.pipeline.tools import ToolName

TRANSCRIPT_LIMIT_CHARS = 12_000
"""Most characters of a transcript ``process_youtube_video`` hands to the model."""
READ_FILE_LIMIT_BYTES = 16_384
"""Most bytes of one file ``read_file`` hands to the model (about 4,000 tokens)."""

MAX_REMEMBERED_PER_TURN = 3
"""Facts ``remember`` saves in one turn; further calls get an error result."""
MAX_CALLS_PER_ROUND = 8
"""Calls run in one round; further calls of the same round get an error result, unrun."""


class ToolError(Exception):
    """A tool could not do what was asked; the message is shown to the model as the result."""


# --- Definitions (argument models: `chat.llm.tool_arguments`) ---------------------------------

GIF_FRAMES = 4
"""Frames of a GIF `process_gif` shows the vision model, evenly spaced from first to last."""
GIF_READ_LIMIT_BYTES = 8 * 1024 * 1024
"""Most bytes of a GIF `process_gif` reads (Discord's own upload limit for most servers)."""
GIF_FRAME_SIDE = 512
"""Sampled frames are scaled down to fit this many pixels a side (fewer image tokens)."""


def sample_gif_frames(data: bytes, *, frames: int = GIF_FRAMES) -> list[bytes]:
    """``frames`` evenly spaced frames of the animation in ``data`` (all of them when it has
    fewer), each as PNG bytes scaled to fit `GIF_FRAME_SIDE`; raises ``ToolError`` when
    ``data`` is not an image Pillow can read."""
    from PIL import Image, ImageSequence, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            count = getattr(image, "n_frames", 1)
            wanted = sorted({round(i * (count - 1) / max(1, frames - 1)) for i in range(frames)})
            sampled = []
            for index, frame in enumerate(ImageSequence.Iterator(image)):
                if index in wanted:
                    still = frame.convert("RGB")
                    still.thumbnail((GIF_FRAME_SIDE, GIF_FRAME_SIDE))
                    out = io.BytesIO()
                    still.save(out, format="PNG")
                    sampled.append(out.getvalue())
                if index >= wanted[-1]:
                    break
            return sampled
    except (UnidentifiedImageError, OSError, EOFError) as error:
        raise ToolError(f"the animation could not be read ({type(error).__name__})") from None


@dataclass(frozen=True)
class ToolDefinition:
    name: ToolName
    description: str
    arguments: type[ToolArguments]

    def definition(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name.value,
                "description": self.description,
                "parameters": self.arguments.model_json_schema(),
            },
        }


TOOL_DEFINITIONS: Mapping[ToolName, ToolDefinition] = {
    spec.name: spec
    for spec in (
        ToolDefinition(
            ToolName.READ_FILE,
            "Read the text of a file attached to a message in this conversation.",
            ReadFileArguments,
        ),
        ToolDefinition(
            ToolName.REVEAL_MESSAGE_METADATA,
            "Reveal who sent a message in this conversation, when, and what it replies to.",
            RevealMessageMetadataArguments,
        ),
        ToolDefinition(
            ToolName.UPDATE_SHORT_TERM_MEMORY,
            "Replace your short-term memory of this conversation with a new summary. "
            "Can be used once per reply.",
            UpdateShortTermMemoryArguments,
        ),
        ToolDefinition(
            ToolName.REMEMBER,
            "Save a durable fact to your long-term memory of this server, for later "
            "conversations. Save only what a person said about themselves (their preferences, "
            "life, plans: scope user, citing their own message), the server's shared facts "
            "(events, rules, traditions: scope server), or what you yourself said you will "
            "remember (your promises, plans, names you agreed on: scope persona, recalled only "
            "by you). Never save guesses, what someone said about another person, or anything "
            "they asked you to keep to yourself. A fact you already know is updated, not "
            "repeated.",
            RememberArguments,
        ),
        ToolDefinition(
            ToolName.ANALYZE_IMAGE,
            "Look at an image attached to a message in this conversation and answer a question "
            "about it.",
            AnalyzeImageArguments,
        ),
        ToolDefinition(
            ToolName.PROCESS_GIF,
            "Watch a GIF attached to a message in this conversation (a few frames, in order) "
            "and answer a question about it.",
            ProcessGifArguments,
        ),
        ToolDefinition(
            ToolName.PROCESS_YOUTUBE_VIDEO,
            "Get the title, channel and transcript of a YouTube video linked in this conversation.",
            ProcessYoutubeVideoArguments,
        ),
        ToolDefinition(
            ToolName.SEND_STICKER,
            "Send one of this server's stickers in the channel, as your own message; it goes "
            "out at once, before your reply. At most one per reply.",
            SendStickerArguments,
        ),
    )
}


# --- Dependencies -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolAttachment:
    """A file or image of the conversation, known to the model only by ``media_id``."""

    media_id: str
    filename: str
    url: str
    content_type: str = ""
    size: int | None = None


class AttachmentReader(Protocol):
    async def read(self, attachment: ToolAttachment, *, max_bytes: int) -> bytes:
        """Return at most ``max_bytes`` from the start of the file; raise ``ToolError`` if it
        cannot be fetched."""
        ...


@dataclass(frozen=True)
class MessageMetadata:
    """What ``reveal_message_metadata`` tells about one message, in the prompt's own terms:
    names and ``ref_N``/``media_N`` keys, never a raw snowflake."""

    author_name: str
    sent_at: datetime
    edited_at: datetime | None = None
    reply_to_ref: str | None = None
    media_ids: tuple[str, ...] = ()


class MessageMetadataLookup(Protocol):
    async def metadata(self, ref: str) -> MessageMetadata | None:
        """The message behind ``ref`` (``ref_N``), or ``None`` when the turn has no such ref."""
        ...


class LongTermMemoryWriter(Protocol):
    async def remember(self, *, scope: str, fact: str, ref: str) -> str:
        """Keep ``fact`` (scope ``user``: about the author of the message ``ref``; ``server``:
        the guild's; ``persona``: the speaking persona's own); return ``added`` or ``updated``
        (a near duplicate); raise ``ToolError`` when it may not be kept (the person is not in
        the conversation or chose privacy, the memory is full, the fact is too long)."""
        ...


class ShortTermMemoryWriter(Protocol):
    async def write(self, *, summary: str, categories: Mapping[str, str]) -> None:
        """Store ``summary`` and ``categories`` (either may be empty, not both) as the persona's
        short-term memory, replacing the old one; raise ``ToolError`` on failure."""
        ...


class VideoTranscripts(Protocol):
    async def transcript(self, video_id: str) -> VideoTranscript:
        """The video's metadata and transcript; raise ``TranscriptUnavailable`` (its message
        is shown to the model) when there is none."""
        ...


class StickerSender(Protocol):
    def names(self) -> Sequence[str]:
        """The stickers the persona may send, by name (the guild's)."""
        ...

    async def send(self, name: str) -> None:
        """Send the sticker called ``name`` in the turn's channel; raise ``ToolError`` when it
        cannot be sent."""
        ...


@dataclass(frozen=True)
class VisionModel:
    """The model ``analyze_image`` asks, through the same ``LLMClient`` as the persona."""

    client: LLMClient
    model: ModelSpec


@dataclass(frozen=True)
class ToolResult:
    """The text handed back to the model, the tokens a tool's own model call used, and that
    call as the turn records it (``calls``: the vision model's; empty for a tool that asks no
    model)."""

    content: str
    usage: Usage = field(default_factory=Usage)
    calls: tuple[AttemptRecord, ...] = ()


# --- Running ------------------------------------------------------------------------------------


class ToolBox:
    """The tools of one turn: which are offered, and running the model's calls to them."""

    def __init__(
        self,
        *,
        allowlist: Collection[str],
        attachments: Mapping[str, ToolAttachment] | None = None,
        attachment_reader: AttachmentReader | None = None,
        message_metadata: MessageMetadataLookup | None = None,
        short_term_memory: ShortTermMemoryWriter | None = None,
        long_term_memory: LongTermMemoryWriter | None = None,
        vision: VisionModel | None = None,
        videos: VideoTranscripts | None = None,
        stickers: StickerSender | None = None,
        read_limit_bytes: int = READ_FILE_LIMIT_BYTES,
        meter: CallMeter = UNMETERED,
    ) -> None:
        self._attachments = attachments or {}
        self._reader = attachment_reader
        self._metadata = message_metadata
        self._memory = short_term_memory
        self._vision = vision
        self._read_limit = read_limit_bytes
        self._memory_written = False
        self._long_term = long_term_memory
        self._remembered = 0
        self._videos, self._stickers, self._sticker_sent = videos, stickers, False
        self._meter = meter
        self._rounds = 0
        configured = {
            ToolName.READ_FILE: attachment_reader is not None and attachments is not None,
            ToolName.REVEAL_MESSAGE_METADATA: message_metadata is not None,
            ToolName.UPDATE_SHORT_TERM_MEMORY: short_term_memory is not None,
            ToolName.REMEMBER: long_term_memory is not None,
            ToolName.ANALYZE_IMAGE: vision is not None and attachments is not None,
            ToolName.PROCESS_GIF: (
                vision is not None and attachments is not None and attachment_reader is not None
            ),
            ToolName.PROCESS_YOUTUBE_VIDEO: videos is not None,
            ToolName.SEND_STICKER: stickers is not None and bool(stickers.names()),
        }
        self.offered: tuple[ToolName, ...] = tuple(
            name for name in TOOL_DEFINITIONS if name in allowlist and configured[name]
        )

    def definitions(self) -> list[dict[str, Any]]:
        """The ``tools`` list for a request: the offered tools only, in a stable order."""
        return [self._definition(name) for name in self.offered]

    def _definition(self, name: ToolName) -> dict[str, Any]:
        definition = TOOL_DEFINITIONS[name].definition()
        if name is ToolName.SEND_STICKER and self._stickers is not None:
            names = [scrub_snowflakes(n) for n in self._stickers.names()]
            function = definition["function"]
            function["description"] += " Stickers: " + ", ".join(names) + "."
            function["parameters"]["properties"]["name"]["enum"] = names
        return definition

    async def run_round(self, calls: Sequence[ToolCall]) -> list[ToolResult]:
        """Run one round's calls in order (so a second memory write sees the first); one result
        per call. Calls past ``MAX_CALLS_PER_ROUND`` are answered with an error, unrun."""
        self._rounds += 1
        results = [await self.run(call) for call in calls[:MAX_CALLS_PER_ROUND]]
        refused = _result(error=f"at most {MAX_CALLS_PER_ROUND} tool calls are run per round")
        return results + [refused] * len(calls[MAX_CALLS_PER_ROUND:])

    async def run(self, call: ToolCall) -> ToolResult:
        """Run one call; every mistake of the model becomes an ``{"error": …}`` result."""
        handlers: dict[ToolName, Callable[[Any], Awaitable[ToolResult]]] = {
            ToolName.READ_FILE: self._read_file,
            ToolName.REVEAL_MESSAGE_METADATA: self._reveal_metadata,
            ToolName.UPDATE_SHORT_TERM_MEMORY: self._update_memory,
            ToolName.REMEMBER: self._remember,
            ToolName.ANALYZE_IMAGE: self._analyze_image,
            ToolName.PROCESS_GIF: self._process_gif,
            ToolName.PROCESS_YOUTUBE_VIDEO: self._process_youtube_video,
            ToolName.SEND_STICKER: self._send_sticker,
        }
        try:
            name = self._offered_tool(call.name)
            arguments = _parse_arguments(TOOL_DEFINITIONS[name].arguments, call.arguments)
            return await handlers[name](arguments)
        except ToolError as error:
            return _result(error=str(error))

    def _offered_tool(self, name: str) -> ToolName:
        if name not in self.offered:
            raise ToolError(f"the tool {name!r} is not available in this reply")
        return ToolName(name)

    def _attachment(self, media_id: str) -> ToolAttachment:
        attachment = self._attachments.get(media_id)
        if attachment is None:
            raise ToolError(f"{media_id} is not an attachment in this conversation")
        return attachment

    async def _read_file(self, arguments: ReadFileArguments) -> ToolResult:
        attachment = self._attachment(arguments.media_id)
        if attachment.content_type.startswith(("image/", "video/", "audio/")):
            raise ToolError(f"{attachment.media_id} ({attachment.filename}) is not a text file")
        assert self._reader is not None
        data = await self._reader.read(attachment, max_bytes=self._read_limit + 1)
        if b"\x00" in data:
            raise ToolError(f"{attachment.media_id} ({attachment.filename}) is not a text file")
        content = data[: self._read_limit].decode("utf-8", errors="replace")
        return _result(
            media_id=attachment.media_id,
            filename=attachment.filename,
            content=content,
            truncated=len(data) > self._read_limit,
        )

    async def _reveal_metadata(self, arguments: RevealMessageMetadataArguments) -> ToolResult:
        assert self._metadata is not None
        found = await self._metadata.metadata(arguments.ref)
        if found is None:
            raise ToolError(f"{arguments.ref} is not a message in this conversation")
        fields: dict[str, Any] = {
            "ref": arguments.ref,
            "author": found.author_name,
            "sent_at": found.sent_at.isoformat(),
        }
        if found.edited_at is not None:
            fields["edited_at"] = found.edited_at.isoformat()
        if found.reply_to_ref is not None:
            fields["reply_to"] = found.reply_to_ref
        if found.media_ids:
            fields["media"] = list(found.media_ids)
        return _result(**fields)

    async def _update_memory(self, arguments: UpdateShortTermMemoryArguments) -> ToolResult:
        if self._memory_written:
            raise ToolError("short-term memory was already updated in this reply")
        assert self._memory is not None
        await self._memory.write(summary=arguments.summary, categories=arguments.categories)
        self._memory_written = True
        return _result(updated=True)

    async def _remember(self, arguments: RememberArguments) -> ToolResult:
        if self._remembered >= MAX_REMEMBERED_PER_TURN:
            raise ToolError(f"at most {MAX_REMEMBERED_PER_TURN} facts are saved per reply")
        assert self._long_term is not None
        outcome = await self._long_term.remember(
            scope=arguments.scope, fact=arguments.fact, ref=arguments.ref
        )
        self._remembered += 1
        return _result(saved=outcome)

    async def _analyze_image(self, arguments: AnalyzeImageArguments) -> ToolResult:
        attachment = self._attachment(arguments.media_id)
        if not attachment.content_type.startswith("image/"):
            raise ToolError(f"{attachment.media_id} ({attachment.filename}) is not an image")
        assert self._vision is not None
        request = ChatRequest(
            model=self._vision.model,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": arguments.question},
                        {"type": "image_url", "image_url": {"url": attachment.url}},
                    ],
                }
            ],
        )
        completion, record = await self._ask_vision(request, "the image could not be analysed")
        analysis = strip_reasoning(completion.text).strip()
        return _result(
            media_id=attachment.media_id,
            analysis=analysis,
            usage=completion.usage,
            calls=(record,),
        )

    async def _process_gif(self, arguments: ProcessGifArguments) -> ToolResult:
        attachment = self._attachment(arguments.media_id)
        is_gif = attachment.content_type == "image/gif" or attachment.filename.lower().endswith(
            ".gif"
        )
        if not is_gif:
            raise ToolError(f"{attachment.media_id} ({attachment.filename}) is not a GIF")
        assert self._reader is not None and self._vision is not None
        data = await self._reader.read(attachment, max_bytes=GIF_READ_LIMIT_BYTES)
        frames = sample_gif_frames(data)
        parts: list[dict[str, Any]] = [
            {
                "type": "text",
                "text": f"{len(frames)} frames of one animation, in order. {arguments.question}",
            }
        ]
        parts += [
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64," + base64.b64encode(f).decode()},
            }
            for f in frames
        ]
        request = ChatRequest(
            model=self._vision.model, messages=[{"role": "user", "content": parts}]
        )
        completion, record = await self._ask_vision(request, "the animation could not be analysed")
        analysis = strip_reasoning(completion.text).strip()
        return _result(
            media_id=attachment.media_id,
            frames=len(frames),
            analysis=analysis,
            usage=completion.usage,
            calls=(record,),
        )

    async def _ask_vision(
        self, request: ChatRequest, failure: str
    ) -> tuple[Completion, AttemptRecord]:
        """Ask the vision model ``request`` through the turn's meter (counted as ``vision``,
        never refused: the turn was let in); returns its answer and the call's record. Raises
        ``ToolError`` starting with ``failure`` when the model failed."""
        assert self._vision is not None
        ticket = await self._meter.reserve(request, kind=CallKind.VISION, admitted=True)
        started = time.perf_counter()
        try:
            completion = await self._vision.client.complete(request)
        except LLMError as error:
            await self._meter.settle(ticket, completion=None, received="")
            raise ToolError(f"{failure} ({error})") from error
        charge = await self._meter.settle(ticket, completion=completion, received=completion.text)
        record = AttemptRecord(
            model=request.model.name,
            tool_round=self._rounds,
            shorten_batches=0,
            latency_ms=(time.perf_counter() - started) * 1000,
            outcome="ok",
            usage=completion.usage,
            charge=charge,
        )
        return completion, record

    async def _process_youtube_video(self, arguments: ProcessYoutubeVideoArguments) -> ToolResult:
        video_id = youtube_video_id(arguments.link)
        if video_id is None:
            raise ToolError("that is not a YouTube video link")
        assert self._videos is not None
        try:
            video = await self._videos.transcript(video_id)
        except TranscriptUnavailable as error:
            raise ToolError(f"the video could not be processed: {error}") from None
        transcript = video.transcript[:TRANSCRIPT_LIMIT_CHARS]
        # The transcript and titles are outside text: a long digit run in them is no id of
        # ours, but it looks like one to the model, so it is scrubbed like any other.
        fields: dict[str, Any] = {
            "title": scrub_snowflakes(video.title),
            "channel": scrub_snowflakes(video.channel),
            "transcript": scrub_snowflakes(transcript) or "(this video has no transcript)",
        }
        if video.duration_seconds is not None:
            fields["duration_seconds"] = video.duration_seconds
        if len(video.transcript) > TRANSCRIPT_LIMIT_CHARS:
            fields["truncated"] = True
        return _result(**fields)

    async def _send_sticker(self, arguments: SendStickerArguments) -> ToolResult:
        assert self._stickers is not None
        names = {scrub_snowflakes(n): n for n in self._stickers.names()}
        if arguments.name not in names:
            raise ToolError(f"no sticker is called {arguments.name!r}; choose one listed")
        if self._sticker_sent:
            raise ToolError("a sticker was already sent in this reply")
        await self._stickers.send(names[arguments.name])
        self._sticker_sent = True
        return _result(sent=arguments.name)


def _parse_arguments(model: type[ToolArguments], raw: str) -> ToolArguments:
    """Validate the model's raw JSON arguments; raise ``ToolError`` naming each problem."""
    try:
        return model.model_validate_json(raw or "{}")
    except ValidationError as error:
        problems = problems_line(error, whole="arguments")
        raise ToolError(f"invalid arguments: {problems}") from error


def _result(
    *, usage: Usage | None = None, calls: tuple[AttemptRecord, ...] = (), **fields: Any
) -> ToolResult:
    """A ``ToolResult`` whose content is ``fields`` as a JSON object."""
    return ToolResult(json.dumps(fields, ensure_ascii=False), usage=usage or Usage(), calls=calls)
