"""Dashboard pages. Function views; each screen has one template."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from personas.models import GuildConfig


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness for operators and process supervisors: the database answers a query."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


@require_GET
@login_required
def index(request: HttpRequest) -> HttpResponse:
    guilds = GuildConfig.objects.prefetch_related("personas", "channels")
    return render(request, "dashboard/index.html", {"guilds": guilds})
