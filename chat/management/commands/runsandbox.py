"""`manage.py runsandbox`: serve the local Discord-compatible sandbox with the demo world."""

from __future__ import annotations

import asyncio
import contextlib
import signal

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.llm.fake_server import FakeLLMServer, StreamPace
from chat.sandbox import SandboxServer
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_GUILD_ID, DEMO_USER_IDS, demo_sandbox

DEFAULT_TOKEN = "sandbox-bot-token"
DEMO_MODEL_INTRODUCTION = (
    "(This is the demo model: no LLM_BASE_URL is configured, so I only repeat what I was asked.)"
    "\n\nI write at a human pace, so you can watch a reply arrive paragraph by paragraph."
    "\n\n"
)
DEMO_MODEL_PACE = StreamPace(first_token_s=0.8, words_per_s=10)
"""The demo model writes like a real one: the first word after 0.8 s, then ten a second."""


class Command(BaseCommand):
    help = (
        "Serve a local Discord-compatible REST + gateway server holding the demo world, and "
        "print the environment that points the bot at it. Ctrl-C or SIGTERM stops it."
    )
    # The sandbox alone: neither the database nor the web project's URLs, templates or admin
    # are used, so Django's system checks (over half a second) are skipped.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
        parser.add_argument("--port", type=int, default=8765, help="port (8765; 0 picks one)")
        parser.add_argument(
            "--token", default=DEFAULT_TOKEN, help=f"bot token to accept ({DEFAULT_TOKEN})"
        )
        parser.add_argument(
            "--demo-model-port",
            type=int,
            default=None,
            metavar="PORT",
            help="also serve the demo model (OpenAI-compatible) on this port, for running "
            "without LLM_BASE_URL; its replies say they come from the demo model",
        )

    def handle(
        self,
        *args: object,
        host: str,
        port: int,
        token: str,
        demo_model_port: int | None,
        **options: object,
    ) -> None:
        asyncio.run(self._serve(host, port, token, demo_model_port))

    async def _serve(self, host: str, port: int, token: str, demo_model_port: int | None) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        async with contextlib.AsyncExitStack() as stack:
            sandbox = demo_sandbox(token=token)
            # A proxied member to try by hand: alice's "l: …" is reposted as Lilya.
            sandbox.add_proxy_member(
                DEMO_USER_IDS["alice"], member_id="lilya", name="Lilya", prefix="l:"
            )
            try:
                server = await stack.enter_async_context(
                    SandboxServer(sandbox, host=host, port=port)
                )
            except OSError as error:
                raise CommandError(f"cannot serve the sandbox on {host}:{port}: {error}") from error
            self._announce(server)
            if demo_model_port is not None:
                model = await stack.enter_async_context(
                    FakeLLMServer(
                        host=host,
                        port=demo_model_port,
                        models=("demo-model",),
                        introduction=DEMO_MODEL_INTRODUCTION,
                        pace=DEMO_MODEL_PACE,
                    )
                )
                self.stdout.write(f"Demo model: export LLM_BASE_URL={model.base_url}")
                self.stdout.flush()
            await stop.wait()
        self.stdout.write("Sandbox stopped.")

    def _announce(self, server: SandboxServer) -> None:
        channels = ", ".join(f"#{name} {cid}" for name, cid in DEMO_CHANNEL_IDS.items())
        users = ", ".join(f"{name} {uid}" for name, uid in DEMO_USER_IDS.items())
        self.stdout.write(
            f"Discord sandbox on {server.base_url} (demo guild {DEMO_GUILD_ID})\n"
            f"  channels: {channels}\n"
            f"  users:    {users}\n"
            "Point the bot at it:\n"
            f"  export DISCORD_API_BASE={server.api_base}\n"
            f"  export DISCORD_GATEWAY_URL={server.gateway_url}\n"
            f"  export DISCORD_TOKEN={server.token}\n"
            f"  export PLURALKIT_API_BASE={server.pluralkit_api_base}\n"
            f"  export MODERATION_BASE_URL={server.moderation_base_url}\n"
            "Log in to the dashboard with Discord (as alice, bob or carol):\n"
            f"  export DISCORD_OAUTH_AUTHORIZE_URL={server.oauth_authorize_url}\n"
            f"  export DISCORD_CLIENT_ID={server.sandbox.oauth.client_id}\n"
            f"  export DISCORD_CLIENT_SECRET={server.sandbox.oauth.client_secret}\n"
            "Speak as a demo user:\n"
            f"  python manage.py sandboxsay --url {server.base_url} --channel general "
            '--as alice "hello"\n'
            "  (alice's messages starting with l: are proxied as her member Lilya;\n"
            "   moderation flags any text holding flag:<category>, e.g. flag:violence;\n"
            "   #after-dark is marked NSFW)\n"
            "Ctrl-C stops the sandbox."
        )
        self.stdout.flush()
