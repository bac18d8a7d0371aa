"""The Celery worker's metrics: its tasks counted and timed, served on ``CELERY_METRICS_PORT``.

With ``CELERY_METRICS_PORT`` set, ``celery -A botproject worker`` serves ``/metrics`` (bound to
``CELERY_METRICS_HOST``) from its main process, with ``prometheus_client``'s own HTTP server:

- ``personabot_celery_tasks_total{task,outcome}``: tasks that ran, by name and outcome
  (``succeeded``, ``failed``, ``retried``);
- ``personabot_celery_task_seconds{task}``: how long each ran;
- ``personabot_celery_beat_lag_seconds{task}``: for a task beat scheduled, from beat sending it
  to a worker starting it (a beat that stopped shows as scheduled tasks that no longer run);
- and every series of `chat.metrics` the tasks count (their model calls, their turns).

Tasks run in the pool's child processes, so the worker uses ``prometheus_client``'s
multiprocess mode: each process writes its series to files in a directory of the worker's own
(made at start, removed when it exits) and the main process's server adds them up. The mode is
chosen when ``prometheus_client`` is first imported, so the directory is set when the worker
is about to import the task modules (``import_modules``); nothing here imports the library at
module level, and ``botproject.celery`` imports this module before it makes the app.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
import time
from typing import Any

from celery import signals
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

logger = logging.getLogger(__name__)

MULTIPROCESS_DIRECTORY = "PROMETHEUS_MULTIPROC_DIR"
BEAT_SENT_AT = "personabot_beat_sent_at"
"""The header beat adds to each task it sends: when it sent it (Unix time)."""

_state: dict[str, Any] = {"directory": None, "in_beat": False, "started": {}}


@signals.import_modules.connect
def _metrics_directory(**_: Any) -> None:
    """When a Celery worker (or beat) is about to import the task modules (this receiver is
    connected before the app's Django fixup, whose model checks import the URLs and the
    metrics with them): choose the multiprocess mode, with a fresh directory, when the worker
    serves metrics."""
    if settings.CELERY_METRICS_PORT is None or _state["directory"] is not None:
        return
    if "prometheus_client" in sys.modules and MULTIPROCESS_DIRECTORY not in os.environ:
        raise ImproperlyConfigured(
            "CELERY_METRICS_PORT: prometheus_client was imported before the worker started, "
            "so its tasks' metrics could not be shared between processes"
        )
    directory = tempfile.mkdtemp(prefix="personabot-celery-metrics-")
    os.environ[MULTIPROCESS_DIRECTORY] = directory
    _state["directory"] = directory
    # Removed when this process exits (the pool's and beat's processes end with os._exit).
    atexit.register(shutil.rmtree, directory, ignore_errors=True)


@signals.worker_ready.connect
def _metrics_serve(**_: Any) -> None:
    """Serve the series of every process of this worker on ``CELERY_METRICS_PORT``."""
    if _state["directory"] is None:
        return
    from prometheus_client import CollectorRegistry, start_http_server
    from prometheus_client.multiprocess import MultiProcessCollector

    import chat.metrics  # noqa: F401  (the product's series, exported at zero from the start)

    registry = CollectorRegistry()
    MultiProcessCollector(registry)
    try:
        server, _thread = start_http_server(
            settings.CELERY_METRICS_PORT, addr=settings.CELERY_METRICS_HOST, registry=registry
        )
    except OSError as error:
        raise ImproperlyConfigured(
            f"CELERY_METRICS_PORT: cannot listen on "
            f"{settings.CELERY_METRICS_HOST}:{settings.CELERY_METRICS_PORT}: {error}"
        ) from None
    logger.info(
        "Celery metrics on http://%s:%s/metrics",
        settings.CELERY_METRICS_HOST,
        server.server_address[1],
    )


@signals.worker_process_shutdown.connect
def _metrics_process_gone(pid: int | None = None, **_: Any) -> None:
    if _state["directory"] is not None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())


@signals.beat_init.connect
@signals.beat_embedded_init.connect
def _in_beat(**_: Any) -> None:
    _state["in_beat"] = True


@signals.before_task_publish.connect
def _stamp_beat_send(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """Beat's sends carry the moment they were sent (`BEAT_SENT_AT`)."""
    if _state["in_beat"] and headers is not None:
        headers[BEAT_SENT_AT] = time.time()


@signals.task_prerun.connect
def _task_started(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    from chat import metrics

    _state["started"][task_id] = time.perf_counter()
    sent_at = _header(task, BEAT_SENT_AT)
    if sent_at is not None:
        metrics.CELERY_BEAT_LAG_SECONDS.labels(task=task.name).observe(
            max(time.time() - float(sent_at), 0.0)
        )


@signals.task_postrun.connect
def _task_ended(
    task_id: str | None = None, task: Any = None, state: str | None = None, **_: Any
) -> None:
    from chat import metrics

    started = _state["started"].pop(task_id, None)
    outcome = {"SUCCESS": "succeeded", "RETRY": "retried"}.get(state or "", "failed")
    metrics.CELERY_TASKS.labels(task=task.name, outcome=outcome).inc()
    if started is not None:
        metrics.CELERY_TASK_SECONDS.labels(task=task.name).observe(time.perf_counter() - started)


def _header(task: Any, name: str) -> Any:
    """A message header of the task being run (protocol 2 puts custom headers on the request,
    or under its ``headers``)."""
    request = task.request
    value = getattr(request, name, None)
    if value is None and isinstance(getattr(request, "headers", None), dict):
        value = request.headers.get(name)
    return value
