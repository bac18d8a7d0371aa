"""The project's URLs plus one view that forgot to scope its lookup, for the test that proves
the route walk (`dashboard.tests.tenancy.route_leaks`) finds such a view."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404
from django.urls import path

from botproject.urls import urlpatterns as project_urlpatterns
from dashboard.access import viewer_required
from personas.models import Persona


@viewer_required
def persona_name(request: HttpRequest, guild_id: int, persona_id: int) -> HttpResponse:
    """Looks the persona up by id alone: any guild's."""
    return HttpResponse(get_object_or_404(Persona, pk=persona_id).name)


urlpatterns = [
    *project_urlpatterns,
    path("guilds/<int:guild_id>/personas/<int:persona_id>/name/", persona_name, name="leaky_name"),
]
