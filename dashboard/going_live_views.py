"""The overview's going-live card on its own (polled while a check runs) and "Check now"."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from chat.models import DoctorReport
from chat.services.doctor import doctor_report_begin
from chat.tasks import doctor_task
from dashboard import going_live
from dashboard.access import editor_required, request_rights, viewer_required


def _card(request: HttpRequest) -> HttpResponse:
    rights = request_rights(request)
    status = going_live.deployment_status(now=timezone.now(), rights=rights)
    context = {"status": status, "is_admin": rights.changes_any}
    return render(request, "dashboard/_deployment.html", context)


@require_GET
@viewer_required
def deployment_card(request: HttpRequest) -> HttpResponse:
    """The going-live card alone (the overview polls it while a check runs)."""
    return _card(request)


@require_POST
@editor_required
def deployment_check(request: HttpRequest) -> HttpResponse:
    """Ask Celery for a deployment check now (anyone who may change a guild's configuration:
    the check reads Discord and changes nothing; the card shows each person their own guilds'
    lines): a report row marks it running until the task fills it in. Answers the card
    (htmx), else goes back to the overview."""
    with transaction.atomic():
        report = doctor_report_begin(
            origin=DoctorReport.Origin.DASHBOARD, requested_by=request.user.get_username()
        )
        transaction.on_commit(lambda: doctor_task.delay(report.pk))
    if getattr(request, "htmx", False):
        return _card(request)
    return redirect("dashboard:index")
