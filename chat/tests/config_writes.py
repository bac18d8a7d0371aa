"""Configuration changes in tests, written as the product writes them: row by row, so each
save moves the configuration's version stamp (`personas.config_version`) and a running worker
reads the change at its next pass. A queryset ``update`` would bypass the stamp."""

from __future__ import annotations

from typing import Any

from django.db import models


def rows_update(rows: models.QuerySet, **fields: Any) -> None:
    """Set ``fields`` on each of ``rows`` and save it."""
    for row in rows:
        for name, value in fields.items():
            setattr(row, name, value)
        row.save()
