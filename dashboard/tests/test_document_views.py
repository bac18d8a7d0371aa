"""The documents screen: admins upload (a broken file is refused with its reason, nothing
stored), Celery embeds after the commit with progress on the page; moderators only read."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from chat.models import Document, DocumentChunk
from chat.tasks import document_embed_task
from chat.tests.services.test_memory_documents import pdf_with_text

pytestmark = pytest.mark.django_db


def url(guild, name="document_list", **kw):
    return reverse(f"dashboard:{name}", kwargs={"guild_id": guild.guild_id, **kw})


def test_an_upload_is_read_then_embedded_after_the_commit_with_progress_shown(
    guild, admin_client, django_capture_on_commit_callbacks
):
    upload = SimpleUploadedFile("menu.pdf", pdf_with_text("The tea house opens at noon"))
    with django_capture_on_commit_callbacks() as queued:
        response = admin_client.post(url(guild), {"file": upload})

    assert response.status_code == 302 and len(queued) == 1
    document = Document.objects.get()
    assert (document.name, document.status) == ("menu.pdf", "pending")
    rows = admin_client.get(url(guild, "document_rows")).content.decode()
    assert 'hx-trigger="every 2s"' in rows and "Waiting to be embedded" in rows

    assert document_embed_task(document.id) == "ready"  # what the queued task runs

    rows = admin_client.get(url(guild, "document_rows")).content.decode()
    assert "every 2s" not in rows and "1 / 1" in rows and ">Ready<" in rows
    assert DocumentChunk.objects.get().text == "The tea house opens at noon"


def test_a_broken_file_is_refused_with_its_reason_and_nothing_is_stored(
    guild, admin_client, django_capture_on_commit_callbacks
):
    upload = SimpleUploadedFile("broken.pdf", b"%PDF-1.4 nothing here")
    with django_capture_on_commit_callbacks() as queued:
        response = admin_client.post(url(guild), {"file": upload})

    assert response.status_code == 400
    assert "broken.pdf is not a readable PDF" in response.content.decode()
    assert queued == [] and Document.objects.count() == 0


def test_moderators_read_but_cannot_upload_or_delete(guild, moderator_client):
    document = Document.objects.create(
        guild_id=guild.guild_id, name="rules.md", content_type="markdown", size=5, text="Rules"
    )
    page = moderator_client.get(url(guild)).content.decode()
    assert "rules.md" in page and 'type="file"' not in page
    upload = SimpleUploadedFile("x.txt", b"x")
    assert moderator_client.post(url(guild), {"file": upload}).status_code == 403
    delete = url(guild, "document_delete", document_id=document.id)
    assert moderator_client.post(delete).status_code == 403
    assert Document.objects.count() == 1


def test_admins_delete_a_document_and_its_passages(guild, admin_client):
    document = Document.objects.create(
        guild_id=guild.guild_id, name="rules.md", content_type="markdown", size=5, text="Rules"
    )
    DocumentChunk.objects.create(document=document, position=0, text="Rules")
    admin_client.post(url(guild, "document_delete", document_id=document.id))
    assert Document.objects.count() == 0 and DocumentChunk.objects.count() == 0
