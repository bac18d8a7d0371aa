"""Suite-wide test hooks."""

from __future__ import annotations

import fcntl
import gc
import hashlib
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from django.test import TransactionTestCase
from hypothesis import HealthCheck, settings

# Hypothesis's per-example deadline (200 ms) and its "input generation is slow" check are
# wall-clock assertions: on a loaded machine they fail tests whose properties hold. How fast the
# pipeline is, is measured by the benchmarks (`make bench`); here only correctness counts.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")
# `make test-fast` explores each property with fewer examples (`--hypothesis-profile=fast`);
# `make test` and CI keep Hypothesis's default of 100.
settings.register_profile("fast", parent=settings.get_profile("suite"), max_examples=20)


KEPT_BY_RESET = frozenset({"django_content_type", "auth_permission"})
"""What `post_migrate` wrote once after the test database was migrated: kept as it is."""


def _reset_database(self: TransactionTestCase) -> None:
    """After a test that commits (``transaction=True``): every row it left is deleted, one
    ``DELETE`` per table in one transaction, and what ``post_migrate`` writes that tests read is
    written again (the configuration stamps). It leaves the database as Django's own ``flush``
    does, but without ``TRUNCATE`` (on PostgreSQL it swaps every table's files: 0.3–1 s a test)
    or re-creating content types and permissions (they never change within a run). A test
    case that lists ``available_apps`` or rolls back serialized data is flushed as usual."""
    from django.db import connections, transaction

    from personas.config_version import config_versions_bump_all

    if self.available_apps is not None or self.serialized_rollback:
        _django_fixture_teardown(self)
        return
    for alias in self._databases_names(include_mirrors=False):
        connection = connections[alias]
        tables = connection.introspection.django_table_names(
            only_existing=True, include_views=False
        )
        with transaction.atomic(using=alias), connection.cursor() as cursor:
            for table in sorted(set(tables) - KEPT_BY_RESET):
                cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")
    config_versions_bump_all()


_django_fixture_teardown = TransactionTestCase._fixture_teardown
TransactionTestCase._fixture_teardown = _reset_database  # type: ignore[method-assign]


class MigratedTemplate:
    """An SQLite test database migrated once and copied for every test process.

    Each pytest-xdist process (and the serial run after them) would otherwise migrate its own
    test database: 1.5 s of CPU each. The first process to need the template builds it the usual
    way and saves a copy, under a file lock the others wait on; the others, and every later run
    with the same migrations, start from a copy. The template's name carries a digest of every
    installed app's migration files, so a changed or added migration builds a new one.
    """

    def __init__(self, database: Path) -> None:
        self.database = database
        self.path = database.with_name(f"test-db-template-{self._migrations_digest()}.sqlite3")
        self._lock = open(database.with_name("test-db-template.lock"), "w")  # noqa: SIM115
        self.building = False
        self.copied = False

    @staticmethod
    def _migrations_digest() -> str:
        import django
        from django.apps import apps

        digest = hashlib.sha256(django.__version__.encode())
        for app_config in sorted(apps.get_app_configs(), key=lambda config: config.label):
            for source in sorted((Path(app_config.path) / "migrations").glob("*.py")):
                digest.update(f"{app_config.label}/{source.name}".encode())
                digest.update(source.read_bytes())
        return digest.hexdigest()[:16]

    def copy_into_place(self) -> bool:
        """Copy the template to this process's test database; True if it did. When there is no
        template yet, this process builds it: False, and the lock is held until `save`."""
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        if not self.path.exists():
            self.building = True
            return False
        _sqlite_copy(self.path, self.database)
        fcntl.flock(self._lock, fcntl.LOCK_UN)
        self.copied = True
        return True

    def save(self) -> None:
        """After this process migrated its test database: keep it as the template."""
        if not self.building:
            return
        for stale in self.path.parent.glob("test-db-template-*.sqlite3"):
            stale.unlink()
        building = self.path.with_suffix(".building")
        _sqlite_copy(self.database, building)
        building.replace(self.path)  # whole or not at all, should the run be stopped meanwhile
        self.building = False
        fcntl.flock(self._lock, fcntl.LOCK_UN)


def _sqlite_copy(source: Path, target: Path) -> None:
    """A consistent copy through SQLite's backup API: a file copy would miss what is still in
    the source's write-ahead log."""
    for leftover in (target, Path(f"{target}-wal"), Path(f"{target}-shm")):
        leftover.unlink(missing_ok=True)
    with closing(sqlite3.connect(source)) as reading, closing(sqlite3.connect(target)) as writing:
        reading.backup(writing)


@pytest.fixture(scope="session")
def _migrated_template(
    request: pytest.FixtureRequest, django_db_modify_db_settings: None
) -> MigratedTemplate | None:
    """The template for this run's SQLite test database; None on PostgreSQL, and when
    ``--reuse-db`` or ``--create-db`` asks for pytest-django's own handling."""
    from django.conf import settings

    database = settings.DATABASES["default"]
    if database["ENGINE"] != "django.db.backends.sqlite3":
        return None
    if request.config.getvalue("reuse_db") or request.config.getvalue("create_db"):
        return None
    return MigratedTemplate(Path(database["TEST"]["NAME"]))


@pytest.fixture(scope="session")
def django_db_keepdb(
    request: pytest.FixtureRequest, _migrated_template: MigratedTemplate | None
) -> bool:
    """A test database copied from the template is kept as it is (not created and migrated
    again); otherwise pytest-django's own rule (``--reuse-db``)."""
    if _migrated_template is not None:
        return _migrated_template.copy_into_place()
    return bool(request.config.getvalue("reuse_db") and not request.config.getvalue("create_db"))


@pytest.fixture(scope="session")
def django_db_setup(
    django_db_setup: None, _migrated_template: MigratedTemplate | None
) -> Iterator[None]:
    """pytest-django's set-up, then the template saved if this process built it; at the end,
    a copied test database is removed (pytest-django removes only the ones it created)."""
    if _migrated_template is None:
        yield
        return
    _migrated_template.save()
    yield
    if not _migrated_template.copied:
        return
    database = _migrated_template.database
    for leftover in (database, Path(f"{database}-wal"), Path(f"{database}-shm")):
        leftover.unlink(missing_ok=True)


END_TO_END_FIXTURES = {"world", "dashboard_on_world"}
"""Fixtures that run the real worker on the sandbox (chat/tests/e2e/conftest.py)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Two rules the markers alone cannot keep:

    - a test that uses the end-to-end world is in the ``e2e`` tier even where its module
      forgot to say so, so `make test-fast` never starts a worker;
    - on SQLite, the tests marked ``postgres_only`` are skipped with the PostgreSQL feature each
      one needs as the reason (CI runs on PostgreSQL, where they run).
    """
    from django.conf import settings

    for item in items:
        if END_TO_END_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.sqlite3":
        return
    for item in items:
        marker = item.get_closest_marker("postgres_only")
        if marker is None:
            continue
        reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
        if not reason:
            raise pytest.UsageError(f"{item.nodeid}: postgres_only needs a reason")
        item.add_marker(pytest.mark.skip(reason=f"needs PostgreSQL: {reason}"))


@pytest.fixture(autouse=True)
def _configuration_writes_move_their_stamp() -> Iterator[None]:
    """Every write of a row a channel configuration reads must move its guild's version stamp
    (`personas.config_version`), or a worker keeps answering with the old configuration. This
    watches the test's own connection: a write to one of those tables that no write of the
    stamps follows before the test ends (a queryset ``update``, a ``bulk_*`` write or raw SQL
    without `config_version_bump`) fails the test, naming the statement."""
    from django.db import connection

    from personas.config_version import CONFIGURATION_MODELS
    from personas.models import ConfigVersion

    watched = {model._meta.db_table for model in CONFIGURATION_MODELS}
    stamps = ConfigVersion._meta.db_table
    unstamped: list[str] = []

    def watch(execute: Any, sql: str, params: Any, many: bool, context: dict) -> Any:
        result = execute(sql, params, many, context)
        words = sql.replace('"', " ").replace("`", " ").split()
        verb = words[0].upper() if words else ""
        target = {"INSERT": 2, "UPDATE": 1, "DELETE": 2}.get(verb)
        if target is not None and len(words) > target:
            table = words[target]
            if table == stamps:
                unstamped.clear()
            elif table in watched and context["cursor"].rowcount != 0:
                unstamped.append(sql)
        return result

    with connection.execute_wrapper(watch):
        yield
    assert not unstamped, f"configuration written without moving its stamp: {unstamped}"


def pytest_collection_finish(session: pytest.Session) -> None:
    """Everything alive once the tests are collected (the project, its modules, every test
    item) lives as long as the run: moved out of the garbage collector's reach
    (`gc.freeze`), so the full collections during the tests scan only what they made."""
    gc.collect()
    gc.freeze()
