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
from dashboard.access import admin_required, is_admin, viewer_required


def _card(request: HttpRequest) -> HttpResponse:
    status = going_live.deployment_status(now=timezone.now())
    context = {"status": status, "is_admin": is_admin(request.user)}
    return render(request, "dashboard/_deployment.html", context)


@require_GET
@viewer_required
def deployment_card(request: HttpRequest) -> HttpResponse:
    """The going-live card alone (the overview polls it while a check runs)."""
    return _card(request)


@require_POST
@admin_required
def deployment_check(request: HttpRequest) -> HttpResponse:
    """Ask Celery for a deployment check now (admins): a report row marks it running until the
    task fills it in. Answers the card (htmx), else goes back to the overview."""
    with transaction.atomic():
        report = doctor_report_begin(
            origin=DoctorReport.Origin.DASHBOARD, requested_by=request.user.get_username()
        )
        transaction.on_commit(lambda: doctor_task.delay(report.pk))
    if getattr(request, "htmx", False):
        return _card(request)
    return redirect("dashboard:index")
