"""`manage.py sandboxsay`: speak in the running sandbox as a demo user, and show the replies;
or run one of the bot's slash commands (``--command``) and show its answer."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.sandbox.control import ControlClient, ControlError, find_channel_id, find_user_id

POLL_INTERVAL = 0.25


class Command(BaseCommand):
    help = (
        "Post a message in the running sandbox as one of its users (through its control API) "
        "and print the new message's id; with --wait, also print the replies that arrive in "
        "that channel within that many seconds. With --command, run that slash command as the "
        "user instead (e.g. --command 'memory add' --option text='I like tea') and print the "
        "bot's answer."
    )
    # A client of the sandbox alone: neither the database nor the web project's URLs,
    # templates or admin are used, so Django's system checks (over half a second) are skipped.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("text", nargs="*", help="what to say")
        parser.add_argument("--url", default="http://127.0.0.1:8765", help="the sandbox's URL")
        parser.add_argument("--channel", default="general", help="channel name or id (general)")
        parser.add_argument("--as", dest="author", default="alice", help="user name or id (alice)")
        parser.add_argument("--reply-to", type=int, default=None, help="message id to reply to")
        parser.add_argument(
            "--wait", type=float, default=0.0, help="seconds to wait for replies (0: don't)"
        )
        parser.add_argument(
            "--command",
            default=None,
            help="run this slash command instead of saying something ('persona list', "
            "'memory forget', 'Why (not)?' with --target …)",
        )
        parser.add_argument(
            "--option",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help="an option of --command (repeatable), e.g. level=full",
        )
        parser.add_argument(
            "--target", type=int, default=None, help="the message a message command is used on"
        )

    def handle(
        self,
        *args: object,
        text: list[str],
        url: str,
        channel: str,
        author: str,
        reply_to: int | None,
        wait: float,
        command: str | None,
        option: list[str],
        target: int | None,
        **options: object,
    ) -> None:
        if command is None and not text:
            raise CommandError("say something, or give --command")
        try:
            if command is not None:
                values = _command_options(option)
                asyncio.run(self._run(url, channel, author, command, values, target))
            else:
                asyncio.run(self._say(url, channel, author, " ".join(text), reply_to, wait))
        except aiohttp.ClientConnectionError as error:
            raise CommandError(f"no sandbox answers at {url} ({error})") from error
        except (ControlError, LookupError) as error:
            raise CommandError(str(error)) from error

    async def _say(
        self, url: str, channel: str, author: str, text: str, reply_to: int | None, wait: float
    ) -> None:
        async with ControlClient(url) as control:
            world = await control.world()
            channel_id = find_channel_id(world, channel)
            author_id = find_user_id(world, author)
            message = await control.say(channel_id, author_id, text, reply_to=reply_to)
            self.stdout.write(message["id"])
            self.stdout.flush()
            if wait > 0:
                await self._print_replies(control, channel_id, int(message["id"]), wait)

    async def _run(
        self,
        url: str,
        channel: str,
        author: str,
        command: str,
        values: dict[str, str],
        target: int | None,
    ) -> None:
        async with ControlClient(url) as control:
            world = await control.world()
            record = await control.run_command(
                find_channel_id(world, channel),
                find_user_id(world, author),
                command.strip().removeprefix("/"),
                values,
                target_message_id=target,
            )
        if not record["answered"]:
            raise CommandError(f"/{command}: the bot did not answer within 5 seconds")
        self.stdout.write(record["content"])
        for answer in record["answers"]:
            for file in answer["files"]:
                self.stdout.write(f"[file {file['filename']}, {file['size']} bytes]")

    async def _print_replies(
        self, control: ControlClient, channel_id: int, after: int, wait: float
    ) -> None:
        """Print each message posted after `after` until `wait` seconds have passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while (remaining := deadline - loop.time()) > 0:
            await asyncio.sleep(min(POLL_INTERVAL, remaining))
            for reply in await control.messages(channel_id, after=after):
                self.stdout.write(_reply_line(reply))
                after = int(reply["id"])
            self.stdout.flush()


def _command_options(pairs: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` pairs as a dict; CommandError naming a pair without ``=``."""
    values = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise CommandError(f"--option {pair!r}: write it as NAME=VALUE")
        values[name.strip()] = value
    return values


def _reply_line(message: dict[str, Any]) -> str:
    author = message["author"]
    name = author.get("global_name") or author["username"]
    return f"{message['id']} {name}: {message['content']}"
