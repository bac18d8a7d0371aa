"""How a configuration form's POST is handled by every editing view: the posted data with what
the URL fixes, a save whose refusal lands on the form, and the status a refused form answers."""

from __future__ import annotations

from collections.abc import Callable

from django import forms
from django.http import HttpRequest, QueryDict

from dashboard.forms import SpecForm
from personas.config_schema import ConfigError


def posted_with(request: HttpRequest, **fixed: str) -> QueryDict:
    """The POST data with fields the URL fixes (an id that cannot be edited)."""
    data = request.POST.copy()
    for key, value in fixed.items():
        data[key] = value
    return data


def form_saved(form: SpecForm, save: Callable[[], object]) -> bool:
    """Run ``save``; a ConfigError it raises goes onto the form. True when it saved."""
    try:
        save()
    except ConfigError as error:
        form.add_problems(error.problems)
        return False
    return True


def form_status(form: forms.Form) -> int:
    """400 for a form that was posted and refused, so clients and tests can tell."""
    return 400 if form.is_bound and form.errors else 200
