"""SillyTavern character cards: import one as a new persona, export a persona as a V2 card.

Formats read (spec facts from the Character Card V2 and V3 specifications):

- JSON: ``{"spec": "chara_card_v2", "spec_version": "2.0", "data": {...}}`` or
  ``{"spec": "chara_card_v3", "spec_version": "3.0", "data": {...}}``, or a V1 card (TavernAI's
  format, still common): the fields at the top level and no ``spec``. The fields used are
  ``name``, ``description``, ``personality``, ``scenario``, ``first_mes``, ``mes_example`` and
  (V2/V3) ``alternate_greetings`` and ``character_book``.
- PNG: the same JSON, UTF-8 then base64, in a text chunk named ``ccv3`` (V3, preferred) or
  ``chara`` (V1, V2). Pillow reads the chunks; the image itself becomes the persona's avatar.

How a card becomes a persona (docs/dashboard.md, "SillyTavern character cards"):

- name → name; the trigger word is the name in lower case;
- system prompt = the description, then ``{char}'s personality: …``, then ``Scenario: …``
  (each part only when the card has it), separated by blank lines;
- ``mes_example`` → sample dialogue: the text is split into ``<START>`` blocks; in each, a line
  beginning ``{{user}}:`` starts a user row and ``{{char}}:`` an assistant row (further lines
  continue the row; text before the first speaker is dropped); rows keep the speaker as
  ``{user}: …`` / ``{char}: …``, the ``Name: content`` shape of dialogue items;
- ``first_mes`` and ``alternate_greetings`` are kept on the persona as they are (the file's
  ``first_mes`` / ``alternate_greetings``) and exported back;
- the card's ``{{char}}`` / ``{{user}}`` macros (and the older ``<BOT>`` / ``<USER>``) become
  this product's ``{char}`` / ``{user}``; export turns them back.

- ``character_book`` → the persona's lorebook (`lorebook_from_card`): the spec's book and entry
  fields, SillyTavern's entry extensions (``position``/``depth``/``role``, ``selectiveLogic``,
  ``match_whole_words``, ``probability``/``useProbability``, ``exclude_recursion``,
  ``prevent_recursion``) read into the lorebook's own fields, V3 ``@@depth``/``@@role``
  decorators read and taken out of the content. Every extension is also kept as it was, so an
  export (`character_book_from_lorebook`) gives back what was imported.

Everything else on a card (creator notes, tags, its own system prompt) is not used.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
import uuid
from typing import Any
from urllib.parse import urlparse

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from PIL import Image, UnidentifiedImageError
from PIL.PngImagePlugin import PngInfo

from personas.config_schema import ConfigError, PersonaSpec, decode_json_file, parse_config_row
from personas.models import GuildConfig, Persona
from personas.services import Actor, persona_save

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CARD_SPECS = {"chara_card_v2", "chara_card_v3"}
V1_FIELDS = ("description", "personality", "scenario", "first_mes", "mes_example")
"""A V1 card's fields besides its name: a document without ``spec`` with some is a V1 card."""
AVATAR_DIR = "avatars"
AVATAR_MAX_SIDE = 512

_SPEAKER = re.compile(r"^\s*(\{\{user\}\}|<user>|\{\{char\}\}|<bot>)\s*:\s?", re.IGNORECASE)
_START = re.compile(r"<start>", re.IGNORECASE)


class CardError(Exception):
    """The upload is not a usable character card; the message says why, for the admin."""


def card_read(data: bytes) -> tuple[dict[str, Any], bytes | None]:
    """Decode a card file: PNG (with a ``ccv3`` or ``chara`` text chunk) or JSON.

    Returns the card's ``data`` object and, for a PNG, the avatar re-encoded as a plain PNG
    (no text chunks, at most ``AVATAR_MAX_SIDE`` pixels a side); ``None`` for JSON.
    Raises CardError when the file is neither, the chunk is missing, its base64 or JSON is
    broken, or the JSON is not a V2/V3 card with a name.
    """
    if data.startswith(PNG_SIGNATURE):
        return _read_png(data)
    try:
        document = decode_json_file(data, max_bytes=None)  # the upload bounds its size
    except ConfigError:
        raise CardError(
            "This is not a character card: expected a PNG with a card inside, or card JSON."
        ) from None
    return _card_data(document), None


def _read_png(data: bytes) -> tuple[dict[str, Any], bytes]:
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            chunks = dict(getattr(image, "text", {}) or {})
            avatar = image.copy()
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise CardError("The PNG file is damaged and cannot be read.") from None
    keyword = next((k for k in ("ccv3", "chara") if k in chunks), None)
    if keyword is None:
        raise CardError(
            "This PNG holds no character card (no 'ccv3' or 'chara' text chunk); "
            "export the character from SillyTavern as a PNG card."
        )
    try:
        raw = base64.b64decode(chunks[keyword], validate=True)
    except (binascii.Error, ValueError):
        raise CardError(f"The PNG's {keyword!r} chunk is not valid base64.") from None
    try:
        document = decode_json_file(raw, max_bytes=None)
    except ConfigError:
        raise CardError(f"The PNG's {keyword!r} chunk does not hold valid JSON.") from None
    return _card_data(document), _avatar_png(avatar)


def _card_data(document: object) -> dict[str, Any]:
    """The card's fields: V2/V3's ``data``, or a V1 card's top level."""
    if (
        isinstance(document, dict)
        and "spec" not in document
        and isinstance(document.get("name"), str)
        and any(key in document for key in V1_FIELDS)
    ):
        return document
    if not isinstance(document, dict) or document.get("spec") not in CARD_SPECS:
        raise CardError(
            "This is not a character card: expected V1 card JSON (name, description, "
            'first_mes, …) or JSON with "spec": "chara_card_v2" or "chara_card_v3".'
        )
    data = document.get("data")
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise CardError("The card has no data.name.")
    return data


def _avatar_png(image: Image.Image) -> bytes:
    image.thumbnail((AVATAR_MAX_SIDE, AVATAR_MAX_SIDE))
    if image.mode not in ("RGB", "RGBA"):
        image = image.convert("RGBA")
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def _text(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    return _to_macros(value.strip()) if isinstance(value, str) else ""


def _to_macros(text: str) -> str:
    """Card macros → this product's: ``{{char}}``/``<BOT>`` → ``{char}``, ``{{user}}``/``<USER>``
    → ``{user}`` (any case)."""
    text = re.sub(r"\{\{char\}\}|<bot>", "{char}", text, flags=re.IGNORECASE)
    return re.sub(r"\{\{user\}\}|<user>", "{user}", text, flags=re.IGNORECASE)


def _from_macros(text: str) -> str:
    return text.replace("{char}", "{{char}}").replace("{user}", "{{user}}")


def system_prompt_from_card(data: dict[str, Any]) -> str:
    """Description, then ``{char}'s personality: …``, then ``Scenario: …``; blank-line joined."""
    parts = [_text(data, "description")]
    if personality := _text(data, "personality"):
        parts.append(f"{{char}}'s personality: {personality}")
    if scenario := _text(data, "scenario"):
        parts.append(f"Scenario: {scenario}")
    return "\n\n".join(part for part in parts if part)


def sample_dialogue_from_card(mes_example: str) -> list[dict[str, str]]:
    """Parse ``mes_example`` into user/assistant rows (see the module docstring)."""
    rows: list[dict[str, str]] = []
    for block in _START.split(mes_example or ""):
        current: dict[str, str] | None = None
        for line in block.splitlines():
            speaker = _SPEAKER.match(line)
            if speaker:
                is_user = speaker.group(1).lower() in ("{{user}}", "<user>")
                label = "{user}" if is_user else "{char}"
                current = {
                    "role": "user" if is_user else "assistant",
                    "content": f"{label}: {_to_macros(line[speaker.end() :].strip())}",
                }
                rows.append(current)
            elif current is not None and line.strip():
                current["content"] += "\n" + _to_macros(line.strip())
    return rows


def persona_row_from_card(data: dict[str, Any], *, avatar_url: str | None) -> dict[str, Any]:
    """The persona, as a configuration file row, that a card's ``data`` describes."""
    name = data["name"].strip()
    row = {
        "name": name,
        "avatar_url": avatar_url,
        "system_prompt": system_prompt_from_card(data),
        "triggers": [name.casefold()] if name else [],
        "sample_dialogue": sample_dialogue_from_card(data.get("mes_example") or ""),
        "first_mes": _text(data, "first_mes"),
        "alternate_greetings": [
            _to_macros(greeting.strip())
            for greeting in data.get("alternate_greetings") or []
            if isinstance(greeting, str) and greeting.strip()
        ],
    }
    book = data.get("character_book")
    if isinstance(book, dict):
        row["lorebook"] = lorebook_from_card(book)
    return row


# -- lorebooks ------------------------------------------------------------------------------------
# SillyTavern's numbers for an entry's extensions (its World Info editor's choices).
_ST_POSITIONS = {0: "before_char", 1: "after_char", 4: "at_depth"}
_ST_ROLES = {0: "system", 1: "user", 2: "assistant"}
_ST_LOGIC = {0: "and_any", 1: "not_all", 2: "not_any", 3: "and_all"}
_DECORATOR = re.compile(r"^@@(?P<name>[a-z_]+)(?:[ \t]+(?P<value>.*))?$")
_DECORATORS_KEPT = "personabot_decorators"
"""Where an entry's V3 ``@@`` decorator lines are kept (in its extensions) for export."""


def _int(value: object, default: int, low: int, high: int) -> int:
    """A card's number as an int in [low, high]; ``default`` when it is not a number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return max(low, min(high, int(value)))


def _flag(value: object, default: bool = False) -> bool:
    return value if isinstance(value, bool) else default


def _strings(value: object) -> list[str]:
    return [str(item) for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _split_decorators(content: str) -> tuple[list[str], str]:
    """V3 decorators: the ``@@name value`` lines a content starts with, and the rest."""
    lines = content.split("\n")
    decorators = []
    while lines and _DECORATOR.match(lines[0].strip()):
        decorators.append(lines.pop(0).strip())
    return decorators, "\n".join(lines)


def _entry_reading(card_entry: dict[str, Any]) -> dict[str, Any]:
    """The lorebook fields a card entry's SillyTavern extensions and decorators say."""
    ext = card_entry.get("extensions") if isinstance(card_entry.get("extensions"), dict) else {}
    position = _ST_POSITIONS.get(ext.get("position"))  # type: ignore[arg-type]
    if position is None:
        position = "after_char" if card_entry.get("position") == "after_char" else "before_char"
    reading = {
        "position": position,
        "depth": _int(ext.get("depth"), 4, 0, 100),
        "role": _ST_ROLES.get(ext.get("role"), "system"),  # type: ignore[arg-type]
        "selective_logic": _ST_LOGIC.get(ext.get("selectiveLogic"), "and_any"),  # type: ignore[arg-type]
        "match_whole_words": _flag(ext.get("match_whole_words")),
        "probability": (
            _int(ext.get("probability"), 100, 0, 100)
            if _flag(ext.get("useProbability"), True)
            else 100
        ),
        "exclude_recursion": _flag(ext.get("exclude_recursion")),
        "prevent_recursion": _flag(ext.get("prevent_recursion")),
        "case_sensitive": _flag(card_entry.get("case_sensitive"), _flag(ext.get("case_sensitive"))),
    }
    decorators, _content = _split_decorators(str(card_entry.get("content") or ""))
    for line in decorators:
        match = _DECORATOR.match(line)
        assert match is not None
        name, value = match["name"], (match["value"] or "").strip()
        if name == "depth" and value.isascii() and value.isdigit():
            reading["position"], reading["depth"] = "at_depth", min(100, int(value))
        elif name == "role" and value in ("system", "user", "assistant"):
            reading["role"] = value
        elif name == "constant":
            reading["constant"] = True
    return reading


def lorebook_from_card(book: dict[str, Any]) -> dict[str, Any]:
    """A card's ``character_book`` as a configuration file's ``lorebook`` (not yet validated:
    the caller validates it with the persona row, so a problem names its path)."""
    entries = []
    raw_entries = book.get("entries") if isinstance(book.get("entries"), list) else []
    for card_entry in raw_entries:
        if not isinstance(card_entry, dict):
            continue
        ext = card_entry.get("extensions")
        extensions = dict(ext) if isinstance(ext, dict) else {}
        decorators, content = _split_decorators(str(card_entry.get("content") or ""))
        if decorators:
            extensions[_DECORATORS_KEPT] = decorators
        entry_id = card_entry.get("id")
        entry = {
            "id": entry_id
            if isinstance(entry_id, int) and not isinstance(entry_id, bool)
            else None,
            "name": _to_macros(str(card_entry.get("name") or "")),
            "comment": str(card_entry.get("comment") or ""),
            "keys": _strings(card_entry.get("keys")),
            "secondary_keys": _strings(card_entry.get("secondary_keys")),
            "content": _to_macros(content),
            "enabled": _flag(card_entry.get("enabled"), True),
            "constant": _flag(card_entry.get("constant")),
            "selective": _flag(card_entry.get("selective")),
            "insertion_order": _int(card_entry.get("insertion_order"), 100, -(10**6), 10**6),
            "priority": _int(card_entry.get("priority"), 0, -(10**6), 10**6),
            "use_regex": _flag(card_entry.get("use_regex")),
            "extensions": extensions,
        }
        entry.update(_entry_reading(card_entry))
        entries.append(entry)
    extensions = book.get("extensions")
    token_budget = book.get("token_budget")
    return {
        "name": str(book.get("name") or ""),
        "description": str(book.get("description") or ""),
        "scan_depth": _int(book.get("scan_depth"), 2, 0, 100),
        "token_budget": (
            _int(token_budget, 1, 1, 2_000_000) if isinstance(token_budget, int | float) else None
        ),
        "recursive_scanning": _flag(book.get("recursive_scanning")),
        "extensions": dict(extensions) if isinstance(extensions, dict) else {},
        "entries": entries,
    }


def character_book_from_lorebook(book: dict[str, Any]) -> dict[str, Any]:
    """A stored lorebook as a card's ``character_book``: the spec's fields, and each entry's
    SillyTavern extensions as imported, with what was changed here written over them."""
    card_book: dict[str, Any] = {
        "name": book.get("name", ""),
        "description": book.get("description", ""),
        "scan_depth": book.get("scan_depth", 2),
        "recursive_scanning": book.get("recursive_scanning", False),
        "extensions": dict(book.get("extensions") or {}),
        "entries": [_card_entry(entry) for entry in book.get("entries", [])],
    }
    if book.get("token_budget") is not None:
        card_book["token_budget"] = book["token_budget"]
    return card_book


def _card_entry(entry: dict[str, Any]) -> dict[str, Any]:
    extensions = dict(entry.get("extensions") or {})
    decorators = extensions.pop(_DECORATORS_KEPT, [])
    content = _from_macros(entry.get("content", ""))
    card_entry: dict[str, Any] = {
        "id": entry.get("id"),
        "name": entry.get("name", ""),
        "comment": entry.get("comment", ""),
        "keys": list(entry.get("keys", [])),
        "secondary_keys": list(entry.get("secondary_keys", [])),
        "content": "\n".join([*decorators, content]) if decorators else content,
        "enabled": entry.get("enabled", True),
        "constant": entry.get("constant", False),
        "selective": entry.get("selective", False),
        "insertion_order": entry.get("insertion_order", 100),
        "priority": entry.get("priority", 0),
        "case_sensitive": entry.get("case_sensitive", False),
        "position": "before_char" if entry.get("position") == "before_char" else "after_char",
        "extensions": extensions,
    }
    if entry.get("use_regex"):  # a V3 field: written only when it says something
        card_entry["use_regex"] = True
    # Write SillyTavern's extensions only where they no longer say what the entry says.
    said = _entry_reading(card_entry)
    wanted = {key: entry.get(key, said[key]) for key in said if key in entry}
    numbers = {
        "position": {v: k for k, v in _ST_POSITIONS.items()},
        "role": {v: k for k, v in _ST_ROLES.items()},
        "selective_logic": {v: k for k, v in _ST_LOGIC.items()},
    }
    names = {"selective_logic": "selectiveLogic"}
    for key, value in wanted.items():
        if said.get(key) == value or key == "case_sensitive":
            continue
        if key == "probability":
            extensions["probability"], extensions["useProbability"] = value, True
        elif key in numbers:
            extensions[names.get(key, key)] = numbers[key][value]
        else:
            extensions[key] = value
        said = _entry_reading(card_entry)
    return card_entry


def card_import(
    *,
    guild: GuildConfig,
    data: bytes,
    media_base_url: str,
    actor: Actor = None,
) -> Persona:
    """Create a new persona in ``guild`` from a card file.

    Steps: decode the card (CardError), build and validate the persona row exactly as a
    configuration file's row (ConfigError, paths relative to the row), store the PNG's image
    under ``MEDIA_ROOT/avatars/`` (its URL is ``media_base_url`` + the stored name), then save
    through ``persona_save`` (ConfigError when the name is taken). On any failure nothing is
    created and no file is left behind.
    """
    card, avatar = card_read(data)
    avatar_name = f"{AVATAR_DIR}/{uuid.uuid4().hex}.png" if avatar is not None else None
    avatar_url = media_base_url.rstrip("/") + "/" + avatar_name if avatar_name else None
    spec = parse_config_row("personas", persona_row_from_card(card, avatar_url=avatar_url))
    assert isinstance(spec, PersonaSpec)
    stored = default_storage.save(avatar_name, ContentFile(avatar)) if avatar_name else None
    if stored and stored != avatar_name:  # the storage chose another name: follow it
        spec = spec.model_copy(update={"avatar_url": media_base_url.rstrip("/") + "/" + stored})
    try:
        return persona_save(guild=guild, spec=spec, actor=actor)
    except Exception:
        if stored:
            default_storage.delete(stored)
        raise


def card_from_persona(persona: Persona) -> dict[str, Any]:
    """The persona as a Character Card V2 (``chara_card_v2``) document.

    The system prompt becomes the description; sample dialogue becomes ``mes_example`` (one
    ``<START>`` block, ``{{user}}:`` / ``{{char}}:`` lines); the first message and alternate
    greetings go back as they came; this product's own settings are kept under
    ``data.extensions.personabot``.
    """
    lines = ["<START>"] if persona.sample_dialogue else []
    for row in persona.sample_dialogue:
        is_user = row.get("role") == "user"
        content = str(row.get("content", ""))
        for prefix in ("{user}:", "{char}:"):
            if content.startswith(prefix):
                content = content[len(prefix) :].lstrip()
        lines.append(f"{'{{user}}' if is_user else '{{char}}'}: {_from_macros(content)}")
    return {
        "spec": "chara_card_v2",
        "spec_version": "2.0",
        "data": {
            "name": persona.name,
            "description": _from_macros(persona.system_prompt),
            "personality": "",
            "scenario": "",
            "first_mes": _from_macros(persona.first_mes),
            "mes_example": "\n".join(lines),
            "creator_notes": "",
            "system_prompt": "",
            "post_history_instructions": "",
            "alternate_greetings": [_from_macros(g) for g in persona.alternate_greetings],
            "tags": [],
            "creator": "",
            "character_version": "",
            **(
                {"character_book": character_book_from_lorebook(persona.lorebook)}
                if persona.lorebook
                else {}
            ),
            "extensions": {
                "personabot": {
                    "triggers": list(persona.triggers),
                    "prefill": persona.prefill,
                    "context_note": {
                        "text": persona.context_note,
                        "depth": persona.context_note_depth,
                    },
                    "delivery_mode": persona.delivery_mode,
                }
            },
        },
    }


def avatar_image(persona: Persona) -> Image.Image:
    """The persona's stored avatar when it is one of ours (under MEDIA_ROOT), else a plain
    tile in a colour derived from the name. Remote URLs are never fetched."""
    path = urlparse(persona.avatar_url).path if persona.avatar_url else ""
    media_prefix = "/" + settings.MEDIA_URL.strip("/") + "/"
    if path.startswith(media_prefix):
        name = path[len(media_prefix) :]
        if name and ".." not in name and default_storage.exists(name):
            with default_storage.open(name, "rb") as handle:
                return Image.open(io.BytesIO(handle.read())).convert("RGBA")
    hue = sum(persona.name.encode()) % 256
    return Image.new("RGB", (400, 600), (hue, 120, 255 - hue))


def card_png(card: dict[str, Any], *, avatar: Image.Image) -> bytes:
    """A PNG of ``avatar`` carrying ``card`` (UTF-8 JSON, base64) in a ``chara`` tEXt chunk."""
    info = PngInfo()
    info.add_text("chara", base64.b64encode(json.dumps(card).encode("utf-8")).decode("ascii"))
    buffer = io.BytesIO()
    avatar.save(buffer, "PNG", pnginfo=info)
    return buffer.getvalue()


__all__ = [
    "CardError",
    "avatar_image",
    "card_from_persona",
    "card_import",
    "card_png",
    "card_read",
    "character_book_from_lorebook",
    "lorebook_from_card",
]
