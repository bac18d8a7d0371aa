"""Slash commands and the "Why (not)?" message command, through discord.py's `app_commands`.

Each callback is three lines: call a service of `chat.services.slash_commands` with plain arguments
(through `answer`, which defers when the work takes longer than `DEFER_AFTER` seconds, so the
first answer always comes within Discord's 3 s), and send its result ephemerally. Every rule,
the permission checks included, is in the services: ``default_permissions`` only decides what
Discord shows. One `on_error` turns a service's refusal into the sentence the member reads;
`interaction_check` applies the per-member rate limit first.

    /privacy level:<minimal|partial|full>   /memory show | add text: | forget id:
    /persona list   /reset   /prompt persona:   message menu "Why (not)?"
"""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import discord
from asgiref.sync import sync_to_async
from discord import app_commands
from django.utils import timezone

from chat.pipeline.types import HistoryMessage
from chat.services import slash_commands as services
from chat.services.slash_commands import CommandRateLimit, CommandRefused
from chat.services.turn_request import TurnRuntime

logger = logging.getLogger(__name__)

DEFER_AFTER = 1.5
"""Seconds a command may work before its answer is deferred ("thinking…")."""
MESSAGE_LIMIT = 2000


@dataclass(frozen=True)
class Answer:
    """What a command shows the member: text, and optionally one file."""

    text: str
    file: tuple[str, bytes] | None = None


class Refused(app_commands.AppCommandError):
    """A refusal before the command ran (the rate limit); its message is for the member."""


async def answer(interaction: discord.Interaction, work: Awaitable[Answer]) -> None:
    """Send ``work``'s answer ephemerally: at once when it is ready within `DEFER_AFTER`
    seconds, else defer first and put the answer in the original response. Exceptions go
    to the tree's `on_error`."""
    task = asyncio.ensure_future(work)
    done, _ = await asyncio.wait({task}, timeout=DEFER_AFTER)
    if not done:
        await interaction.response.defer(ephemeral=True, thinking=True)
    result = await task
    text = _clip(result.text)
    files = [discord.File(io.BytesIO(result.file[1]), result.file[0])] if result.file else []
    if interaction.response.is_done():
        await interaction.edit_original_response(content=text, attachments=files)
    else:
        await interaction.response.send_message(text, files=files, ephemeral=True)


def _clip(text: str) -> str:
    return text if len(text) <= MESSAGE_LIMIT else text[: MESSAGE_LIMIT - 1] + "…"


def _now() -> dt.datetime:
    return timezone.now()


def _where(interaction: discord.Interaction) -> tuple[int, int, int]:
    """(guild id, channel id, caller id); commands exist only in guilds."""
    if interaction.guild_id is None or interaction.channel_id is None:
        raise CommandRefused("These commands work in a server's channels only.")
    return interaction.guild_id, interaction.channel_id, interaction.user.id


def _lines(lines: Iterable[str], empty: str) -> str:
    text = "\n".join(lines)
    return text or empty


class PersonaCommandTree(app_commands.CommandTree):
    """The worker's command tree: the product's commands, the rate limit, one error handler.

    ``runtime`` gives the worker's `TurnRuntime` once it is built (``/prompt`` dry-runs a turn
    with it).
    """

    def __init__(
        self,
        client: discord.Client,
        *,
        runtime: Callable[[], TurnRuntime | None],
        rate_limit: CommandRateLimit | None = None,
    ) -> None:
        super().__init__(client)
        self._runtime = runtime
        self.rate_limit = rate_limit or CommandRateLimit()
        self.synced: set[int | None] = set()
        """The scopes synced so far (guild ids; None: global)."""
        self.add_command(privacy_command)
        self.add_command(MemoryGroup())
        self.add_command(PersonaGroup())
        self.add_command(reset_command)
        self.add_command(prompt_command)
        self.add_command(app_commands.ContextMenu(name="Why (not)?", callback=why_command))

    def turn_runtime(self) -> TurnRuntime:
        runtime = self._runtime()
        if runtime is None:
            raise CommandRefused("The bot is still starting; try again in a moment.")
        return runtime

    async def interaction_check(self, interaction: discord.Interaction) -> bool:
        try:
            self.rate_limit.check(interaction.user.id)
        except CommandRefused as refused:
            raise Refused(str(refused)) from None
        return True

    async def on_error(
        self, interaction: discord.Interaction, error: app_commands.AppCommandError
    ) -> None:
        cause = error.original if isinstance(error, app_commands.CommandInvokeError) else error
        if isinstance(cause, CommandRefused | Refused):
            sentence = str(cause)
        else:
            logger.error("command %s failed", _command_name(interaction), exc_info=cause)
            sentence = "Something went wrong on the bot's side; nothing was changed."
        try:
            if interaction.response.is_done():
                await interaction.edit_original_response(content=sentence, attachments=[])
            else:
                await interaction.response.send_message(sentence, ephemeral=True)
        except discord.HTTPException:
            logger.warning("could not tell the member that %s failed", _command_name(interaction))

    async def sync_commands(self, *, guild_ids: Iterable[int], global_scope: bool) -> int:
        """Register the commands with Discord: as guild commands of each of ``guild_ids`` not
        synced yet by this worker (shown at once), or globally once. A guild Discord refuses
        (the bot is not in it) is logged and tried again at the next call. Returns how many
        scopes were synced now."""
        scopes: list[int | None] = [None] if global_scope else list(guild_ids)
        count = 0
        for guild_id in scopes:
            if guild_id in self.synced:
                continue
            guild = None if guild_id is None else discord.Object(guild_id)
            if guild is not None:
                self.copy_global_to(guild=guild)
            try:
                await self.sync(guild=guild)
            except discord.HTTPException as error:
                logger.warning("could not sync the slash commands of %s: %s", guild_id, error)
                continue
            self.synced.add(guild_id)
            count += 1
        return count


def _command_name(interaction: discord.Interaction) -> str:
    command = interaction.command
    return command.qualified_name if command is not None else "?"


def _tree(interaction: discord.Interaction) -> PersonaCommandTree:
    tree = interaction.client.tree  # type: ignore[attr-defined]
    assert isinstance(tree, PersonaCommandTree)
    return tree


# --- /privacy -----------------------------------------------------------------------------------


@app_commands.command(
    name="privacy", description="Choose what the personas may see and keep of you"
)
@app_commands.describe(level="minimal: everything; partial: seen but not remembered; full: never")
@app_commands.choices(
    level=[
        app_commands.Choice(name="minimal: seen and remembered", value="minimal"),
        app_commands.Choice(name="partial: seen, never remembered", value="partial"),
        app_commands.Choice(name="full: never seen, nothing stored", value="full"),
    ]
)
@app_commands.guild_only()
async def privacy_command(
    interaction: discord.Interaction, level: app_commands.Choice[str]
) -> None:
    guild_id, _, user_id = _where(interaction)
    work = sync_to_async(services.privacy_set)(
        guild_id=guild_id, user_id=user_id, level=level.value
    )
    await answer(interaction, _text(work, lambda change: change.sentence()))


async def _text(work: Awaitable, render: Callable[..., str]) -> Answer:
    return Answer(render(await work))


# --- /memory ------------------------------------------------------------------------------------


@app_commands.guild_only()
class MemoryGroup(
    app_commands.Group, name="memory", description="What the personas remember about you"
):
    @app_commands.command(name="show", description="List your personal memories, numbered")
    async def show(self, interaction: discord.Interaction) -> None:
        guild_id, _, user_id = _where(interaction)
        work = sync_to_async(services.member_memories)(
            guild_id=guild_id, user_id=user_id, now=_now()
        )
        await answer(interaction, _text(work, _memory_lines))

    @app_commands.command(
        name="add", description="Tell the personas something to remember about you"
    )
    @app_commands.describe(text="What the personas should remember about you")
    async def add(self, interaction: discord.Interaction, text: str) -> None:
        guild_id, _, user_id = _where(interaction)
        work = sync_to_async(services.member_memory_add)(
            guild_id=guild_id,
            user_id=user_id,
            text=text,
            name=interaction.user.display_name,
            now=_now(),
        )
        await answer(interaction, _text(work, lambda item: f"Remembered: {item.line()}"))

    @app_commands.command(name="forget", description="Forget one of your memories, or all of them")
    @app_commands.describe(id="The memory's number in /memory show, or 'all'")
    async def forget(self, interaction: discord.Interaction, id: str) -> None:
        guild_id, _, user_id = _where(interaction)
        work = sync_to_async(services.member_memory_forget)(
            guild_id=guild_id, user_id=user_id, which=id, now=_now()
        )
        await answer(interaction, _text(work, lambda n: f"Forgotten: {n} memory(ies)."))


def _memory_lines(items: list[services.MemoryItem]) -> str:
    return _lines((item.line() for item in items), "The personas remember nothing about you here.")


# --- /persona -----------------------------------------------------------------------------------


@app_commands.guild_only()
class PersonaGroup(app_commands.Group, name="persona", description="This server's personas"):
    @app_commands.command(
        name="list", description="The personas, their trigger words, one line each"
    )
    async def list_personas(self, interaction: discord.Interaction) -> None:
        guild_id, _, user_id = _where(interaction)
        work = sync_to_async(services.persona_list)(guild_id=guild_id, user_id=user_id, now=_now())
        await answer(interaction, _text(work, lambda rows: _lines((r.line() for r in rows), "")))


# --- /reset, /prompt ----------------------------------------------------------------------------


@app_commands.command(name="reset", description="The personas see only what is said after this")
@app_commands.default_permissions(manage_messages=True)
@app_commands.guild_only()
async def reset_command(interaction: discord.Interaction) -> None:
    guild_id, channel_id, user_id = _where(interaction)
    work = sync_to_async(services.channel_reset)(
        guild_id=guild_id,
        channel_id=channel_id,
        user_id=user_id,
        marker_id=interaction.id,
        permissions=interaction.permissions.value,
    )
    await answer(interaction, _text(work, lambda _: _RESET_DONE))


_RESET_DONE = "Reset: from now on the personas here see only what is said after this."


@app_commands.command(
    name="prompt", description="The exact request a persona's next turn here would send"
)
@app_commands.describe(persona="The persona's name (see /persona list)")
@app_commands.default_permissions(manage_guild=True)
@app_commands.guild_only()
async def prompt_command(interaction: discord.Interaction, persona: str) -> None:
    guild_id, channel_id, _ = _where(interaction)
    work = services.prompt_dry_run(
        runtime=_tree(interaction).turn_runtime(),
        guild_id=guild_id,
        channel_id=channel_id,
        persona_name=persona,
        permissions=interaction.permissions.value,
        now=_now(),
    )
    await answer(interaction, _prompt_file(work, persona))


async def _prompt_file(work: Awaitable[dict], persona: str) -> Answer:
    body = json.dumps(await work, ensure_ascii=False, indent=2).encode()
    name = f"prompt-{persona.strip().lower() or 'persona'}.json"
    text = f"The request {persona.strip()}'s next turn here would send (a dry run: nothing sent)."
    return Answer(text, (name, body))


# --- Why (not)? ---------------------------------------------------------------------------------


@app_commands.default_permissions(manage_messages=True)
@app_commands.guild_only()
async def why_command(interaction: discord.Interaction, message: discord.Message) -> None:
    target = await _history_message(interaction, message)
    work = sync_to_async(services.message_why)(
        message_id=message.id,
        permissions=interaction.permissions.value,
        bot_user_id=interaction.client.user.id if interaction.client.user else None,
        now=_now(),
        fetch=lambda channel_id, message_id: target if message_id == message.id else None,
    )
    await answer(interaction, _text(work, str))


async def _history_message(
    interaction: discord.Interaction, message: discord.Message
) -> HistoryMessage | None:
    """The command's target as the worker reads messages (for a message whose stored event
    is gone); None when it cannot be converted."""
    adapter = getattr(interaction.client, "adapter", None)
    if adapter is None:
        return None
    try:
        return await adapter.convert_live(message)
    except Exception:
        logger.warning("could not read message %s for its why-trace", message.id, exc_info=True)
        return None
