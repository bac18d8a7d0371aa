"""Browser-test harness: a live daphne serving the dashboard on the test database, and
Debian's Chromium driven by Playwright (never a downloaded browser build)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
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


CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    # This machine's network is closed: Chromium's own background connections would each be
    # refused (and retried) while the tests run.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)
DEVTOOLS = re.compile(r"DevTools listening on (ws://\S+)")


@pytest.fixture(scope="session")
def chromium_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One headless Debian Chromium (``/usr/bin/chromium``, installed by ``.ci/run``) for the
    whole test process, started on first use; yields its DevTools websocket URL. Each test
    connects to it and gets contexts of its own (`browser`), so no test sees another's
    cookies or pages, and Chromium starts once, not once per test."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    process = subprocess.Popen(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        endpoint = _devtools_endpoint(process)
        yield endpoint
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _devtools_endpoint(process: subprocess.Popen[str]) -> str:
    """The DevTools URL Chromium prints once it listens (it says so on stderr first thing)."""
    assert process.stderr is not None
    deadline = time.monotonic() + START_TIMEOUT
    seen = []
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line and process.poll() is not None:
            break
        seen.append(line)
        if found := DEVTOOLS.search(line):
            return found.group(1)
    raise AssertionError(f"Chromium did not start: {''.join(seen)[-2000:]}")


@pytest.fixture
async def browser(chromium_endpoint: str) -> AsyncIterator[Browser]:
    """The process's Chromium (`chromium_endpoint`), connected for this test over DevTools;
    the contexts and pages the test opens are closed when it ends."""
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.connect_over_cdp(chromium_endpoint)
        try:
            yield chromium
        finally:
            for context in chromium.contexts:
                await context.close()
            await chromium.close()


@pytest.fixture
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


# The end-to-end world (sandbox, fake model, the real bot worker), shared with chat's tests.
from chat.tests.e2e.conftest import no_raw_ids_reach_the_model, world  # noqa: E402, F401
