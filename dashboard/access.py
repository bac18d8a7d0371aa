"""Who may see and change what on the dashboard (DESIGN §3, "Roles").

- **admins**: active staff users; they see every screen and change configuration;
- **moderators**: members of the ``moderators`` group (made by a migration); they see every
  screen and change nothing: a configuration POST answers 403 and no edit control is rendered;
- anyone else who is logged in gets a 403 page; anonymous visitors are sent to the login page.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse

MODERATORS_GROUP = "moderators"

View = Callable[..., HttpResponse]


def is_admin(user) -> bool:
    """True for a logged-in, active staff user."""
    return bool(user.is_authenticated and user.is_active and user.is_staff)


def is_moderator(user) -> bool:
    """True for a logged-in, active member of the moderators group who is not an admin."""
    if not (user.is_authenticated and user.is_active) or is_admin(user):
        return False
    return user.groups.filter(name=MODERATORS_GROUP).exists()


def viewer_required(view: View) -> View:
    """Admins and moderators pass; other logged-in users get 403; anonymous → login page."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not (is_admin(request.user) or is_moderator(request.user)):
            raise PermissionDenied("The dashboard is for admins and moderators.")
        return view(request, *args, **kwargs)

    return login_required(wrapper)


def admin_required(view: View) -> View:
    """Admins pass; moderators and other logged-in users get 403; anonymous → login page."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        require_admin(request)
        return view(request, *args, **kwargs)

    return login_required(wrapper)


def require_admin(request: HttpRequest) -> None:
    """Inside a view both roles may open: a configuration POST from a moderator answers 403."""
    if not is_admin(request.user):
        raise PermissionDenied("Only admins can change the configuration.")


def roles(request: HttpRequest) -> dict[str, bool]:
    """Template context: ``is_admin`` (edit controls are shown) and ``is_moderator``."""
    user = getattr(request, "user", None)
    if user is None:
        return {"is_admin": False, "is_moderator": False}
    return {"is_admin": is_admin(user), "is_moderator": is_moderator(user)}
