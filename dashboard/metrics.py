"""The web process's ``/metrics``: its Prometheus registry, for operators and scrapers only.

Anyone who is neither an operator (an active staff user, logged in) nor a scraper presenting
``Authorization: Bearer <METRICS_TOKEN>`` is refused: 401 with a ``WWW-Authenticate`` challenge
without credentials, 403 for a logged-in person who is not an operator or a wrong token. The
series are the process's own (`chat.metrics`, what the dashboard itself did, and the process
collector's CPU and memory); the worker and the Celery worker serve theirs.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

import chat.metrics  # noqa: F401  (the product's series, exported at zero before any event)
from dashboard.access import request_rights

BEARER = "Bearer "


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The Prometheus text format of this process's series (operators and the token only)."""
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request may read the metrics, else the answer refusing it."""
    header = request.headers.get("Authorization", "")
    if header.startswith(BEARER):
        token = settings.METRICS_TOKEN
        given = header[len(BEARER) :].strip()
        if token and hmac.compare_digest(given.encode(), token.encode()):
            return None
        return HttpResponse(
            "the metrics token is not valid\n", status=403, content_type="text/plain"
        )
    if request_rights(request).operator:
        return None
    if request.user.is_authenticated:
        return HttpResponse(
            "the metrics are for operators\n", status=403, content_type="text/plain"
        )
    answer = HttpResponse(
        "log in as an operator or send Authorization: Bearer <METRICS_TOKEN>\n",
        status=401,
        content_type="text/plain",
    )
    answer["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return answer
