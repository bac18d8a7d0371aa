"""SillyTavern character cards: import one as a new persona, export a persona as a V2 card.

Formats read (spec facts from the Character Card V2 and V3 specifications):

- JSON: ``{"spec": "chara_card_v2", "spec_version": "2.0", "data": {...}}`` or
  ``{"spec": "chara_card_v3", "spec_version": "3.0", "data": {...}}``; the fields used are
  ``data.name``, ``description``, ``personality``, ``scenario`` and ``mes_example``.
- PNG: the same JSON, UTF-8 then base64, in a text chunk named ``ccv3`` (V3, preferred) or
  ``chara`` (V2). Pillow reads the chunks; the image itself becomes the persona's avatar.

How a card becomes a persona (README, "Character cards"):

- name → name; the trigger word is the name in lower case;
- system prompt = the description, then ``{char}'s personality: …``, then ``Scenario: …``
  (each part only when the card has it), separated by blank lines;
- ``mes_example`` → sample dialogue: the text is split into ``<START>`` blocks; in each, a line
  beginning ``{{user}}:`` starts a user row and ``{{char}}:`` an assistant row (further lines
  continue the row; text before the first speaker is dropped); rows keep the speaker as
  ``{user}: …`` / ``{char}: …``, the ``Name: content`` shape of dialogue items;
- the card's ``{{char}}`` / ``{{user}}`` macros (and the older ``<BOT>`` / ``<USER>``) become
  this product's ``{char}`` / ``{user}``; export turns them back.

Everything else on a card (first message, greetings, lorebook, creator notes) is not used.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import re
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from PIL import Image, UnidentifiedImageError
from PIL.PngImagePlugin import PngInfo

from personas.config_schema import PersonaSpec, parse_config_row
from personas.models import GuildConfig, Persona
from personas.services import persona_save

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CARD_SPECS = {"chara_card_v2", "chara_card_v3"}
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
        document = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
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
        text = base64.b64decode(chunks[keyword], validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise CardError(f"The PNG's {keyword!r} chunk is not valid base64.") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError:
        raise CardError(f"The PNG's {keyword!r} chunk does not hold valid JSON.") from None
    return _card_data(document), _avatar_png(avatar)


def _card_data(document: object) -> dict[str, Any]:
    if not isinstance(document, dict) or document.get("spec") not in CARD_SPECS:
        raise CardError(
            "This is not a character card: expected JSON with "
            '"spec": "chara_card_v2" or "chara_card_v3".'
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
    return {
        "name": name,
        "avatar_url": avatar_url,
        "system_prompt": system_prompt_from_card(data),
        "triggers": [name.casefold()] if name else [],
        "sample_dialogue": sample_dialogue_from_card(data.get("mes_example") or ""),
    }


def card_import(
    *,
    guild: GuildConfig,
    data: bytes,
    media_base_url: str,
    actor: AbstractBaseUser | None = None,
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
    ``<START>`` block, ``{{user}}:`` / ``{{char}}:`` lines); this product's own settings are
    kept under ``data.extensions.personabot``.
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
            "first_mes": "",
            "mes_example": "\n".join(lines),
            "creator_notes": "",
            "system_prompt": "",
            "post_history_instructions": "",
            "alternate_greetings": [],
            "tags": [],
            "creator": "",
            "character_version": "",
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
]
