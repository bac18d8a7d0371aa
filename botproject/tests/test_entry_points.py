"""The ASGI application, the Celery app and the web process answer."""

from __future__ import annotations

import pytest
from channels.routing import ProtocolTypeRouter
from django.test import Client


def test_asgi_application_routes_http_and_websockets():
    from botproject.asgi import application

    assert isinstance(application, ProtocolTypeRouter)
    assert set(application.application_mapping) == {"http", "websocket"}


def test_celery_uses_redis_as_its_broker(settings):
    from botproject.celery import app

    assert app.conf.broker_url == settings.REDIS_URL
    assert settings.REDIS_URL.startswith("redis://")


@pytest.mark.django_db
def test_healthz_answers_when_the_database_does():
    response = Client().get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_dashboard_requires_login():
    response = Client().get("/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/"


@pytest.mark.django_db
def test_admin_login_page_renders():
    assert Client().get("/admin/login/").status_code == 200
