"""Suite-wide test hooks."""

from __future__ import annotations

import pytest
from hypothesis import settings

# `make test-fast` explores each property with fewer examples (`--hypothesis-profile=fast`);
# `make test` and CI keep Hypothesis's default of 100.
settings.register_profile("fast", max_examples=20)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the tests marked ``postgres_only`` when the suite runs on SQLite, naming the
    PostgreSQL feature each one needs (CI runs on PostgreSQL, where they run)."""
    from django.conf import settings

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
