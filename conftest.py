"""Suite-wide test hooks."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

# Hypothesis's per-example deadline (200 ms) and its "input generation is slow" check are
# wall-clock assertions: on a loaded machine they fail tests whose properties hold. How fast the
# pipeline is, is measured by the benchmarks (`make bench`); here only correctness counts.
settings.register_profile("suite", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("suite")
# `make test-fast` explores each property with fewer examples (`--hypothesis-profile=fast`);
# `make test` and CI keep Hypothesis's default of 100.
settings.register_profile("fast", parent=settings.get_profile("suite"), max_examples=20)


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
