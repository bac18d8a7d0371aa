"""Suite-wide test hooks."""

from __future__ import annotations

from collections.abc import Iterator
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
