"""The product's Celery app on a queue of one test run's own (``TEST_CELERY_QUEUE``), so two
test runs sharing a Redis server never take each other's tasks."""

from __future__ import annotations

import os

from botproject.celery import app

app.conf.task_default_queue = os.environ["TEST_CELERY_QUEUE"]

__all__ = ["app"]
