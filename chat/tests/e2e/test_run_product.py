"""``make run``'s script, stopped with Ctrl-C as a terminal sends it: to the script's process
group. The worker stops first, while the sandbox still answers; the sandbox and the demo model
last; nothing ends in a traceback, and nothing it started is left running."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.request

import pytest
from asgiref.sync import sync_to_async

from chat.tests.celery_worker import broker_url
from chat.tests.e2e.conftest import eventually
from chat.tests.e2e.test_restart import ROOT, _database_url, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

STARTED_WITHIN = 120.0


def _connected_sessions(sandbox_port: int) -> int:
    url = f"http://127.0.0.1:{sandbox_port}/_sandbox/gateway/sessions"
    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return sum(1 for session in json.load(answer) if session["connected"])
    except OSError:
        return 0


def _start(log_path, ports: dict[str, int]) -> subprocess.Popen:
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in ("DISCORD_TOKEN", "LLM_BASE_URL", "LLM_MODEL", "DJANGO_SETTINGS_MODULE")
    }
    environment.update(
        DJANGO_DEBUG="1",
        DATABASE_URL=_database_url(),
        REDIS_URL=broker_url(),
        HOST="127.0.0.1",
        PORT=str(ports["web"]),
        SANDBOX_PORT=str(ports["sandbox"]),
        DEMO_MODEL_PORT=str(ports["model"]),
    )
    return subprocess.Popen(
        ["scripts/run-product"],
        cwd=ROOT,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )


def _still_writing(log_path) -> dict[int, str]:
    """The processes whose output still goes to ``log_path`` (everything the script started
    writes there): pid → command line."""
    found = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{entry.name}/fd/1") == str(log_path):
                with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                    found[int(entry.name)] = cmdline.read().replace(b"\0", b" ").decode()
        except OSError:  # ended meanwhile, or not ours to read
            continue
    return found


async def test_ctrl_c_stops_the_worker_before_the_sandbox_without_tracebacks(tmp_path):
    ports = {"web": free_port(), "sandbox": free_port(), "model": free_port()}
    log_path = tmp_path / "run-product.log"
    product = _start(log_path, ports)
    try:
        await eventually(lambda: _connected_sessions(ports["sandbox"]), within=STARTED_WITHIN)

        os.killpg(product.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        status = await sync_to_async(product.wait)(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(product.pid, signal.SIGKILL)

    # Nothing it started is left behind (Celery's beat, begun as the stop came, was).
    try:
        await eventually(lambda: not _still_writing(log_path), within=20)
    except AssertionError:
        left = _still_writing(log_path)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        raise AssertionError(f"still running after the stop: {left}") from None
    log = log_path.read_text()
    assert status in (0, 130), log[-3000:]  # 130: the shell's status after a Ctrl-C
    assert "run-product: stopping 4 processes" in log
    assert log.index("worker stopped") < log.index("Sandbox stopped."), log[-3000:]
    assert "Traceback" not in log, log[log.index("Traceback") - 500 :][:3000]
    assert "disconnected" not in log[log.index("run-product: stopping") :]
