"""WSGI entry point, for management tools that expect one; the product is served over ASGI."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "botproject.settings")

application = get_wsgi_application()
