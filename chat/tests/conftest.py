"""Shared fixtures for service and loop tests: the real database (PostgreSQL in CI), the fake model
over real HTTP, and a fake Discord passed in as the `DiscordPort` (no gateway needed)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from itertools import count

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from chat import selectors
from chat.llm.attempts import AttemptRunner, RetryPolicy
from chat.llm.fake_server import FakeLLMServer
from chat.llm.openai_compat import OpenAICompatibleClient
from chat.pipeline.tokens import default_token_counter
from chat.pipeline.triggers import TurnReason
from chat.pipeline.types import Author, HistoryMessage, NameDirectory
from chat.pipeline.window_reuse import GatewayCacheView
from chat.ports import ChannelPlace, Delivered, DeliveryError, Speaker
from chat.services.turn_request import TurnRequest, TurnRuntime
from chat.tests.factories import ALICE, BOB, T0, sf
from chat.windows import WindowRegistry
from personas.models import ChannelConfig, GuildConfig, Persona

GUILD_ID = sf(1)
CHANNEL = sf(2)
BOT = Author(id=sf(9100), display_name="Tomori", is_bot=True, persona_name="Tomori")
NOW = T0 + dt.timedelta(hours=2)


@dataclass
class FakeDiscord:
    """A `DiscordPort` over one guild held in memory: what it sent, read and refused."""

    history: dict[int, list[HistoryMessage]] = field(default_factory=dict)
    cached: dict[int, list[HistoryMessage]] = field(default_factory=dict)
    places: dict[int, ChannelPlace] = field(default_factory=dict)
    delivered: list[tuple[Speaker, str, int | None, str | None]] = field(default_factory=list)
    reactions: list[tuple[int, int, str]] = field(default_factory=list)
    edits: list[tuple[int, str]] = field(default_factory=list)
    nonce_seeds: list[str | None] = field(default_factory=list)
    refuse_delivery: DeliveryError | None = None
    hold_delivery: asyncio.Event | None = None
    """While set to an unset event, a delivery waits on it (a send in flight)."""
    history_reads: list[tuple[int, int]] = field(default_factory=list)
    message_reads: list[int] = field(default_factory=list)
    on_locate: list = field(default_factory=list)
    bot_user_id: int = BOT.id
    _ids: count = field(default_factory=lambda: count(sf(50_000)))

    def post(self, message: HistoryMessage) -> HistoryMessage:
        """A message appears in the channel and in the gateway cache."""
        self.history.setdefault(message.channel_id, []).append(message)
        self.cached.setdefault(message.channel_id, []).append(message)
        return message

    async def fetch_history(self, channel_id: int, limit: int) -> list[HistoryMessage]:
        self.history_reads.append((channel_id, limit))
        return list(reversed(self.history.get(channel_id, [])[-limit:]))

    def cache_view(self, channel_id: int) -> GatewayCacheView[HistoryMessage]:
        messages = sorted(self.cached.get(channel_id, []), key=lambda m: m.id)
        return GatewayCacheView(messages=tuple(messages))

    async def fetch_history_before(
        self, channel_id: int, before_id: int, limit: int
    ) -> list[HistoryMessage]:
        self.history_reads.append((channel_id, limit))
        older = [m for m in self.history.get(channel_id, []) if m.id < before_id]
        return list(reversed(older[-limit:]))

    async def fetch_history_after(
        self, channel_id: int, after_id: int, limit: int
    ) -> list[HistoryMessage]:
        newer = [m for m in self.history.get(channel_id, []) if m.id > after_id]
        return newer[:limit]

    async def fetch_message(self, channel_id: int, message_id: int) -> HistoryMessage | None:
        self.message_reads.append(message_id)
        return next((m for m in self.history.get(channel_id, []) if m.id == message_id), None)

    async def thread_starter(self, channel_id: int) -> HistoryMessage | None:
        return None  # no threads here

    async def superseded_originals(self, messages: Sequence[HistoryMessage]) -> frozenset[int]:
        return frozenset()  # no proxy system here

    async def locate_channel(self, channel_id: int) -> ChannelPlace | None:
        for hook in self.on_locate:
            await hook()
        return self.places.get(channel_id)

    def names(self, guild_id: int | None, user_ids: Sequence[int]) -> NameDirectory:
        return NameDirectory(users={ALICE.id: "Alice", BOB.id: "Bob", BOT.id: "Tomori"})

    @contextlib.asynccontextmanager
    async def typing(self, channel_id: int) -> AsyncIterator[None]:
        yield

    async def deliver(
        self,
        *,
        channel_id: int,
        speaker: Speaker,
        text: str,
        reply_to: int | None,
        notice: str | None = None,
        nonce_seed: str | None = None,
        as_notice: bool = False,
    ) -> list[Delivered]:
        if self.refuse_delivery is not None:
            raise self.refuse_delivery
        if self.hold_delivery is not None:
            await self.hold_delivery.wait()
        self.delivered.append((speaker, text, reply_to, notice))
        self.nonce_seeds.append(nonce_seed)
        webhook_id = None if speaker.is_main else sf(9200)
        author = Author(
            id=BOT.id if speaker.is_main else sf(9200),
            display_name=speaker.name,
            is_bot=True,
            webhook_id=webhook_id,
            persona_name=speaker.name,
        )
        sent = HistoryMessage(
            id=next(self._ids), channel_id=channel_id, author=author, content=text, created_at=NOW
        )
        self.post(sent)
        return [Delivered(sent.id, sent, author_id=author.id, webhook_id=webhook_id)]

    async def find_delivery(
        self, *, channel_id: int, speaker: Speaker, reply_to: int, limit: int = 50
    ) -> list[Delivered]:
        later = [m for m in self.history.get(channel_id, []) if m.id > reply_to][:limit]
        return [
            Delivered(m.id, m, author_id=m.author.id, webhook_id=m.author.webhook_id)
            for m in later
            if m.author.is_bot and m.author.persona_name == speaker.name
        ]

    async def edit_message(
        self, *, channel_id: int, speaker: Speaker, message_id: int, text: str
    ) -> None:
        self.edits.append((message_id, text))

    async def react(self, channel_id: int, message_id: int, emoji: str) -> None:
        self.reactions.append((channel_id, message_id, emoji))

    async def refresh_attachment_urls(self, urls: Sequence[str]) -> dict[str, str]:
        return {}

    async def read_attachment(self, url: str, *, max_bytes: int) -> bytes:
        raise DeliveryError("no files here", permanent=True)

    def guild_stickers(self, guild_id: int) -> list[tuple[int, str]]:
        return []


@dataclass
class Bench:
    """One guild, its channel, the fake Discord, the fake model and the worker's runtime."""

    discord: FakeDiscord
    llm: FakeLLMServer
    runtime: TurnRuntime
    tomori: Persona
    anon: Persona

    async def request(self, trigger: HistoryMessage, persona: Persona, **kw) -> TurnRequest:
        configuration = await sync_to_async(selectors.channel_configuration)(
            channel_id=CHANNEL, guild_id=GUILD_ID, now=NOW
        )
        assert configuration is not None
        return TurnRequest(
            configuration=configuration,
            persona=persona,
            trigger=trigger,
            reason=kw.pop("reason", TurnReason.TRIGGER_WORD),
            **kw,
        )


def configure_guild(**guild_fields) -> tuple[Persona, Persona]:
    guild = GuildConfig.objects.create(guild_id=GUILD_ID, name="Band practice", **guild_fields)
    ChannelConfig.objects.create(
        channel_id=CHANNEL, guild=guild, context_note="Poems only.", context_note_depth=1
    )
    tomori = Persona.objects.create(
        guild=guild, name="Tomori", is_main=True, triggers=["tomori"], system_prompt="Be Tomori."
    )
    anon = Persona.objects.create(
        guild=guild, name="Anon", triggers=["anon"], system_prompt="Anon."
    )
    return tomori, anon


@pytest.fixture
async def bench(transactional_db) -> AsyncIterator[Bench]:
    tomori, anon = await sync_to_async(configure_guild)()
    discord = FakeDiscord(places={CHANNEL: ChannelPlace(GUILD_ID)})
    async with (
        FakeLLMServer() as llm,
        OpenAICompatibleClient(base_url=llm.base_url, api_key="test") as client,
    ):
        runtime = TurnRuntime(
            port=discord,
            windows=WindowRegistry(
                fetch_history=discord.fetch_history, cache_view=discord.cache_view
            ),
            llm=AttemptRunner(
                client=client,
                policy=RetryPolicy(attempts_per_model=2, backoff_base=0.01, backoff_cap=0.02),
                stream=False,
            ),
            token_counter=default_token_counter(),
            clock=lambda: NOW,
        )
        yield Bench(discord=discord, llm=llm, runtime=runtime, tomori=tomori, anon=anon)
    # The services' database work ran on sync_to_async's thread: close its connection there,
    # so the test database can be dropped.
    await sync_to_async(connections.close_all)()
