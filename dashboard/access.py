"""Who may see and change what on the dashboard (DESIGN §3 "Roles", §3b "Rights come from
Discord, per guild").

Every decision comes from the person's `GuildRights` (`accounts.selectors.guild_rights`, read
once per request and kept on it):

- **operators** (active staff users) see and change every guild, and alone open the
  operator-only screens (workers and shards, the playground, adding a guild, the admin);
- members of the ``moderators`` group are moderators of every guild;
- people who logged in with Discord are admins or moderators of the guilds Discord says;
- a logged-in person with no right in any guild gets a 403 page everywhere; anonymous
  visitors are sent to the login page.

Anything of a guild the person has no right in answers **404**, exactly as something that does
not exist (`guild_access`, `channel_access`, `turn_access`), so its existence never leaks. A
moderator's change to a guild they may see answers 403.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse

from accounts.models import GuildRole
from accounts.selectors import MODERATORS_GROUP, GuildRights, discord_user_id, guild_rights
from chat.models import Turn
from dashboard.selectors import may_view_channel, visible_turns
from personas.audit import ChangeAuthor
from personas.models import ChangeKind, GuildConfig

__all__ = [
    "MODERATORS_GROUP",
    "change_author",
    "channel_access",
    "editor_required",
    "guild_access",
    "operator_required",
    "request_rights",
    "require_change",
    "require_operator",
    "turn_access",
    "viewer_required",
]

View = Callable[..., HttpResponse]
NOT_FOUND = "Nothing here."


def request_rights(request: HttpRequest) -> GuildRights:
    """The rights of the request's person, read once per request."""
    rights = getattr(request, "_guild_rights", None)
    if rights is None:
        rights = guild_rights(user=getattr(request, "user", None))
        request._guild_rights = rights  # type: ignore[attr-defined]
    return rights


def viewer_required(view: View) -> View:
    """People with a right in some guild pass; other logged-in users get 403; anonymous →
    the login page."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request_rights(request).any:
            raise PermissionDenied(
                "The dashboard is for the admins and moderators of the guilds this bot serves."
            )
        return view(request, *args, **kwargs)

    return login_required(wrapper)


def editor_required(view: View) -> View:
    """People who may change some guild's configuration pass (the edit forms' helpers);
    others get 403."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not request_rights(request).changes_any:
            raise PermissionDenied("Only admins can change the configuration.")
        return view(request, *args, **kwargs)

    return login_required(wrapper)


def operator_required(view: View) -> View:
    """Operators (staff users) pass; everyone else gets 403."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args, **kwargs) -> HttpResponse:
        require_operator(request)
        return view(request, *args, **kwargs)

    return login_required(wrapper)


def require_operator(request: HttpRequest) -> None:
    """403 unless the request's person is an operator."""
    if not request_rights(request).operator:
        raise PermissionDenied("Only operators (staff users) can do this.")


def guild_access(request: HttpRequest, guild_id: int, *, change: bool = False) -> GuildConfig:
    """The configured guild ``guild_id`` when the person may see it; with ``change``, also
    change it.

    Raises Http404 alike for a guild that is not configured and one the person has no right
    in; PermissionDenied (403) for a change by someone who may only see it.
    """
    rights = request_rights(request)
    if not rights.may_view(guild_id):
        raise Http404(NOT_FOUND)
    guild = GuildConfig.objects.filter(guild_id=guild_id).first()
    if guild is None:
        raise Http404(NOT_FOUND)
    if change:
        require_change(request, guild.guild_id)
    return guild


def channel_access(request: HttpRequest, channel_id: int) -> None:
    """Http404 unless the person may see the channel: a channel of a guild they have no right
    in answers exactly as one nothing is known of (operators open any channel)."""
    if not may_view_channel(rights=request_rights(request), channel_id=channel_id):
        raise Http404(NOT_FOUND)


def turn_access(request: HttpRequest, turn_id: int) -> Turn:
    """The turn ``turn_id`` when the person may see it (a direct message's: when its persona is
    of their guilds); Http404 alike for a missing and a forbidden turn."""
    turn = visible_turns(rights=request_rights(request)).filter(pk=turn_id).first()
    if turn is None:
        raise Http404(NOT_FOUND)
    return turn


def require_change(request: HttpRequest, guild_id: int | None) -> None:
    """403 unless the person may change ``guild_id``'s configuration (a moderator may not)."""
    if not request_rights(request).may_change(guild_id):
        raise PermissionDenied("Only the guild's admins can change its configuration.")


def change_author(
    request: HttpRequest, *, kind: ChangeKind = ChangeKind.DASHBOARD, via: str = ""
) -> ChangeAuthor:
    """The request's person as the author of a configuration change (the audit trail's who),
    made ``kind``-wise (a form, an upload named ``via``)."""
    user = request.user
    return ChangeAuthor.of_user(user, kind=kind, discord_id=discord_user_id(user=user), via=via)


def roles(request: HttpRequest) -> dict[str, object]:
    """Template context: ``is_operator``; ``is_admin``: edit controls are shown (the person
    may change the guild in the URL, or, on a page of no guild, some guild); ``is_moderator``:
    they see without changing; ``rights`` itself."""
    rights = request_rights(request)
    match = getattr(request, "resolver_match", None)
    guild_id = match.kwargs.get("guild_id") if match is not None else None
    is_admin = rights.may_change(guild_id) if guild_id is not None else rights.changes_any
    if guild_id is not None:
        is_moderator = rights.role(guild_id) == GuildRole.MODERATOR
    else:
        is_moderator = rights.any and not is_admin
    return {
        "rights": rights,
        "is_operator": rights.operator,
        "is_admin": is_admin,
        "is_moderator": is_moderator,
    }
