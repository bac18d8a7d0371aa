"""Celery tasks of the dashboard's people (thin: each calls a service)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.contrib.auth import get_user_model

from accounts.discord_api import oauth_session
from accounts.services import rights_refresh, rights_refresh_due

logger = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def guild_rights_refresh_task() -> dict[str, int]:
    """Read every signed-in person's guilds from Discord again (`rights_refresh`), one at a
    time; one person's failure never stops the others'. Returns how many were read, changed,
    ended, and could not be read now."""
    counts = {"read": 0, "changed": 0, "ended": 0, "unanswered": 0}
    session = oauth_session()
    for user_id in rights_refresh_due():
        user = get_user_model().objects.filter(pk=user_id).first()
        if user is None:
            continue
        try:
            change = rights_refresh(user=user, session=session)
        except Exception:
            logger.exception("could not refresh the rights of user %s", user_id)
            counts["unanswered"] += 1
            continue
        if change is None:
            counts["unanswered"] += 1
            continue
        counts["read"] += 1
        counts["changed"] += int(change.any)
        counts["ended"] += int(change.ended)
    return counts
