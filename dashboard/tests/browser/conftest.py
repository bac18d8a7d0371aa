"""Browser-test harness: a live daphne serving the dashboard on the test database, and
Debian's Chromium driven by Playwright (never a downloaded browser build)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connection, connections
from playwright.async_api import Browser, async_playwright, expect

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(settings.BASE_DIR) / "var" / "screenshots"
START_TIMEOUT = 30.0

# Assertions wait for the page (htmx round trips, the worker's reply) up to this long; the
# default 5 s is tight on a busy 2-core CI machine.
expect.set_options(timeout=15_000)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
async def live_dashboard(transactional_db) -> AsyncIterator[str]:
    """Start ``daphne botproject.asgi:application`` on a free port; yields its base URL.

    The process uses ``dashboard.tests.browser.live_settings``: this test's database (rows the
    test commits are visible to it and back) and channel-layer prefix (its ``config.changed``
    reaches a worker started by the test).
    """
    async with running_daphne({}) as base_url:
        yield base_url


@pytest.fixture
async def live_site(transactional_db, world) -> AsyncIterator[str]:  # noqa: F811
    """`live_dashboard` pointed at the world's sandbox (``DISCORD_*``: the preview reads it,
    the playground posts to it) and fake model (``LLM_BASE_URL``: the replay asks it)."""
    env = {
        "DISCORD_TOKEN": world.sandbox.token,
        "DISCORD_API_BASE": world.sandbox.api_base,
        "DISCORD_GATEWAY_URL": world.sandbox.gateway_url,
        "LLM_BASE_URL": world.llm.base_url,
    }
    async with running_daphne(env) as base_url:
        yield base_url


@contextlib.asynccontextmanager
async def running_daphne(extra_env: dict[str, str]) -> AsyncIterator[str]:
    """A daphne process on a free port with the test's database and channel-layer prefix (and
    ``extra_env``); yields its base URL, stops it on exit."""
    port = _free_port()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "dashboard.tests.browser.live_settings",
        "LIVE_TEST_DATABASE_NAME": str(connection.settings_dict["NAME"]),
        "LIVE_TEST_CHANNEL_PREFIX": settings.CHANNEL_LAYERS["default"]["CONFIG"]["prefix"],
        **extra_env,
    }
    var = Path(settings.BASE_DIR) / "var"
    var.mkdir(exist_ok=True)
    log = (var / "daphne-browser-test.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "daphne",
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        "botproject.asgi:application",
        cwd=settings.BASE_DIR,
        env=env,
        stdout=log,
        stderr=asyncio.subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        await _wait_until_serving(base_url, process)
        yield base_url
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()
        log.close()
        # The test's own database work ran on sync_to_async's thread: close that connection
        # there, so the test database can be dropped.
        await sync_to_async(connections.close_all)()


async def _wait_until_serving(base_url: str, process: asyncio.subprocess.Process) -> None:
    deadline = asyncio.get_running_loop().time() + START_TIMEOUT
    async with httpx.AsyncClient() as client:
        while True:
            if process.returncode is not None:
                raise AssertionError(
                    f"daphne exited with {process.returncode}; see var/daphne-browser-test.log"
                )
            try:
                if (await client.get(f"{base_url}/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"daphne did not serve {base_url} within {START_TIMEOUT} s")
            await asyncio.sleep(0.1)


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Headless Debian Chromium (``/usr/bin/chromium``, installed by ``.ci/run``)."""
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox"]
        )
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


# The end-to-end world (sandbox, fake model, the real bot worker), shared with chat's tests.
from chat.tests.e2e.conftest import no_raw_ids_reach_the_model, world  # noqa: E402, F401
