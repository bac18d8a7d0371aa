"""Reads that turn the admin's configuration and the worker's records into the pipeline's and
the loop's inputs: channel configuration, personas, blocks, people's standing, the message
index and turns. Nothing here writes. The event queue's and unread pools' reads are in
`event_queue`, short-term memory's in `short_term_memory`, the lorebooks' in `lore`, what the
why-trace reads about one message in `message_trace`."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from django.db import connection
from django.db.models import F

from chat.models import (
    CLAIMING_STATUSES,
    ChannelResetMarker,
    ChannelWindowAnchor,
    EventQueue,
    MessageIndex,
    Turn,
    UnreadEvent,
)
from chat.pipeline.presets import ChatPreset, chat_preset_from_sillytavern
from chat.pipeline.triggers import AuthorStanding, TriggerInput, TriggerPersona
from chat.pipeline.types import (
    BlockType,
    ContextNote,
    HistoryMessage,
    ModelSettings,
    PersonaProfile,
    PrivacyLevel,
    ProxyIdentity,
    Role,
    SampleMessage,
    UserBlock,
)
from chat.selectors.model_specs import (  # noqa: F401 (the package's names)
    endpoint_reports_cost,
    instruct_template,
    persona_model_specs,
    planner_model_specs,
)
from chat.shards import ShardSet
from personas.config_version import DM_VERSION_KEY
from personas.models import Block, ChannelConfig, ChannelMode, GuildConfig, Persona, UserPrivacy


@dataclass(frozen=True)
class ChannelSettings:
    """What the loop needs to know about one channel; ``guild`` is None for a DM."""

    channel_id: int
    guild: GuildConfig | None
    mode: ChannelMode
    enabled: bool
    fetch_limit: int
    timezone: str
    channel_note: ContextNote | None
    global_note: ContextNote | None


def channel_settings(*, channel_id: int, guild_id: int | None) -> ChannelSettings | None:
    """The channel's settings; None when the bot does not serve that guild.

    A channel of a configured guild without its own row is reactive, enabled, and uses the
    guild's fetch limit. DMs (``guild_id`` None) are reactive with the default limit.
    """
    if guild_id is None:
        return ChannelSettings(channel_id, None, ChannelMode.REACTIVE, True, 80, "UTC", None, None)
    guild = GuildConfig.objects.filter(guild_id=guild_id).first()
    if guild is None:
        return None
    channel = ChannelConfig.objects.filter(channel_id=channel_id, guild=guild).first()
    return ChannelSettings(
        channel_id=channel_id,
        guild=guild,
        mode=ChannelMode(channel.mode) if channel else ChannelMode.REACTIVE,
        enabled=channel.enabled if channel else True,
        fetch_limit=channel.effective_fetch_limit if channel else guild.message_fetch_limit,
        timezone=guild.timezone,
        channel_note=_note(channel.context_note, channel.context_note_depth) if channel else None,
        global_note=_note(guild.context_note, guild.context_note_depth),
    )


@dataclass(frozen=True)
class ChannelConfiguration:
    """One read of everything configured for a channel, judged at one instant ``read_at``:
    its settings, the personas that may speak there (main first) and the unexpired blocks.

    The loop reads it once per batch of unread messages; the trigger rules and every turn of
    that batch use the same read.
    """

    settings: ChannelSettings
    personas: tuple[Persona, ...]
    blocks: tuple[UserBlock, ...]
    read_at: dt.datetime

    @property
    def channel_id(self) -> int:
        return self.settings.channel_id

    @property
    def guild_id(self) -> int | None:
        guild = self.settings.guild
        return guild.guild_id if guild is not None else None

    def persona_named(self, name: str) -> Persona | None:
        """The persona called ``name`` (ignoring case); None when there is none."""
        return next((p for p in self.personas if p.name.casefold() == name.casefold()), None)


@dataclass(frozen=True)
class ConfiguredChannel:
    """Everything configured for a channel that does not depend on the instant: its settings,
    the personas that may speak there (main first), and its guild's blocks with their expiries
    (lapsed ones included). `at` judges it at one instant.

    ``version_keys`` are the `personas.config_version` stamps it was read under: its guild's;
    for a DM, `DM_VERSION_KEY` and the DM persona's guild's (whose blocks apply)."""

    settings: ChannelSettings
    personas: tuple[Persona, ...]
    blocks: tuple[UserBlock, ...]
    version_keys: frozenset[int]

    def at(self, now: dt.datetime) -> ChannelConfiguration:
        """The configuration at ``now``: the blocks that have not expired by then."""
        return ChannelConfiguration(
            settings=self.settings,
            personas=self.personas,
            blocks=tuple(b for b in self.blocks if b.expires_at is None or b.expires_at > now),
            read_at=now,
        )


def configured_channel(*, channel_id: int, guild_id: int | None) -> ConfiguredChannel | None:
    """The channel's configuration, every block with its expiry; None when the bot does not
    serve that guild. Reads only `personas.config_version.CONFIGURATION_MODELS`' rows (a cache
    trusts it while their stamps stand).

    ``guild_id`` None means a DM (as Discord says, never guessed: see `channel_guild_id`).
    A DM's persona is the one the admin chose to answer DMs (none: nobody answers), and the
    blocks of that persona's guild apply: someone it blocked there is blocked in DMs too.
    """
    channel = channel_settings(channel_id=channel_id, guild_id=guild_id)
    if channel is None:
        return None
    personas = guild_personas(guild=channel.guild)
    blocks_of = channel.guild if channel.guild is not None or not personas else personas[0].guild
    keys = {DM_VERSION_KEY} if guild_id is None else {guild_id}
    if blocks_of is not None:
        keys.add(blocks_of.guild_id)
    return ConfiguredChannel(
        settings=channel,
        personas=tuple(personas),
        blocks=tuple(guild_blocks(guild=blocks_of)),
        version_keys=frozenset(keys),
    )


def channel_configuration(
    *, channel_id: int, guild_id: int | None, now: dt.datetime
) -> ChannelConfiguration | None:
    """The channel's configuration at ``now`` (`configured_channel` judged at ``now``); None
    when the bot does not serve that guild. The worker reads it through its cache
    (`chat.services.configuration_cache`); every read here is fresh."""
    configured = configured_channel(channel_id=channel_id, guild_id=guild_id)
    return configured.at(now) if configured is not None else None


@dataclass(frozen=True)
class KnownGuild:
    """What the worker's records say about a channel's guild (``guild_id`` None: a DM)."""

    guild_id: int | None


def channel_guild_id(*, channel_id: int) -> KnownGuild | None:
    """The guild recorded with the channel's messages at ingest (from Discord's own payload).

    Reads the unread pool, then the event queue's deduplication keys, which outlive the pool.
    Returns None when nothing was ever recorded for the channel: unknown, which is not a DM.
    """
    for model in (UnreadEvent, EventQueue):
        row = (
            model.objects.filter(channel_id=channel_id)
            .order_by("-message_id")
            .values_list("guild_id", flat=True)[:1]
        )
        for guild_id in row:
            return KnownGuild(guild_id)
    return None


def guild_personas(*, guild: GuildConfig | None) -> list[Persona]:
    """The guild's enabled personas, main first. In a DM (``guild`` None): the persona the admin
    chose to answer DMs (``answers_dms``), alone; none when no enabled persona does (DMs are
    off, the default)."""
    if guild is None:
        dm_persona = (
            Persona.objects.filter(answers_dms=True, enabled=True).select_related("guild").first()
        )
        return [dm_persona] if dm_persona else []
    return list(Persona.objects.filter(guild=guild, enabled=True).order_by("-is_main", "name"))


def persona_profile(*, persona: Persona) -> PersonaProfile:
    """The pipeline's frozen view of a configured persona."""
    return PersonaProfile(
        name=persona.name,
        system_prompt=persona.system_prompt,
        triggers=tuple(persona.triggers),
        sample_dialogue=tuple(
            SampleMessage(role=Role(line["role"]), content=line["content"])
            for line in persona.sample_dialogue
        ),
        prefill=persona.prefill,
        context_note=_note(persona.context_note, persona.context_note_depth),
        force_lowercase=persona.force_lowercase,
        punctuation_splits=persona.punctuation_splits,
        deliberate_tool_mode=persona.deliberate_tool_mode,
        model=ModelSettings(
            context_window=persona.context_window,
            max_output_tokens=persona.max_output_tokens,
            reasoning_in_think_tags=persona.reasoning_in_think_tags,
        ),
    )


def chat_preset(*, persona: Persona, guild: GuildConfig | None) -> ChatPreset | None:
    """The persona's SillyTavern Chat Completion preset, else its guild's; None: neither has
    one (the prompt keeps this product's order)."""
    stored = persona.chat_preset or (guild.chat_preset if guild is not None else None)
    return chat_preset_from_sillytavern(stored) if stored else None


def trigger_persona(*, persona: Persona) -> TriggerPersona:
    return TriggerPersona(
        name=persona.name,
        is_main=persona.is_main,
        triggers=tuple(persona.triggers),
        enabled=persona.enabled,
    )


def trigger_inputs(
    *,
    configuration: ChannelConfiguration,
    messages: Sequence[HistoryMessage],
    bot_user_id: int | None,
) -> list[TriggerInput]:
    """The trigger decision's facts for each of ``messages`` (in order), read at once: the
    channel's personas and blocks from ``configuration``, the accountable users' standing
    (the proxy's sender for a proxied member), the personas that wrote the replied-to
    messages, and which messages a proxy system replaced. The one gathering step before
    `chat.pipeline.triggers.trigger_decision`, for the worker and the dashboard alike."""
    standing = user_standing(
        user_ids=[m.accountable_user_id for m in messages], guild_id=configuration.guild_id
    )
    replied = replied_persona_names(
        message_ids=[m.reference.message_id for m in messages if m.reference]
    )
    superseded = superseded_original_ids(message_ids=[m.id for m in messages])
    personas = tuple(trigger_persona(persona=p) for p in configuration.personas)
    blocks_of: dict[int, list[tuple[str, BlockType]]] = {}
    for block in configuration.blocks:
        blocks_of.setdefault(block.user_id, []).append((block.persona_name, block.type))
    inputs = []
    for message in messages:
        user_id = message.accountable_user_id
        author = AuthorStanding(
            blacklisted=user_id in standing.blacklisted,
            full_privacy=standing.privacy.get(user_id) is PrivacyLevel.FULL,
            blocks=tuple(blocks_of.get(user_id, ())),
        )
        inputs.append(
            TriggerInput(
                message=message,
                personas=personas,
                is_dm=configuration.guild_id is None,
                bot_user_id=bot_user_id,
                replied_persona_name=replied.get(message.reference.message_id)
                if message.reference
                else None,
                author=author,
                superseded=message.id in superseded,
            )
        )
    return inputs


def active_blocks(*, guild: GuildConfig | None, now: dt.datetime) -> list[UserBlock]:
    """Unexpired blocks and mutes, a guild-wide one expanded to every persona of the guild."""
    return [b for b in guild_blocks(guild=guild) if b.expires_at is None or b.expires_at > now]


def guild_blocks(*, guild: GuildConfig | None) -> list[UserBlock]:
    """Every block and mute of the guild with its expiry (lapsed ones included), a guild-wide
    one expanded to every persona of the guild."""
    if guild is None:
        return []
    names = list(Persona.objects.filter(guild=guild).values_list("name", flat=True))
    blocks = Block.objects.filter(guild=guild).select_related("persona")
    return [
        UserBlock(
            persona_name=name,
            user_id=block.user_id,
            type=BlockType(block.type),
            expires_at=block.expires_at,
        )
        for block in blocks
        for name in ([block.persona.name] if block.persona else names)
    ]


@dataclass(frozen=True)
class UserStanding:
    """Users' own privacy choices (absent: the default) and the admins' blacklist."""

    privacy: dict[int, PrivacyLevel]
    blacklisted: frozenset[int]

    @property
    def full_privacy(self) -> frozenset[int]:
        return frozenset(u for u, level in self.privacy.items() if level is PrivacyLevel.FULL)

    def remembers(self, user_id: int) -> bool:
        """Whether memories about ``user_id`` may be kept and shown: only at minimal privacy
        and off the blacklist."""
        level = self.privacy.get(user_id, PrivacyLevel.MINIMAL)
        return level is PrivacyLevel.MINIMAL and user_id not in self.blacklisted


_STRICTNESS = {PrivacyLevel.MINIMAL: 0, PrivacyLevel.PARTIAL: 1, PrivacyLevel.FULL: 2}


def user_standing(*, user_ids: Iterable[int], guild_id: int | None) -> UserStanding:
    """Which of ``user_ids`` chose which privacy in the guild ``guild_id``, and which are
    blacklisted there. In direct messages (``guild_id`` None) the strictest level each user
    holds in any guild applies, and a blacklist in any guild holds."""
    rows = UserPrivacy.objects.filter(user_id__in=set(user_ids))
    if guild_id is not None:
        rows = rows.filter(guild__guild_id=guild_id)
    privacy: dict[int, PrivacyLevel] = {}
    blacklisted = set()
    for row in rows:
        level = PrivacyLevel(row.level)
        held = privacy.get(row.user_id, PrivacyLevel.MINIMAL)
        privacy[row.user_id] = max(level, held, key=_STRICTNESS.__getitem__)
        if row.blacklisted:
            blacklisted.add(row.user_id)
    return UserStanding(privacy=privacy, blacklisted=frozenset(blacklisted))


def replied_persona_names(*, message_ids: Iterable[int]) -> dict[int, str]:
    """For those of ``message_ids`` the bot delivered: the persona that spoke each."""
    wanted = set(message_ids)
    if not wanted:
        return {}
    rows = MessageIndex.objects.filter(message_id__in=wanted, persona__isnull=False)
    return dict(rows.values_list("message_id", "persona__name"))


@dataclass(frozen=True)
class Attribution:
    """Who spoke a message, as the message index recorded it: one of the bot's personas
    (``persona_name``), or a proxy system's member (``proxy``)."""

    persona_name: str | None = None
    proxy: ProxyIdentity | None = None


def message_attributions(*, message_ids: Iterable[int]) -> dict[int, Attribution]:
    """For those of ``message_ids`` in the message index: the persona that spoke each (the
    bot's deliveries) or the proxied member (proxy systems' messages)."""
    rows = MessageIndex.objects.filter(message_id__in=set(message_ids)).values_list(
        "message_id", "persona__name", "proxy_member_id", "proxy_member_name", "proxy_sender_id"
    )
    found = {}
    for message_id, persona_name, member_id, member_name, sender_id in rows:
        proxy = None
        if member_id and sender_id is not None:
            proxy = ProxyIdentity(
                member_id=member_id, member_name=member_name, host_user_id=sender_id
            )
        if persona_name or proxy:
            found[message_id] = Attribution(persona_name=persona_name, proxy=proxy)
    return found


def superseded_original_ids(*, message_ids: Iterable[int]) -> frozenset[int]:
    """Those of ``message_ids`` that a proxy system replaced with a proxied message (and
    deleted): they are never answered and never shown."""
    rows = MessageIndex.objects.filter(proxy_original_id__in=set(message_ids))
    return frozenset(rows.values_list("proxy_original_id", flat=True))


def moderation_withheld_message_ids(*, message_ids: Iterable[int]) -> frozenset[int]:
    """Those of ``message_ids`` that moderation withheld as a turn's trigger (a guild that
    checks triggering messages): never answered, never shown to a model."""
    rows = Turn.objects.filter(
        trigger_message_id__in=set(message_ids),
        status=Turn.Status.REFUSED,
        moderation__trigger_withheld=True,
    )
    return frozenset(rows.values_list("trigger_message_id", flat=True))


def indexed_message_ids(*, message_ids: Iterable[int]) -> frozenset[int]:
    """Those of ``message_ids`` already in the message index (recorded deliveries)."""
    rows = MessageIndex.objects.filter(message_id__in=set(message_ids))
    return frozenset(rows.values_list("message_id", flat=True))


def own_webhook_ids() -> set[int]:
    """The webhooks the bot has delivered through (so their echoes are known as its own); a
    proxy system's webhooks are not the bot's."""
    rows = MessageIndex.objects.filter(webhook_id__isnull=False, proxy_member_id="")
    return set(rows.values_list("webhook_id", flat=True).distinct())


def main_persona_names() -> dict[int, str]:
    """Per guild id, the persona that speaks through the bot account."""
    rows = Persona.objects.filter(is_main=True).values_list("guild__guild_id", "name")
    return dict(rows)


def last_presence(*, persona_id: int, user_id: int) -> dt.datetime | None:
    """When ``user_id`` last addressed the persona and was answered (their recorded presence),
    or None."""
    rows = Turn.objects.filter(
        persona_id=persona_id,
        trigger_author_id=user_id,
        status__in=[Turn.Status.DELIVERING, Turn.Status.REPLIED],
    )
    return rows.order_by("-created_at").values_list("created_at", flat=True).first()


def window_anchor(*, channel_id: int) -> ChannelWindowAnchor | None:
    return ChannelWindowAnchor.objects.filter(channel_id=channel_id).first()


def full_privacy_user_ids(*, user_ids: Iterable[int], guild_id: int | None) -> frozenset[int]:
    """Those of ``user_ids`` who chose full privacy in the guild ``guild_id`` (in direct
    messages: in any guild); their words are stored nowhere there."""
    return user_standing(user_ids=user_ids, guild_id=guild_id).full_privacy


def full_privacy_by_guild(
    *, user_ids_by_guild: Mapping[int | None, Iterable[int]]
) -> dict[int | None, frozenset[int]]:
    """`full_privacy_user_ids` for several guilds at once (None: direct messages), in one
    query: for each guild, those of its ``user_ids`` whose words are stored nowhere there."""
    wanted = sorted({user_id for user_ids in user_ids_by_guild.values() for user_id in user_ids})
    full_in: dict[int, set[int]] = {}
    for user_id, guild_id in _full_privacy_rows(wanted):
        full_in.setdefault(user_id, set()).add(guild_id)
    return {
        guild_id: frozenset(
            user_id
            for user_id in user_ids
            if user_id in full_in and (guild_id is None or guild_id in full_in[user_id])
        )
        for guild_id, user_ids in user_ids_by_guild.items()
    }


def _full_privacy_rows(user_ids: list[int]) -> list[tuple[int, int]]:
    """(user id, Discord guild id) for each guild where one of ``user_ids`` chose full
    privacy. Every incoming batch asks, so it is one hand-written statement: the ORM's query
    building costs twice the read."""
    if not user_ids:
        return []
    quote = connection.ops.quote_name
    privacy = quote(UserPrivacy._meta.db_table)
    guilds = quote(GuildConfig._meta.db_table)
    guild = quote(UserPrivacy._meta.get_field("guild").column)
    marks = ", ".join(["%s"] * len(user_ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT p.user_id, g.guild_id FROM {privacy} p JOIN {guilds} g ON g.id = p.{guild} "
            f"WHERE p.level = %s AND p.user_id IN ({marks})",
            [PrivacyLevel.FULL.value, *user_ids],
        )
        return cursor.fetchall()


def turn_already_answered(*, trigger_id: int, persona_id: int) -> bool:
    """True when a turn for this trigger and persona replied, is delivering its reply, or had
    it withheld (exactly-once replies across restarts and overlapping workers)."""
    return Turn.objects.filter(
        trigger_message_id=trigger_id, persona_id=persona_id, status__in=CLAIMING_STATUSES
    ).exists()


def turns_delivering(
    *, on_shard: Callable[[int | None], bool], started_before: dt.datetime | None = None
) -> list[Turn]:
    """Turns left ``delivering`` in guilds ``on_shard`` accepts (None: DMs), begun before
    ``started_before`` (None: whenever), with their personas."""
    turns = Turn.objects.filter(status=Turn.Status.DELIVERING).select_related("persona")
    if started_before is not None:
        turns = turns.filter(created_at__lt=started_before)
    return [turn for turn in turns if on_shard(turn.guild_id)]


def configured_channels(*, shards: ShardSet) -> list[tuple[int, int]]:
    """(channel id, guild id) of every channel configured in a guild on ``shards``."""
    rows = ChannelConfig.objects.annotate(guild_snowflake=F("guild__guild_id"))
    rows = shards.filter(rows, field="guild_snowflake")
    return list(rows.order_by("channel_id").values_list("channel_id", "guild_snowflake"))


def configured_guild_ids() -> list[int]:
    """Every configured guild's id (where the slash commands are synced)."""
    return list(GuildConfig.objects.order_by("guild_id").values_list("guild_id", flat=True))


def channel_reset_marker(*, channel_id: int) -> ChannelResetMarker | None:
    """The channel's newest ``/reset`` (its window starts after ``marker_id``); None: never."""
    return ChannelResetMarker.objects.filter(channel_id=channel_id).first()


def _note(text: str, depth: int) -> ContextNote | None:
    return ContextNote(text=text, depth=depth) if text.strip() else None


FOLLOW_UP_LOOKBACK = 50
"""A persona's newest replied turns in a channel searched for the reply a follow-up answers."""


def replied_turn_tools(*, channel_id: int, persona_id: int, message_id: int) -> frozenset[str]:
    """The tools offered to the persona's turn that delivered ``message_id`` in the channel
    (among its newest `FOLLOW_UP_LOOKBACK` replies); empty when no such turn is found."""
    rows = (
        Turn.objects.filter(
            channel_id=channel_id, persona_id=persona_id, status=Turn.Status.REPLIED
        )
        .order_by("-id")
        .values_list("tool_allowlist", "delivered_message_ids")[:FOLLOW_UP_LOOKBACK]
    )
    wanted = str(message_id)
    for allowlist, delivered in rows:
        if wanted in delivered:
            return frozenset(allowlist)
    return frozenset()
