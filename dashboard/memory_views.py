"""The long-term memory screens of a guild.

- Memories: what the personas remember, searched with the same ranking a turn uses (scores
  shown), filtered by person or persona; admins add, edit and delete. The extractions that
  wrote memories are listed with links to their turn records.
- Documents: the texts turns recall passages of; admins upload (text, Markdown, PDF) and
  delete; the page follows each document's embedding progress.
"""

from __future__ import annotations

from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from chat.models import Document, Memory
from chat.pipeline.recall import MemoryKind, RecallScope
from chat.services.memory_documents import DocumentRefused, document_delete, document_upload
from chat.services.memory_recall import memory_search
from chat.services.memory_store import (
    MemoryRefused,
    MemoryScope,
    default_embedding_model,
    memory_add,
    memory_forget,
    memory_update,
    scope_of,
)
from chat.tasks import document_embed_task
from dashboard import selectors
from dashboard.access import guild_access, require_change, viewer_required
from personas.models import GuildConfig, Persona

SEARCH_RESULTS = 50
EXTRACTIONS_SHOWN = 20


@require_http_methods(["GET", "POST"])
@viewer_required
def memory_list(request: HttpRequest, guild_id: int) -> HttpResponse:
    """The guild's memories. ``?q=`` ranks them as a turn would (every memory eligible, scores
    shown); ``?user=`` and ``?persona=`` filter. An admin's POST adds one (source ``admin``):
    ``kind`` (personal, guild, persona), ``user_id`` or ``persona_id``, ``text``."""
    guild = guild_access(request, guild_id)
    personas = selectors.guild_personas_by_name(guild=guild)
    error = ""
    if request.method == "POST":
        require_change(request, guild.guild_id)
        try:
            memory_add(
                scope=_posted_scope(request, guild, personas),
                text=request.POST.get("text", ""),
                source=Memory.Source.ADMIN,
            )
        except MemoryRefused as refusal:
            error = str(refusal)
        else:
            messages.success(request, "Saved the memory.")
            return redirect("dashboard:memory_list", guild_id=guild_id)
    query = request.GET.get("q", "").strip()
    user_id = _int(request.GET.get("user"))
    persona_id = _int(request.GET.get("persona"))
    rows = selectors.guild_memories(guild=guild).select_related("persona")
    if user_id is not None:
        rows = rows.filter(kind=MemoryKind.PERSONAL, user_id=user_id)
    if persona_id is not None:
        rows = rows.filter(kind=MemoryKind.PERSONA, persona_id=persona_id)
    scores = {}
    if query:
        ranked = memory_search(
            guild_id=guild.guild_id,
            query=query,
            k=SEARCH_RESULTS,
            scope=_filter_scope(guild, user_id),
        )
        scores = {memory.record.id: memory for memory in ranked}
        by_id = {row.id: row for row in rows.filter(id__in=list(scores))}
        memories = [by_id[i] for i in scores if i in by_id]
    else:
        memories = list(rows.order_by("kind", "user_id", "-updated_at"))
    extractions = selectors.guild_extractions(guild=guild, limit=EXTRACTIONS_SHOWN)
    return render(
        request,
        "dashboard/memory_list.html",
        {
            "guild": guild,
            "section": "memories",
            "memories": [(memory, scores.get(memory.id)) for memory in memories],
            "query": query,
            "user_filter": user_id,
            "persona_filter": persona_id,
            "personas": personas,
            "extractions": extractions,
            "embedding": _embedding_progress(guild),
            "error": error,
            "posted": request.POST if error else {},
        },
        status=400 if error else 200,
    )


@require_POST
@viewer_required
def memory_edit(request: HttpRequest, guild_id: int, memory_id: int) -> HttpResponse:
    """An admin's edit of one memory's text (re-embedded, within its scope's length)."""
    guild = guild_access(request, guild_id, change=True)
    memory = get_object_or_404(selectors.guild_memories(guild=guild), pk=memory_id)
    try:
        memory_update(memory_id=memory.id, text=request.POST.get("text", ""))
    except MemoryRefused as refusal:
        messages.error(request, f"Not saved: {refusal}.")
    else:
        messages.success(request, "Saved the memory.")
    return redirect("dashboard:memory_list", guild_id=guild_id)


@require_POST
@viewer_required
def memory_delete(request: HttpRequest, guild_id: int, memory_id: int) -> HttpResponse:
    guild = guild_access(request, guild_id, change=True)
    memory = get_object_or_404(selectors.guild_memories(guild=guild), pk=memory_id)
    memory_forget(scope=scope_of(memory=memory), memory_id=memory.id)
    messages.success(request, "Deleted the memory.")
    return redirect("dashboard:memory_list", guild_id=guild_id)


def _posted_scope(request: HttpRequest, guild: GuildConfig, personas: list[Persona]) -> MemoryScope:
    """The scope an admin's new memory goes to; `MemoryRefused` for a missing user or
    persona."""
    kind = request.POST.get("kind", "")
    if kind == MemoryKind.GUILD:
        return MemoryScope.guild(guild.guild_id)
    if kind == MemoryKind.PERSONA:
        persona_id = _int(request.POST.get("persona_id"))
        if persona_id not in {p.id for p in personas}:
            raise MemoryRefused("choose one of this guild's personas")
        return MemoryScope.persona(guild.guild_id, persona_id)
    if kind == MemoryKind.PERSONAL:
        user_id = _int(request.POST.get("user_id"))
        if user_id is None or user_id <= 0:
            raise MemoryRefused("give the person's Discord user id (a number)")
        return MemoryScope.personal(guild.guild_id, user_id)
    raise MemoryRefused("choose whom the memory is about: a person, the server or a persona")


def _filter_scope(guild: GuildConfig, user_id: int | None) -> RecallScope | None:
    """With a person filter, rank as a turn holding only that person (and their proxied
    members) would; otherwise every memory."""
    if user_id is None:
        return None
    members = selectors.person_members(guild=guild, user_id=user_id)
    people = frozenset({(user_id, ""), *((user_id, member) for member in members)})
    return RecallScope(persona_id=None, people=people, kinds=frozenset({MemoryKind.PERSONAL}))


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


@require_http_methods(["GET", "POST"])
@viewer_required
def document_list(request: HttpRequest, guild_id: int) -> HttpResponse:
    """The guild's documents and their embedding progress; an admin's POST uploads one
    (``file``): read now (a broken file is refused with the reason, nothing stored), cut and
    embedded by Celery after the commit."""
    guild = guild_access(request, guild_id)
    error = ""
    if request.method == "POST":
        require_change(request, guild.guild_id)
        upload = request.FILES.get("file")
        if upload is None:
            error = "Choose a file to upload."
        else:
            try:
                with transaction.atomic():
                    document = document_upload(
                        guild_id=guild.guild_id, name=upload.name, data=upload.read()
                    )
                    transaction.on_commit(lambda: document_embed_task.delay(document.id))
            except DocumentRefused as refusal:
                error = str(refusal)
            else:
                messages.success(request, f"Uploaded {document.name}; it is being embedded.")
                return redirect("dashboard:document_list", guild_id=guild_id)
    return render(
        request,
        "dashboard/document_list.html",
        {"guild": guild, "section": "documents", "error": error, **_documents(guild)},
        status=400 if error else 200,
    )


@require_GET
@viewer_required
def document_rows(request: HttpRequest, guild_id: int) -> HttpResponse:
    """The documents table alone (htmx polls it while a document is being embedded)."""
    guild = guild_access(request, guild_id)
    return render(request, "dashboard/_document_rows.html", {"guild": guild, **_documents(guild)})


@require_POST
@viewer_required
def document_remove(request: HttpRequest, guild_id: int, document_id: int) -> HttpResponse:
    guild = guild_access(request, guild_id, change=True)
    document = get_object_or_404(selectors.guild_documents(guild=guild), pk=document_id)
    document_delete(document_id=document.id)
    messages.success(request, f"Deleted {document.name}.")
    return redirect("dashboard:document_list", guild_id=guild_id)


def _documents(guild: GuildConfig) -> dict:
    documents = list(selectors.guild_documents(guild=guild).order_by("-created_at"))
    busy = any(d.status in (Document.Status.PENDING, Document.Status.EMBEDDING) for d in documents)
    return {"documents": documents, "busy": busy}


def _embedding_progress(guild: GuildConfig) -> dict:
    """How many of the guild's memories have a vector of the configured model (after a change
    of model, the background task embeds the rest)."""
    model = default_embedding_model().name
    rows = selectors.guild_memories(guild=guild)
    return {
        "model": model,
        "total": rows.count(),
        "done": rows.filter(embedding_model=model).count(),
    }
