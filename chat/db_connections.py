"""The database connections of a worker's long-lived threads.

A web request's start renews Django's connections (``close_old_connections``); a worker's
threads (the intake, the queue consumer, the spend counters) have no requests, so they renew
theirs themselves before their database work: a connection an outage broke is closed, so the
next statement opens a new one, and one past ``CONN_MAX_AGE`` is replaced. With
``CONN_HEALTH_CHECKS`` (the settings' default), each such renewal makes the next statement
send a ``SELECT 1`` first; done before every statement, that doubles the trips of the hot
path, so it is done at once after a statement failed and otherwise at most once a second.
"""

from __future__ import annotations

import threading
import time

from django.db import close_old_connections, connections

RENEW_EVERY_S = 1.0
"""How often a thread whose statements all succeeded renews its connections."""

_renewed = threading.local()


def connections_renewed(*, every_s: float = RENEW_EVERY_S) -> None:
    """Renew this thread's connections (module docstring) when a statement on them failed
    since the last renewal, or ``every_s`` seconds have passed since it."""
    now = time.monotonic()
    failed = any(conn.errors_occurred for conn in connections.all(initialized_only=True))
    if failed or now - getattr(_renewed, "at", -float("inf")) >= every_s:
        close_old_connections()
        _renewed.at = now
