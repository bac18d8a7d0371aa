"""Settings for the daphne process the browser tests start.

The test settings, pointed at the running test's database and channel-layer prefix (both
passed in the environment by the test that starts daphne), so the pages, the test and the bot
worker share data and live updates.
"""

from __future__ import annotations

import os

from botproject.settings_test import *  # noqa: F403

DATABASES["default"]["NAME"] = os.environ["LIVE_TEST_DATABASE_NAME"]  # noqa: F405
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = os.environ["LIVE_TEST_CHANNEL_PREFIX"]  # noqa: F405

# A test that runs a real Celery worker has this process queue its tasks where that worker
# takes them (its broker database and its own queue).
if os.environ.get("LIVE_TEST_CELERY_QUEUE"):
    CELERY_BROKER_URL = os.environ["LIVE_TEST_CELERY_BROKER"]
    CELERY_TASK_DEFAULT_QUEUE = os.environ["LIVE_TEST_CELERY_QUEUE"]
