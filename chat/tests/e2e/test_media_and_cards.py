"""What the personas see of media and cards, through the real worker on the sandbox: an image
posted again is one picture (its bytes' hash, not its upload's URL, is its identity); a dice
bot's shared rolls are cards, its hidden rolls and diagnostics never reach a prompt; a
minimal-verbosity notice gets its memory's current text back."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from chat.models import Memory
from chat.sandbox.demo import DEMO_BOT_ID, DEMO_GUILD_ID
from chat.sandbox.records import Upload
from chat.tests.e2e.conftest import ALICE, BOB, GENERAL, eventually, image_parts, prompt_text

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


async def test_an_image_posted_again_counts_once_toward_the_image_limit(world):
    # The demo personas' model (gpt-4o-mini) takes images: the newest three messages that
    # carry a new picture show it. The cat is posted twice, each upload with its own URL.
    await world.start_worker()
    cat, dog, bird = PNG + b"cat", PNG + b"dog", PNG + b"bird"
    posted = [
        world.say("a bird", attachments=[Upload("bird.png", bird, "image/png")]),
        world.say("my cat", attachments=[Upload("cat.png", cat, "image/png")]),
        world.say("a dog", attachments=[Upload("dog.png", dog, "image/png")]),
        world.say("my cat again", attachments=[Upload("cat-again.png", cat, "image/png")]),
    ]
    first_cat, second_cat = posted[1]["attachments"][0]["url"], posted[3]["attachments"][0]["url"]
    assert first_cat.split("?")[0] != second_cat.split("?")[0]
    world.say("tomori, which one do you like?", author=BOB)
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.chat_bodies
    bird_url, dog_url = posted[0]["attachments"][0]["url"], posted[2]["attachments"][0]["url"]
    assert [part["image_url"]["url"] for part in image_parts(body)] == [
        bird_url,
        dog_url,
        second_cat,
    ]
    text = prompt_text(body)
    assert "omitted due to rendered-image limit" not in text
    assert "[System: 1 image(s) omitted here; shown again later]" in text


async def test_hidden_dice_rolls_and_diagnostic_cards_never_reach_the_prompt(world):
    sandbox = world.sandbox.sandbox
    dice_bot = sandbox.add_user("DiceBot", bot=True)
    sandbox.add_member(DEMO_GUILD_ID, dice_bot)
    await world.start_worker()
    world.say("rolling for initiative")
    world.say("", author=dice_bot, embeds=[{"title": "🎲 Alice rolls", "description": "1d20 → 17"}])
    world.say("", author=dice_bot, embeds=[{"title": "Hidden roll", "description": "1d20 → 3"}])
    diagnostic = world.say(
        "",
        author=dice_bot,
        embeds=[{"title": "Debug", "fields": [{"name": "latency", "value": "20 ms"}]}],
    )
    world.say("what does that mean?", author=ALICE, reply_to=int(diagnostic["id"]))
    world.say("tomori, who goes first?", author=BOB)
    await eventually(lambda: world.bot_messages(GENERAL))
    await world.settle()

    [body] = world.llm.chat_bodies
    text = prompt_text(body)
    assert "[Embed: 🎲 Alice rolls — 1d20 → 17]" in text
    assert "→ 3" not in text and "Hidden roll" not in text
    assert "latency" not in text and "Debug" not in text
    # The reply to the diagnostic card quotes nothing and points at nothing.
    [reply] = [line for line in text.splitlines() if "what does that mean?" in line]
    assert "replying to" not in reply


@pytest.mark.parametrize("forgotten", [False, True])
async def test_a_minimal_notice_shows_its_memorys_current_text(world, forgotten):
    memory = await sync_to_async(Memory.objects.create)(
        guild_id=DEMO_GUILD_ID,
        kind=Memory.Kind.PERSONAL,
        user_id=ALICE,
        subject_name="Alice",
        text="Alice's cat is called Miso",
        source=Memory.Source.TOOL,
    )
    await world.start_worker()
    world.say("my cat is called Miso")
    # This bot's card at minimal verbosity: a title, and the memory it confirms in the footer.
    world.sandbox.sandbox.create_message(
        GENERAL,
        author_id=DEMO_BOT_ID,
        embeds=[{"title": "Memory saved", "footer": {"text": f"memory #{memory.id}"}}],
    )
    if forgotten:
        await sync_to_async(memory.delete)()
    world.say("tomori, what is my cat called?", author=BOB)
    await eventually(lambda: len(world.bot_messages(GENERAL)) == 2)  # the card, the reply
    await world.settle()

    [body] = world.llm.chat_bodies
    text = prompt_text(body)
    notice = [line for line in text.splitlines() if "Memory saved" in line]
    if forgotten:
        assert notice == ["[System: Memory saved]"]
    else:
        assert notice == ["[System: Memory saved — About Alice: Alice's cat is called Miso]"]
    assert "memory #" not in text
