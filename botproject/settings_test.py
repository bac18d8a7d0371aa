"""Settings for the test suite: the real settings, with a throwaway secret key by default.

Everything else (DATABASE_URL, REDIS_URL, …) comes from the environment exactly as in
production, so CI runs the suite against PostgreSQL and the real Redis.
"""

from __future__ import annotations

import os

os.environ.setdefault("DJANGO_SECRET_KEY", "test-only-secret-key")

from botproject.settings import *  # noqa: F403

# `make` creates var/ (for the SQLite test database below, and STATIC_ROOT, which WhiteNoise
# warns about when missing); made here too, so `pytest` alone runs from a fresh clone.
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # noqa: F405

# A file-backed SQLite test database (when SQLite is used at all), so a worker started as a
# subprocess by the end-to-end tests sees the same data; PostgreSQL needs nothing extra.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-db.sqlite3")}  # noqa: F405

# Test runs on one machine share its Redis: a per-process prefix keeps their channel-layer
# groups apart, so one run never receives another's live updates.
CHANNEL_LAYERS["default"]["CONFIG"]["prefix"] = f"asgi-test-{os.getpid()}"  # noqa: F405

# A password hashed the production way (PBKDF2, a million rounds) costs about 0.2 s of CPU, and
# the dashboard's fixtures create a user for each test; the tests check who may do what, not
# how strong the hash is, so they hash the fast way (Django's advice for test settings).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
