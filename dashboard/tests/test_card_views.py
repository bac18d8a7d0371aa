"""Character cards through the dashboard: upload limits, errors shown, downloads."""

from __future__ import annotations

import io
import json

import pytest
from django.urls import reverse
from PIL import Image

from personas import cards
from personas.models import Persona
from personas.tests.test_cards import b64, card_v2, png_bytes

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def _upload(content: bytes, name: str) -> io.BytesIO:
    upload = io.BytesIO(content)
    upload.name = name
    return upload


def test_an_admin_imports_a_png_card_and_lands_on_the_new_persona(guild, admin_client, media):
    data = png_bytes(chunks={"chara": b64(card_v2())})
    response = admin_client.post(
        reverse("dashboard:card_import", args=[guild.guild_id]),
        {"file": _upload(data, "soyo.png")},
    )
    soyo = Persona.objects.get(guild=guild, name="Soyo")
    assert response.status_code == 302
    assert response["Location"] == reverse("dashboard:persona", args=[guild.guild_id, soyo.pk])
    assert soyo.avatar_url.startswith("http://testserver/media/avatars/")
    assert len(list(media.rglob("*.png"))) == 1


def test_a_card_over_five_megabytes_is_refused_with_a_clear_error(guild, admin_client, media):
    big = png_bytes(chunks={"chara": b64(card_v2()), "filler": "x" * (5 * 1024 * 1024)})
    assert len(big) > 5 * 1024 * 1024
    response = admin_client.post(
        reverse("dashboard:card_import", args=[guild.guild_id]), {"file": _upload(big, "big.png")}
    )
    assert response.status_code == 400
    assert "a card may be at most 5,242,880 bytes (5 MB)" in response.content.decode()
    assert not Persona.objects.filter(name="Soyo").exists()
    assert not media.exists() or not any(media.rglob("*.png"))


def test_a_png_without_a_card_shows_why_and_creates_nothing(guild, admin_client):
    count = Persona.objects.count()
    response = admin_client.post(
        reverse("dashboard:card_import", args=[guild.guild_id]),
        {"file": _upload(png_bytes(), "plain.png")},
    )
    assert response.status_code == 400
    assert "This PNG holds no character card" in response.content.decode()
    assert Persona.objects.count() == count


def test_a_persona_downloads_as_a_v2_card_in_json_and_png(guild, moderator_client):
    tomori = Persona.objects.get(guild=guild, name="Tomori")
    as_json = moderator_client.get(
        reverse("dashboard:card_export", args=[guild.guild_id, tomori.pk, "json"])
    )
    card = json.loads(as_json.content)
    assert as_json["Content-Disposition"] == 'attachment; filename="Tomori.json"'
    assert card["spec"] == "chara_card_v2" and card["data"]["name"] == "Tomori"
    assert card["data"]["description"] == "You are Tomori, a quiet poet."

    as_png = moderator_client.get(
        reverse("dashboard:card_export", args=[guild.guild_id, tomori.pk, "png"])
    )
    assert as_png["Content-Type"] == "image/png"
    with Image.open(io.BytesIO(as_png.content)) as image:
        assert image.format == "PNG"
    assert cards.card_read(as_png.content)[0] == card["data"]
