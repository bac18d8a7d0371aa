"""Discord's gateway (v10, JSON encoding) over aiohttp websockets, fed by a `Sandbox`.

Protocol, as a bot sees it:

1. The server sends HELLO (op 10) with `heartbeat_interval`; every HEARTBEAT (op 1) is
   answered with HEARTBEAT_ACK (op 11).
2. IDENTIFY (op 2) opens a session: READY (guilds unavailable, `session_id`,
   `resume_gateway_url`, `shard`, `application`), then one GUILD_CREATE per guild of the
   session's shard (`(guild_id >> 22) % shard_count == shard_id`). A wrong token closes with
   4004, an impossible shard with 4010, missing intents with 4013, a privileged intent the
   application's flags do not allow (`Sandbox.application_flags`) with 4014. Each IDENTIFY
   accepted uses one of the bot's session starts (`SessionStarts`); one with none left closes
   with 4004.
3. World changes (messages, reactions, typing; guilds, channels, threads and members added
   or renamed later) arrive as dispatches (op 0) with a per-session sequence number, filtered
   by shard and intents. Without MESSAGE_CONTENT, message content, embeds and attachments are
   blanked unless the bot wrote the message or is mentioned in it, as on Discord.
4. A session outlives its connection for `resume_ttl` seconds and keeps its last
   `replay_buffer` dispatches: RESUME (op 6) replays what the client missed, then RESUMED.
   An unknown or expired session, or one whose gap is no longer buffered, gets INVALID_SESSION
   (op 9, `d: false`); `invalidate_sessions` ends every session at once, as Discord may.
5. REQUEST_GUILD_MEMBERS (op 8) is answered with GUILD_MEMBERS_CHUNK dispatches.

`compress=zlib-stream` (or `zstd-stream`) in the URL is accepted but frames are sent as plain
text, which discord.py reads as readily as compressed binary frames. No heartbeat deadline is
enforced: a dead local connection is seen by the socket closing.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import IntEnum, IntFlag
from typing import Any, TypeVar

from aiohttp import WSMsgType, web
from pydantic import BaseModel, ValidationError

from chat.sandbox import schemas
from chat.sandbox.session_starts import SessionStarts
from chat.sandbox.state import GatewayEvent, Sandbox

SchemaT = TypeVar("SchemaT", bound=BaseModel)

API_VERSIONS = ("9", "10")
MEMBERS_PER_CHUNK = 1000


class Op(IntEnum):
    DISPATCH = 0
    HEARTBEAT = 1
    IDENTIFY = 2
    PRESENCE_UPDATE = 3
    VOICE_STATE_UPDATE = 4
    RESUME = 6
    RECONNECT = 7
    REQUEST_GUILD_MEMBERS = 8
    INVALID_SESSION = 9
    HELLO = 10
    HEARTBEAT_ACK = 11


class CloseCode(IntEnum):
    GOING_AWAY = 1001
    UNKNOWN_OPCODE = 4001
    DECODE_ERROR = 4002
    NOT_AUTHENTICATED = 4003
    AUTHENTICATION_FAILED = 4004
    ALREADY_AUTHENTICATED = 4005
    INVALID_SHARD = 4010
    INVALID_API_VERSION = 4012
    INVALID_INTENTS = 4013
    DISALLOWED_INTENTS = 4014


class Intent(IntFlag):
    GUILDS = 1 << 0
    GUILD_MEMBERS = 1 << 1
    GUILD_EXPRESSIONS = 1 << 3
    GUILD_PRESENCES = 1 << 8
    GUILD_MESSAGES = 1 << 9
    GUILD_MESSAGE_REACTIONS = 1 << 10
    GUILD_MESSAGE_TYPING = 1 << 11
    DIRECT_MESSAGES = 1 << 12
    DIRECT_MESSAGE_REACTIONS = 1 << 13
    DIRECT_MESSAGE_TYPING = 1 << 14
    MESSAGE_CONTENT = 1 << 15


PRIVILEGED_INTENT_FLAGS: Mapping[Intent, int] = {
    Intent.GUILD_MEMBERS: (1 << 14) | (1 << 15),
    Intent.GUILD_PRESENCES: (1 << 12) | (1 << 13),
    Intent.MESSAGE_CONTENT: (1 << 18) | (1 << 19),
}
"""Each privileged intent and the application flags that allow it (GATEWAY_GUILD_MEMBERS or
its _LIMITED form, and so on): Discord refuses an IDENTIFY asking for one without either."""


EVENT_INTENTS: Mapping[str, Intent] = {
    "GUILD_CREATE": Intent.GUILDS,
    "GUILD_UPDATE": Intent.GUILDS,
    "CHANNEL_CREATE": Intent.GUILDS,
    "CHANNEL_UPDATE": Intent.GUILDS,
    "THREAD_CREATE": Intent.GUILDS,
    "THREAD_UPDATE": Intent.GUILDS,
    "GUILD_STICKERS_UPDATE": Intent.GUILD_EXPRESSIONS,
    "GUILD_ROLE_CREATE": Intent.GUILDS,
    "GUILD_ROLE_UPDATE": Intent.GUILDS,
    "GUILD_MEMBER_ADD": Intent.GUILD_MEMBERS,
    "GUILD_MEMBER_UPDATE": Intent.GUILD_MEMBERS,
    "GUILD_MEMBER_REMOVE": Intent.GUILD_MEMBERS,
    "MESSAGE_CREATE": Intent.GUILD_MESSAGES,
    "MESSAGE_UPDATE": Intent.GUILD_MESSAGES,
    "MESSAGE_DELETE": Intent.GUILD_MESSAGES,
    "MESSAGE_DELETE_BULK": Intent.GUILD_MESSAGES,
    "MESSAGE_REACTION_ADD": Intent.GUILD_MESSAGE_REACTIONS,
    "MESSAGE_REACTION_REMOVE": Intent.GUILD_MESSAGE_REACTIONS,
    "MESSAGE_REACTION_REMOVE_ALL": Intent.GUILD_MESSAGE_REACTIONS,
    "MESSAGE_REACTION_REMOVE_EMOJI": Intent.GUILD_MESSAGE_REACTIONS,
    "TYPING_START": Intent.GUILD_MESSAGE_TYPING,
}
"""The intent a session needs to receive each event the world publishes."""
DM_EVENT_INTENTS: Mapping[str, Intent] = {
    "MESSAGE_CREATE": Intent.DIRECT_MESSAGES,
    "MESSAGE_UPDATE": Intent.DIRECT_MESSAGES,
    "MESSAGE_DELETE": Intent.DIRECT_MESSAGES,
    "MESSAGE_REACTION_ADD": Intent.DIRECT_MESSAGE_REACTIONS,
    "MESSAGE_REACTION_REMOVE": Intent.DIRECT_MESSAGE_REACTIONS,
    "MESSAGE_REACTION_REMOVE_ALL": Intent.DIRECT_MESSAGE_REACTIONS,
    "MESSAGE_REACTION_REMOVE_EMOJI": Intent.DIRECT_MESSAGE_REACTIONS,
    "TYPING_START": Intent.DIRECT_MESSAGE_TYPING,
}
"""The same for events in DMs (no guild: sent on shard 0 only)."""


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    heartbeat_interval_ms: int = 41_250
    replay_buffer: int = 1_000
    """Dispatches each session keeps for RESUME."""
    resume_ttl: float = 120.0
    """Seconds a disconnected session stays resumable."""
    recent_events: int = 100
    """Published events kept for `replay_last_dispatches`."""
    max_concurrency: int = 1
    """IDENTIFY buckets (``shard_id % max_concurrency``), as `GET /gateway/bot` reports."""
    identify_interval: float = 0.0
    """Seconds Discord requires between two IDENTIFYs of one bucket: one sooner is refused with
    INVALID_SESSION, as Discord does (0: not enforced). Every IDENTIFY is recorded either way
    (`Gateway.identifies`)."""
    session_start_total: int = 1000
    """Session starts a day (`GET /gateway/bot`'s ``session_start_limit``); each accepted
    IDENTIFY uses one (`SessionStarts`)."""
    session_start_reset: float = 86_400.0
    """Seconds from the first session start until the limit resets."""
    heartbeat_ack_delay: float = 0.02
    """Seconds before a HEARTBEAT_ACK goes out, as across a network. discord.py notes when its
    heartbeat went out only once its sending thread wakes again; an ACK answered in the same
    instant is read first, and the client logs the whole heartbeat interval as latency
    ("Can't keep up ... websocket is 41.3s behind")."""


@dataclass(frozen=True)
class IdentifyRecord:
    """One IDENTIFY the gateway received: when (the gateway's clock), for which shard and
    bucket, and whether it was refused: for coming too soon after the bucket's last one
    (``too_soon``), with no session start left (``session_start_limit``) or asking for a
    privileged intent the application may not have (``disallowed_intents``)."""

    at: float
    shard: tuple[int, int]
    bucket: int
    refused: bool
    reason: str = ""


def _frame(
    op: Op,
    data: Any = None,
    *,
    seq: int | None = None,
    name: str | None = None,
    encoded: str | None = None,
) -> str:
    """The frame as JSON text; with ``encoded`` (``data`` as JSON already) only the envelope
    is encoded."""
    if encoded is None:
        return json.dumps({"op": int(op), "d": data, "s": seq, "t": name}, separators=(",", ":"))
    return f'{{"op":{int(op)},"d":{encoded},"s":{json.dumps(seq)},"t":{json.dumps(name)}}}'


def visible_message_data(data: Mapping[str, Any], bot_user_id: int) -> Mapping[str, Any]:
    """A MESSAGE_CREATE/UPDATE payload as a bot without the MESSAGE_CONTENT intent sees it.

    Content, embeds, attachments and components are emptied, except in messages the bot wrote
    or that mention it; a nested `referenced_message` follows the same rule.
    """
    bot = str(bot_user_id)
    if data["author"]["id"] == bot or any(user["id"] == bot for user in data["mentions"]):
        return data
    visible = {**data, "content": "", "embeds": [], "attachments": [], "components": []}
    if data.get("referenced_message"):
        visible["referenced_message"] = visible_message_data(
            data["referenced_message"], bot_user_id
        )
    return visible


class GatewaySession:
    """An identified session: shard, intents, sequence and the dispatches it can replay.

    It outlives its websocket; `connection` is `None` while the bot is away, and dispatches
    then only go to the replay buffer.
    """

    def __init__(self, *, shard: tuple[int, int], intents: Intent, replay_buffer: int) -> None:
        self.id = secrets.token_hex(16)
        self.shard_id, self.shard_count = shard
        self.intents = intents
        self.seq = 0
        self.acked_seq = 0
        """The newest sequence the bot reported having received (in its heartbeats)."""
        self.connection: GatewayConnection | None = None
        self.detached_at: float | None = None
        self._sent: deque[tuple[int, str]] = deque(maxlen=replay_buffer)

    def on_shard(self, guild_id: int | None) -> bool:
        """Whether the guild's events come to this session (DMs: to shard 0)."""
        if guild_id is None:
            return self.shard_id == 0
        return (guild_id >> 22) % self.shard_count == self.shard_id

    def wants(self, event: GatewayEvent) -> bool:
        intents = EVENT_INTENTS if event.guild_id is not None else DM_EVENT_INTENTS
        needed = intents.get(event.name)
        return self.on_shard(event.guild_id) and (needed is None or needed in self.intents)

    def dispatch(self, name: str, data: Mapping[str, Any], *, encoded: str | None = None) -> None:
        """Number the event, keep it for replay and send it if connected (``encoded``: ``data``
        as JSON already, when several sessions get the same payload)."""
        self.seq += 1
        frame = _frame(Op.DISPATCH, data, seq=self.seq, name=name, encoded=encoded)
        self._sent.append((self.seq, frame))
        if self.connection is not None:
            self.connection.send(frame)

    def missed_since(self, seq: int) -> list[str] | None:
        """The frames after `seq`, or `None` if some of them are no longer buffered (or `seq`
        is from the future)."""
        if seq > self.seq:
            return None
        missed = [frame for frame_seq, frame in self._sent if frame_seq > seq]
        return missed if len(missed) == self.seq - seq else None

    def attach(self, connection: GatewayConnection) -> None:
        """Make `connection` the session's socket, cutting off any previous one."""
        previous = self.connection
        self.connection, self.detached_at = connection, None
        connection.session = self
        if previous is not None and previous is not connection:
            previous.session = None
            previous.abort()

    def detach(self, connection: GatewayConnection, now: float) -> None:
        if self.connection is connection:
            self.connection, self.detached_at = None, now
        connection.session = None


@dataclass(frozen=True, slots=True)
class _Close:
    """The writer's last item: close with `code` (after everything queued before it), or with
    `code=None` just stop, because the socket is already gone."""

    code: int | None
    reason: str = ""
    handshake: bool = True
    """Wait for the client's close frame before the TCP connection goes (False: shutting
    down, close at once)."""


_STOP = _Close(None)


class GatewayConnection:
    """One websocket: reads ops and hands them to the `Gateway`; writes frames in order.

    Everything sent goes through one outbox drained by a writer task, so replies, replays and
    live dispatches keep the order in which they were produced. A close is a handshake, as on
    Discord: the writer stops the reader, sends the close frame and waits (up to the socket's
    timeout) for the client's own before the TCP connection goes, so the client reads the
    close code (4004, 4014…) rather than a dropped connection (1006).
    """

    def __init__(self, ws: web.WebSocketResponse, request: web.Request, gateway: Gateway) -> None:
        self.session: GatewaySession | None = None
        self._ws = ws
        self._transport = request.transport
        self._gateway = gateway
        self._outbox: asyncio.Queue[str | _Close] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None

    def send(self, frame: str) -> None:
        self._outbox.put_nowait(frame)

    def close(self, code: int, reason: str = "", *, handshake: bool = True) -> None:
        """Close after everything already queued has been sent; with ``handshake``, once the
        client answered the close frame (or the socket's timeout passed)."""
        self._outbox.put_nowait(_Close(code, reason, handshake))

    def abort(self) -> None:
        """Drop the TCP connection with no closing handshake, like a network failure."""
        if self._transport is not None:
            self._transport.abort()

    async def run(self) -> None:
        """Serve the socket until either side closes it; the writer never outlives this."""
        writer = asyncio.create_task(self._write_frames())
        self._reader = asyncio.create_task(self._read_frames())
        try:
            self.send(_frame(Op.HELLO, {"heartbeat_interval": self._gateway.heartbeat_interval}))
            await asyncio.wait({self._reader})
        finally:
            self._reader.cancel()
            self._outbox.put_nowait(_STOP)
            await writer

    async def _read_frames(self) -> None:
        async for message in self._ws:
            if message.type is WSMsgType.TEXT:
                self._gateway.receive(self, message.data)
            elif message.type is WSMsgType.BINARY:
                self.close(CloseCode.DECODE_ERROR, "Binary frames are not supported")
            else:
                break

    async def _write_frames(self) -> None:
        while True:
            item = await self._outbox.get()
            try:
                if isinstance(item, str):
                    await self._ws.send_str(item)
                    continue
                if item.code is not None:
                    if self._reader is not None and item.handshake:  # none may run meanwhile
                        self._reader.cancel()
                        await asyncio.wait({self._reader})
                    await self._ws.close(code=item.code, message=item.reason.encode())
            except (ConnectionError, RuntimeError):
                pass  # the socket is gone; the session's buffer still has every dispatch
            return


class Gateway:
    """The gateway endpoint and its sessions, subscribed to the `Sandbox`'s events."""

    def __init__(
        self,
        sandbox: Sandbox,
        settings: GatewaySettings,
        *,
        url: Callable[[], str],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sandbox = sandbox
        self._settings = settings
        self._url = url
        self._clock = clock
        self._sessions: dict[str, GatewaySession] = {}
        self._connections: set[GatewayConnection] = set()
        self._no_connections = asyncio.Event()
        self._no_connections.set()
        self._recent: deque[GatewayEvent] = deque(maxlen=settings.recent_events)
        self.identifies: list[IdentifyRecord] = []
        self._bucket_identified: dict[int, float] = {}
        self._held_shards: set[tuple[int, int]] = set()
        self._held_resumes: list[tuple[GatewayConnection, tuple[int, int], Any]] = []
        self.session_starts = SessionStarts(
            total=settings.session_start_total,
            max_concurrency=settings.max_concurrency,
            clock=clock,
            reset_seconds=settings.session_start_reset,
        )
        self._unsubscribe = sandbox.subscribe(self.publish)

    @property
    def heartbeat_interval(self) -> int:
        return self._settings.heartbeat_interval_ms

    # ------------------------------------------------------------------------- the endpoint

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        """The aiohttp handler for the websocket URL (`?v=10&encoding=json[&compress=…]`)."""
        ws = web.WebSocketResponse(max_msg_size=0, timeout=5.0)
        await ws.prepare(request)
        if request.query.get("v", "10") not in API_VERSIONS:
            await ws.close(code=CloseCode.INVALID_API_VERSION, message=b"Invalid API version")
            return ws
        if request.query.get("encoding", "json") != "json":
            await ws.close(code=CloseCode.DECODE_ERROR, message=b"Only JSON encoding is served")
            return ws
        connection = GatewayConnection(ws, request, self)
        self._connections.add(connection)
        self._no_connections.clear()
        try:
            await connection.run()
        finally:
            self._connections.discard(connection)
            if not self._connections:
                self._no_connections.set()
            if connection.session is not None:
                connection.session.detach(connection, self._clock())
        return ws

    def receive(self, connection: GatewayConnection, text: str) -> None:
        """Act on one frame from the client (synchronously, so nothing interleaves)."""
        try:
            payload = json.loads(text)
            raw_op = payload["op"]
        except (ValueError, KeyError, TypeError):
            connection.close(CloseCode.DECODE_ERROR, "Decode error")
            return
        try:
            op = Op(raw_op)
        except ValueError:
            connection.close(CloseCode.UNKNOWN_OPCODE, "Unknown opcode")
            return
        data = payload.get("d")
        if op is Op.HEARTBEAT:
            if connection.session is not None and isinstance(data, int):
                connection.session.acked_seq = max(connection.session.acked_seq, data)
            asyncio.get_running_loop().call_later(
                self._settings.heartbeat_ack_delay, connection.send, _frame(Op.HEARTBEAT_ACK)
            )
        elif op in (Op.IDENTIFY, Op.RESUME) and connection.session is not None:
            connection.close(CloseCode.ALREADY_AUTHENTICATED, "Already authenticated")
        elif op is Op.IDENTIFY:
            self._identify(connection, data)
        elif op is Op.RESUME:
            self._resume(connection, data)
        elif connection.session is None:
            connection.close(CloseCode.NOT_AUTHENTICATED, "Not authenticated")
        elif op is Op.REQUEST_GUILD_MEMBERS:
            self._send_member_chunks(connection, connection.session, data)
        elif op not in (Op.PRESENCE_UPDATE, Op.VOICE_STATE_UPDATE):
            connection.close(CloseCode.UNKNOWN_OPCODE, "Unknown opcode")

    # ----------------------------------------------------------------------- world events

    def publish(self, event: GatewayEvent) -> None:
        """Dispatch a world event to every session that should see it (the `Sandbox`
        listener)."""
        self._recent.append(event)
        self._fan_out(event)

    def replay_last_dispatches(self, count: int) -> int:
        """Publish the last `count` world events again, as Discord sometimes delivers an event
        twice (each copy gets a new sequence number). Returns how many were replayed."""
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        events = list(self._recent)[-count:]
        for event in events:
            self._fan_out(event)
        return len(events)

    # ----------------------------------------------------------------------- connections

    def drop_connections(self) -> int:
        """Cut every socket without a closing handshake; sessions stay resumable and buffer
        whatever happens until the bots RESUME. Returns how many sockets were cut."""
        now = self._clock()
        connections = list(self._connections)
        for connection in connections:
            if connection.session is not None:
                connection.session.detach(connection, now)
            connection.abort()
        return len(connections)

    def drop_shard(self, shard: tuple[int, int], *, hold: bool = False) -> int:
        """Cut the sockets of the sessions on ``shard`` (id, count) without a closing
        handshake, as a network failure on one shard's connection does; every other session
        goes on. With ``hold`` the shard stays down: its RESUME is left unanswered (the new
        socket stays open and its heartbeats are acknowledged) until `release_shard`, while
        its session buffers what happens. Returns how many sockets were cut."""
        if hold:
            self._held_shards.add(shard)
        now = self._clock()
        cut = 0
        for session in list(self._sessions.values()):
            connection = session.connection
            if (session.shard_id, session.shard_count) != shard or connection is None:
                continue
            session.detach(connection, now)
            connection.abort()
            cut += 1
        return cut

    def release_shard(self, shard: tuple[int, int]) -> int:
        """Stop holding ``shard`` and answer the RESUMEs held for it (each then replays what
        its session missed, then RESUMED). Returns how many were answered."""
        self._held_shards.discard(shard)
        held = [item for item in self._held_resumes if item[1] == shard]
        self._held_resumes = [item for item in self._held_resumes if item[1] != shard]
        answered = 0
        for connection, _, data in held:
            if connection in self._connections:
                self._resume(connection, data)
                answered += 1
        return answered

    def invalidate_sessions(self) -> int:
        """End every session, as Discord does when it invalidates them: each identified socket
        gets INVALID_SESSION (op 9, `d: false`) and no session can be resumed, so the bots
        IDENTIFY again and get a new READY. Whatever happens before they do is dispatched to no
        one. Returns how many sessions ended."""
        now = self._clock()
        sessions = list(self._sessions.values())
        self._sessions.clear()
        for session in sessions:
            connection = session.connection
            if connection is not None:
                session.detach(connection, now)
                connection.send(_frame(Op.INVALID_SESSION, False))
        return len(sessions)

    def request_reconnect(self) -> int:
        """Send RECONNECT (op 7) on every identified socket; clients close and RESUME."""
        connections = [c for c in self._connections if c.session is not None]
        for connection in connections:
            connection.send(_frame(Op.RECONNECT))
        return len(connections)

    def sessions(self) -> list[dict[str, Any]]:
        """Each live session: id, shard, intents, sequence, the newest sequence the bot's
        heartbeats acknowledged (``acked``), and whether a socket is attached."""
        self._expire_sessions()
        return [
            {
                "session_id": session.id,
                "shard": [session.shard_id, session.shard_count],
                "intents": int(session.intents),
                "seq": session.seq,
                "acked": session.acked_seq,
                "connected": session.connection is not None,
            }
            for session in self._sessions.values()
        ]

    async def close(self) -> None:
        """Stop listening to the world and close every socket (1001 going away), waiting for
        the connections to finish."""
        self._unsubscribe()
        for connection in self._connections:
            connection.close(CloseCode.GOING_AWAY, "Sandbox shutting down", handshake=False)
        try:
            await asyncio.wait_for(self._no_connections.wait(), timeout=5.0)
        except TimeoutError:
            for connection in list(self._connections):
                connection.abort()

    # --------------------------------------------------------------------------- private

    def _fan_out(self, event: GatewayEvent) -> None:
        self._expire_sessions()
        if event.guild_id is not None and not self._sandbox.bot_in_guild(event.guild_id):
            return
        bot_user_id = self._sandbox.bot_user_id
        whole: str | None = None  # the payload as JSON, encoded once for every session
        for session in self._sessions.values():
            if not session.wants(event):
                continue
            if event.name in ("MESSAGE_CREATE", "MESSAGE_UPDATE") and (
                Intent.MESSAGE_CONTENT not in session.intents
            ):
                session.dispatch(event.name, visible_message_data(event.data, bot_user_id))
                continue
            if whole is None:
                whole = json.dumps(event.data, separators=(",", ":"))
            session.dispatch(event.name, event.data, encoded=whole)

    def _expire_sessions(self) -> None:
        cutoff = self._clock() - self._settings.resume_ttl
        expired = [
            session_id
            for session_id, session in self._sessions.items()
            if session.detached_at is not None and session.detached_at < cutoff
        ]
        for session_id in expired:
            del self._sessions[session_id]

    def _identify(self, connection: GatewayConnection, data: Any) -> None:
        identify = _validated(connection, schemas.Identify, data)
        if identify is None:
            return
        if not secrets.compare_digest(identify.token, self._sandbox.token):
            connection.close(CloseCode.AUTHENTICATION_FAILED, "Authentication failed")
            return
        if identify.intents is None or identify.intents < 0:
            connection.close(CloseCode.INVALID_INTENTS, "Invalid intent(s)")
            return
        flags = self._sandbox.application_flags
        if any(
            identify.intents & intent and not flags & allowed
            for intent, allowed in PRIVILEGED_INTENT_FLAGS.items()
        ):
            shard_id, shard_count = identify.shard or (0, 1)
            self._record_identify(shard_id, shard_count, refused="disallowed_intents")
            connection.close(CloseCode.DISALLOWED_INTENTS, "Disallowed intent(s)")
            return
        shard_id, shard_count = identify.shard or (0, 1)
        if not 0 <= shard_id < shard_count:
            connection.close(CloseCode.INVALID_SHARD, "Invalid shard")
            return
        if not self.session_starts.limit(identify.token)["remaining"]:
            # Discord resets the token of a bot past its session start limit; the sandbox
            # refuses as a reset token would be, and keeps the token.
            self._record_identify(shard_id, shard_count, refused="session_start_limit")
            connection.close(CloseCode.AUTHENTICATION_FAILED, "Session start limit reached")
            return
        if not self._identify_allowed(shard_id, shard_count):
            connection.send(_frame(Op.INVALID_SESSION, False))
            return
        self.session_starts.use(identify.token)
        self._expire_sessions()
        session = GatewaySession(
            shard=(shard_id, shard_count),
            intents=Intent(identify.intents),
            replay_buffer=self._settings.replay_buffer,
        )
        self._sessions[session.id] = session
        session.attach(connection)
        guild_ids = [gid for gid in self._sandbox.guild_ids if session.on_shard(gid)]
        session.dispatch("READY", self._ready(session, guild_ids))
        for guild_id in guild_ids:
            session.dispatch("GUILD_CREATE", self._sandbox.guild_create(guild_id))

    def _identify_allowed(self, shard_id: int, shard_count: int) -> bool:
        """Record the IDENTIFY; False when it came sooner than ``identify_interval`` after the
        last accepted one of its bucket (enforced only with an interval)."""
        now = self._clock()
        last = self._bucket_identified.get(shard_id % self._settings.max_concurrency)
        refused = last is not None and now - last < self._settings.identify_interval
        record = self._record_identify(shard_id, shard_count, refused="too_soon" if refused else "")
        if not refused:
            self._bucket_identified[record.bucket] = now
        return not refused

    def _record_identify(self, shard_id: int, shard_count: int, *, refused: str) -> IdentifyRecord:
        bucket = shard_id % self._settings.max_concurrency
        record = IdentifyRecord(
            self._clock(), (shard_id, shard_count), bucket, bool(refused), reason=refused
        )
        self.identifies.append(record)
        return record

    def identifies_too_soon(self, interval: float = 5.0) -> list[IdentifyRecord]:
        """The accepted IDENTIFYs that came less than ``interval`` seconds after the previous
        accepted one of their bucket: what Discord would have refused."""
        last: dict[int, float] = {}
        too_soon = []
        for record in self.identifies:
            if record.refused:
                continue
            previous = last.get(record.bucket)
            if previous is not None and record.at - previous < interval:
                too_soon.append(record)
            last[record.bucket] = record.at
        return too_soon

    def session_start_limit(self, token: str) -> dict[str, int]:
        """`GET /gateway/bot`'s ``session_start_limit`` for the bot ``token``."""
        return self.session_starts.limit(token)

    def _ready(self, session: GatewaySession, guild_ids: list[int]) -> dict[str, Any]:
        return {
            "v": 10,
            "user": self._sandbox.current_user(),
            "guilds": [{"id": str(guild_id), "unavailable": True} for guild_id in guild_ids],
            "session_id": session.id,
            "session_type": "normal",
            "resume_gateway_url": self._url(),
            "shard": [session.shard_id, session.shard_count],
            "application": {
                "id": str(self._sandbox.bot_user_id),
                "flags": self._sandbox.application_flags,
            },
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
            "user_settings": {},
        }

    def _resume(self, connection: GatewayConnection, data: Any) -> None:
        resume = _validated(connection, schemas.Resume, data)
        if resume is None:
            return
        if not secrets.compare_digest(resume.token, self._sandbox.token):
            connection.close(CloseCode.AUTHENTICATION_FAILED, "Authentication failed")
            return
        self._expire_sessions()
        session = self._sessions.get(resume.session_id)
        if session is not None and (session.shard_id, session.shard_count) in self._held_shards:
            shard = (session.shard_id, session.shard_count)
            self._held_resumes.append((connection, shard, data))
            return
        missed = None if session is None else session.missed_since(resume.seq or 0)
        if session is None or missed is None:
            self._sessions.pop(resume.session_id, None)
            connection.send(_frame(Op.INVALID_SESSION, False))
            return
        session.attach(connection)
        for frame in missed:
            connection.send(frame)
        session.dispatch("RESUMED", {})

    def _send_member_chunks(
        self, connection: GatewayConnection, session: GatewaySession, data: Any
    ) -> None:
        """Answer op 8 for a guild of the session's shard (other guilds are ignored)."""
        request = _validated(connection, schemas.RequestGuildMembers, data)
        if request is None or request.guild_id not in self._sandbox.guild_ids:
            return
        if not session.on_shard(request.guild_id):
            return
        members, not_found = self._sandbox.member_chunk(
            request.guild_id, query=request.query, limit=request.limit, user_ids=request.user_ids
        )
        chunks = [
            members[start : start + MEMBERS_PER_CHUNK]
            for start in range(0, len(members), MEMBERS_PER_CHUNK)
        ] or [[]]
        for index, chunk in enumerate(chunks):
            payload: dict[str, Any] = {
                "guild_id": str(request.guild_id),
                "members": chunk,
                "chunk_index": index,
                "chunk_count": len(chunks),
                "not_found": [str(user_id) for user_id in not_found] if index == 0 else [],
            }
            if request.presences:
                payload["presences"] = []
            if request.nonce is not None:
                payload["nonce"] = request.nonce
            session.dispatch("GUILD_MEMBERS_CHUNK", payload)


def _validated(connection: GatewayConnection, schema: type[SchemaT], data: Any) -> SchemaT | None:
    """`data` as `schema`, or `None` after closing the connection with DECODE_ERROR."""
    try:
        return schema.model_validate(data)
    except ValidationError:
        connection.close(CloseCode.DECODE_ERROR, "Decode error")
        return None
