"""The web process's /metrics: operators and the metrics token read it; nobody else does."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client, override_settings
from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families

from dashboard.access import MODERATORS_GROUP

pytestmark = pytest.mark.django_db
TOKEN = "scrape-token-5f1c"


def families(response) -> dict[str, object]:
    return {f.name: f for f in text_string_to_metric_families(response.content.decode())}


@override_settings(METRICS_TOKEN=TOKEN)
def test_an_anonymous_request_is_refused_with_a_bearer_challenge():
    response = Client().get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert b"personabot_" not in response.content


@override_settings(METRICS_TOKEN=TOKEN)
def test_the_token_reads_the_series():
    response = Client().get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    assert response["Content-Type"] == CONTENT_TYPE_LATEST  # the text format
    read = families(response)
    assert read["personabot_turns"].type == "counter"
    assert "process_cpu_seconds" in read


@pytest.mark.parametrize("header", ["Bearer wrong-token", f"Bearer {TOKEN}x", "Bearer "])
@override_settings(METRICS_TOKEN=TOKEN)
def test_a_wrong_token_is_refused(header):
    response = Client().get("/metrics", headers={"Authorization": header})
    assert response.status_code == 403
    assert b"personabot_" not in response.content


@override_settings(METRICS_TOKEN="")
def test_with_no_token_configured_no_bearer_is_accepted():
    response = Client().get("/metrics", headers={"Authorization": "Bearer "})
    assert response.status_code == 403


@override_settings(METRICS_TOKEN=TOKEN)
def test_an_operator_reads_the_series_and_a_moderator_does_not():
    operator = User.objects.create_user("op", password="x", is_staff=True)
    moderator = User.objects.create_user("mo", password="x")
    moderator.groups.add(Group.objects.get_or_create(name=MODERATORS_GROUP)[0])

    as_operator, as_moderator = Client(), Client()
    as_operator.force_login(operator)
    as_moderator.force_login(moderator)

    assert as_operator.get("/metrics").status_code == 200
    refused = as_moderator.get("/metrics")
    assert refused.status_code == 403
    assert b"personabot_" not in refused.content
    assert as_operator.post("/metrics").status_code == 405
