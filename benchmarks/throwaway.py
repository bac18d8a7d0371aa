"""Django on a throwaway database for a benchmark, and its removal.

A server database that ``DATABASE_URL`` names (PostgreSQL) gets a test database of its own,
named after the benchmark and the process; otherwise the benchmark migrates a SQLite file in
the directory it is given (its writers wait for the one file lock: see the SQLite settings in
`botproject.settings`).
"""

from __future__ import annotations

import logging
import os


def setup_django(directory: str, *, prefix: str, in_memory_layer: bool = True) -> str:
    """Set Django up on a throwaway database, migrated, and return its name for
    `teardown_django`. ``in_memory_layer``: Channels' in-memory layer instead of the
    configured one (Redis). The worker's per-request log lines are silenced below warnings:
    they would bury the table."""
    if not os.environ.get("DATABASE_URL", "").startswith(("postgres", "pgsql")):
        os.environ["DATABASE_URL"] = f"sqlite:///{directory}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SECRET_KEY", "benchmark-only-secret-key")
    os.environ["DJANGO_SETTINGS_MODULE"] = "botproject.settings"
    import django
    from django.conf import settings
    from django.db import connection

    django.setup()
    if in_memory_layer:
        settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    logging.disable(logging.WARNING)
    if connection.vendor == "sqlite":
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        return connection.settings_dict["NAME"]
    connection.settings_dict["TEST"]["NAME"] = f"{prefix}_{os.getpid()}"
    return connection.creation.create_test_db(verbosity=0, autoclobber=True)


def teardown_django(name: str) -> None:
    """Close every connection and drop the database `setup_django` made (a SQLite file goes
    with its directory)."""
    from django.db import connection, connections

    connections.close_all()
    if connection.vendor != "sqlite":
        connection.creation.destroy_test_db(name, verbosity=0)
