"""A long-lived thread's connections: renewed at once after a failed statement, otherwise at
most once an interval (each renewal costs the next statement a health check)."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection

from chat.db_connections import connections_renewed

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_failed_statement_has_the_connection_checked_at_once():
    connections_renewed(every_s=0)
    with pytest.raises(DatabaseError), connection.cursor() as cursor:
        cursor.execute("SELECT * FROM no_such_table")
    assert connection.errors_occurred

    connections_renewed(every_s=3600)  # not due, but a statement failed

    assert not connection.errors_occurred  # checked, found usable, kept
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")


def test_a_healthy_connection_is_renewed_at_most_once_an_interval():
    connections_renewed(every_s=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")  # the renewal's health check ran before it
    assert connection.health_check_done

    connections_renewed(every_s=3600)
    assert connection.health_check_done  # not renewed: the next statement goes straight out

    connections_renewed(every_s=0)
    assert not connection.health_check_done  # renewed: the next statement checks first
