"""A real Celery worker with beat, started as a subprocess for the ``celery`` test tier."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

from django.conf import settings
from django.db import connection

from chat.llm.fake_server import FakeLLMServer
from chat.sandbox import SandboxServer

ROOT = Path(__file__).resolve().parents[2]
BROKER_DB = 5
"""A Redis database apart from the channel layer's; each worker also has a queue of its own
(``chat/tests/celery_app.py``), so test runs sharing the database never take each other's tasks."""
WORKER_TIMEOUT = 60.0


def database_url() -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def broker_url() -> str:
    base = settings.REDIS_URL.rsplit("/", 1)[0] if settings.REDIS_URL.count("/") > 2 else None
    return f"{base or settings.REDIS_URL.rstrip('/')}/{BROKER_DB}"


def start_celery(
    sandbox: SandboxServer,
    llm: FakeLLMServer,
    schedule: Path,
    *,
    log: Path | None = None,
    pool: str = "solo",
    beat: bool = True,
    **settings_env: str,
) -> subprocess.Popen:
    """A Celery worker with beat (without beat when ``beat`` is off; ``--pool solo``, or
    ``pool``) on the test's database, a broker database of its own, the sandbox's REST API and
    the fake model server; ``settings_env`` sets more environment
    (``MEMORY_EXTRACTION_SECONDS="0.5"``, a ``TEST_CELERY_QUEUE`` a web process also queues on);
    its log goes to ``log`` when given. Stop it with `stop`."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "botproject.settings",
        "DJANGO_SECRET_KEY": "test-only-secret-key",
        "DATABASE_URL": database_url(),
        "REDIS_URL": broker_url(),
        "TEST_CELERY_QUEUE": f"test-{os.getpid()}-{uuid.uuid4().hex[:8]}",
        "DISCORD_TOKEN": sandbox.token,
        "DISCORD_API_BASE": sandbox.api_base,
        "LLM_BASE_URL": llm.base_url,
        **settings_env,
    }
    command = [
        *(sys.executable, "-m", "celery", "-A", "chat.tests.celery_app", "worker"),
        *(("--beat", "--schedule", str(schedule)) if beat else ()),
        *("--pool", pool, "--without-gossip", "--without-mingle", "--without-heartbeat"),
        *("--loglevel", "INFO"),
    ]
    return subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w") if log is not None else subprocess.DEVNULL,
    )


def stop(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)
