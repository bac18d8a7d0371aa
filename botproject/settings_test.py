"""Settings for the test suite: the real settings, with a throwaway secret key by default.

Everything else (DATABASE_URL, REDIS_URL, …) comes from the environment exactly as in
production, so CI runs the suite against PostgreSQL and the real Redis.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key")

from botproject.settings import *  # noqa: F403
