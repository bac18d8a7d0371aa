"""The Celery application: ``celery -A botproject worker --beat``.

Configuration comes from Django settings (``CELERY_*``); the broker is ``REDIS_URL``.
"""

from __future__ import annotations

import os

from celery import Celery

from botproject import celery_metrics  # noqa: F401  (its signal handlers count the tasks)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "botproject.settings")

app = Celery("botproject")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
