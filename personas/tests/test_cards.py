"""SillyTavern character cards: V1/V2/V3 JSON and PNG in, V2 JSON and PNG out."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image
from PIL.PngImagePlugin import PngInfo

from personas import cards
from personas.models import GuildConfig, Persona

MES_EXAMPLE = (
    "<START>\n{{user}}: Do you like the band?\n{{char}}: I love it.\nMore than {{user}} knows.\n"
    "<START>\n{{user}}: Sing!\n{{char}}: *sings*"
)


def card_v2(**data) -> dict:
    return {
        "spec": "chara_card_v2",
        "spec_version": "2.0",
        "data": {
            "name": "Soyo",
            "description": "{{char}} is a bassist who is polite to {{user}}.",
            "personality": "gentle, calculating",
            "scenario": "After practice at the studio.",
            "first_mes": "Good evening.",
            "mes_example": MES_EXAMPLE,
            **data,
        },
    }


def card_v1(**fields) -> dict:
    """TavernAI's format, which SillyTavern still reads: the fields at the top, no spec."""
    return {
        "name": "Soyo",
        "description": "{{char}} is a bassist who is polite to {{user}}.",
        "personality": "gentle, calculating",
        "scenario": "After practice at the studio.",
        "first_mes": "Good evening, <USER>.",
        "mes_example": MES_EXAMPLE,
        **fields,
    }


def card_v3(**data) -> dict:
    card = card_v2(**data)
    card.update(spec="chara_card_v3", spec_version="3.0")
    card["data"].update(group_only_greetings=[], assets=[], nickname="Soyorin")
    return card


def png_bytes(
    *, chunks: dict[str, str] | None = None, size=(40, 60), color=(200, 80, 120)
) -> bytes:
    info = PngInfo()
    for keyword, text in (chunks or {}).items():
        info.add_text(keyword, text)
    buffer = io.BytesIO()
    Image.new("RGB", size, color).save(buffer, "PNG", pnginfo=info)
    return buffer.getvalue()


def b64(document: dict) -> str:
    return base64.b64encode(json.dumps(document).encode()).decode()


@pytest.fixture
def guild(db) -> GuildConfig:
    return GuildConfig.objects.create(guild_id=1500000000000000001, name="Studio")


@pytest.fixture
def media(settings, tmp_path):
    settings.MEDIA_ROOT = tmp_path / "media"
    return settings.MEDIA_ROOT


def test_description_personality_and_scenario_become_the_system_prompt():
    assert cards.system_prompt_from_card(card_v2()["data"]) == (
        "{char} is a bassist who is polite to {user}.\n\n"
        "{char}'s personality: gentle, calculating\n\n"
        "Scenario: After practice at the studio."
    )
    assert cards.system_prompt_from_card({"name": "x", "description": "Only this."}) == "Only this."


def test_mes_example_blocks_become_user_and_assistant_rows():
    assert cards.sample_dialogue_from_card(MES_EXAMPLE) == [
        {"role": "user", "content": "{user}: Do you like the band?"},
        {"role": "assistant", "content": "{char}: I love it.\nMore than {user} knows."},
        {"role": "user", "content": "{user}: Sing!"},
        {"role": "assistant", "content": "{char}: *sings*"},
    ]
    assert cards.sample_dialogue_from_card("<START>\n<USER>: hi\n<BOT>: hello") == [
        {"role": "user", "content": "{user}: hi"},
        {"role": "assistant", "content": "{char}: hello"},
    ]
    assert cards.sample_dialogue_from_card("no speakers here") == []


@pytest.mark.parametrize("make", [card_v2, card_v3], ids=["v2", "v3"])
def test_a_json_card_becomes_a_new_persona(guild, media, make):
    persona = cards.card_import(
        guild=guild, data=json.dumps(make()).encode(), media_base_url="http://h/media/"
    )
    assert persona.name == "Soyo" and persona.triggers == ["soyo"]
    assert persona.system_prompt.startswith("{char} is a bassist")
    assert len(persona.sample_dialogue) == 4
    assert persona.avatar_url == ""
    assert not media.exists() or not any(media.rglob("*.png"))


def test_a_v2_png_card_becomes_a_persona_with_the_image_as_avatar(guild, media):
    data = png_bytes(chunks={"chara": b64(card_v2())})
    persona = cards.card_import(guild=guild, data=data, media_base_url="http://h/media/")
    assert persona.avatar_url.startswith("http://h/media/avatars/")
    stored = media / persona.avatar_url.removeprefix("http://h/media/")
    with Image.open(stored) as avatar:
        assert avatar.size == (40, 60)
        assert avatar.getpixel((0, 0))[:3] == (200, 80, 120)
        assert "chara" not in avatar.info  # the stored avatar carries no card


def test_a_png_with_both_chunks_is_read_from_ccv3(guild, media):
    data = png_bytes(chunks={"chara": b64(card_v2(name="Old")), "ccv3": b64(card_v3(name="New"))})
    persona = cards.card_import(guild=guild, data=data, media_base_url="http://h/media/")
    assert persona.name == "New"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"hello": "world"}', "This is not a character card"),
        (b'{"name": "Soyo"}', "This is not a character card"),
        (b"GIF89a not a card", "This is not a character card"),
        (json.dumps({"spec": "chara_card_v2", "data": {}}).encode(), "The card has no data.name"),
        (png_bytes(), "This PNG holds no character card"),
        (png_bytes(chunks={"chara": "%%% not base64 %%%"}), "not valid base64"),
        (
            png_bytes(chunks={"chara": base64.b64encode(b"{broken").decode()}),
            "does not hold valid JSON",
        ),
        (b"\x89PNG\r\n\x1a\n" + b"\x00" * 40, "The PNG file is damaged"),
        (b"[" * 200_000 + b"]" * 200_000, "This is not a character card"),
        (
            png_bytes(chunks={"chara": base64.b64encode(b"[" * 200_000).decode()}),
            "does not hold valid JSON",
        ),
    ],
    ids=[
        "not-a-card",
        "a-name-alone",
        "not-json",
        "no-name",
        "png-without-chunk",
        "broken-base64",
        "broken-json",
        "damaged-png",
        "nested-too-deeply",
        "nested-too-deeply-in-png",
    ],
)
def test_bad_files_are_refused_and_nothing_is_created(guild, media, data, message):
    with pytest.raises(cards.CardError, match=message):
        cards.card_import(guild=guild, data=data, media_base_url="http://h/media/")
    assert not Persona.objects.exists()
    assert not media.exists() or not any(media.rglob("*.png"))


def test_a_card_whose_name_is_taken_creates_nothing_and_leaves_no_file(guild, media):
    Persona.objects.create(guild=guild, name="soyo")
    from personas.config_schema import ConfigError

    with pytest.raises(ConfigError):
        cards.card_import(
            guild=guild,
            data=png_bytes(chunks={"chara": b64(card_v2())}),
            media_base_url="http://h/media/",
        )
    assert Persona.objects.count() == 1
    assert not any(media.rglob("*.png"))


def test_an_exported_v2_card_imports_back_to_the_same_persona(guild, media):
    original = cards.card_import(
        guild=guild, data=json.dumps(card_v2()).encode(), media_base_url="http://h/media/"
    )
    card = cards.card_from_persona(original)
    assert (card["spec"], card["spec_version"]) == ("chara_card_v2", "2.0")
    assert card["data"]["extensions"]["personabot"]["delivery_mode"] == "paragraphs"
    assert card["data"]["description"].startswith("{{char}} is a bassist who is polite to {{user}}")
    assert card["data"]["mes_example"].splitlines()[:3] == [
        "<START>",
        "{{user}}: Do you like the band?",
        "{{char}}: I love it.",
    ]

    png = cards.card_png(card, avatar=cards.avatar_image(original))
    data, avatar = cards.card_read(png)
    assert data == card["data"] and avatar is not None
    original.delete()
    again = cards.card_import(guild=guild, data=png, media_base_url="http://h/media/")
    assert again.system_prompt == original.system_prompt
    assert again.sample_dialogue == original.sample_dialogue


@pytest.mark.parametrize("packing", ["json", "png"])
def test_a_v1_card_becomes_a_persona_with_its_first_message(guild, media, packing):
    card = card_v1()
    data = (
        json.dumps(card).encode() if packing == "json" else png_bytes(chunks={"chara": b64(card)})
    )

    persona = cards.card_import(guild=guild, data=data, media_base_url="http://h/media/")

    assert persona.name == "Soyo" and persona.triggers == ["soyo"]
    assert persona.system_prompt == cards.system_prompt_from_card(card_v2()["data"])
    assert persona.sample_dialogue == cards.sample_dialogue_from_card(MES_EXAMPLE)
    assert persona.first_mes == "Good evening, {user}."
    assert persona.alternate_greetings == []
    assert (persona.avatar_url != "") is (packing == "png")


def test_greetings_are_kept_and_exported_back(guild, media):
    card = card_v2(alternate_greetings=["Oh, {{user}}. Again?", "  ", "Welcome back."])

    persona = cards.card_import(
        guild=guild, data=json.dumps(card).encode(), media_base_url="http://h/media/"
    )

    assert persona.first_mes == "Good evening."
    assert persona.alternate_greetings == ["Oh, {user}. Again?", "Welcome back."]
    exported = cards.card_from_persona(persona)["data"]
    assert exported["first_mes"] == "Good evening."
    assert exported["alternate_greetings"] == ["Oh, {{user}}. Again?", "Welcome back."]
