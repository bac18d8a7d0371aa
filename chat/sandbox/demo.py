"""The demo world `runsandbox` serves: a bot, one guild, four channels, three people.

Ids are fixed (snowflakes from 2024-01-01), so configuration files, bookmarks and tests can
name them across restarts:

    guild     Sandbox Café   DEMO_GUILD_ID
    channels  #general  #poetry  #autonomous  #after-dark   DEMO_CHANNEL_IDS["general"], …
              (#after-dark is marked NSFW: moderation lets sexual and violent replies through
              there, `chat.pipeline.moderation`)
    users     alice  bob  carol                       DEMO_USER_IDS["alice"], …
    roles     Moderators (alice): Manage Messages, Manage Server; Helpers (carol): Manage Messages
    bot       Tomori                                  DEMO_BOT_ID
"""

from __future__ import annotations

import time
from collections.abc import Callable

from chat.pipeline.snowflakes import snowflake_from_ms
from chat.sandbox.state import Sandbox

_DEMO_EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def _demo_id(serial: int) -> int:
    return snowflake_from_ms(_DEMO_EPOCH_MS, increment=serial)


DEMO_BOT_ID = _demo_id(1)
DEMO_GUILD_ID = _demo_id(2)
DEMO_CHANNEL_IDS = {
    "general": _demo_id(10),
    "poetry": _demo_id(11),
    "autonomous": _demo_id(12),
    "after-dark": _demo_id(13),
}
NSFW_CHANNELS = ("after-dark",)
"""Channels Discord would show as age-restricted."""
DEMO_USER_IDS = {"alice": _demo_id(20), "bob": _demo_id(21), "carol": _demo_id(22)}
DEMO_MODERATOR_ROLE_ID = _demo_id(30)
DEMO_MODERATORS = ("alice",)
"""Members holding the Moderators role (Manage Messages, Manage Server): they may run /reset,
/prompt and "Why (not)?"; on the dashboard (Log in with Discord) they are the guild's admins."""
MODERATOR_PERMISSIONS = (1 << 13) | (1 << 5)
DEMO_HELPER_ROLE_ID = _demo_id(31)
DEMO_HELPERS = ("carol",)
"""Members holding the Helpers role (Manage Messages): the guild's moderators on the dashboard.
bob holds no role: the dashboard shows him no guild."""
HELPER_PERMISSIONS = 1 << 13

_CHANNEL_TOPICS = {
    "general": "Talk to the personas here.",
    "poetry": "Verses, drafts and critique.",
    "autonomous": "The planner decides who speaks.",
    "after-dark": "Age-restricted (NSFW): stories may get sexual or violent here.",
}


def demo_sandbox(
    *, token: str = "sandbox-bot-token", clock: Callable[[], float] = time.time
) -> Sandbox:
    """A fresh `Sandbox` holding the demo world (the bot token is `token`)."""
    sandbox = Sandbox(token=token, bot_name="Tomori", bot_user_id=DEMO_BOT_ID, clock=clock)
    sandbox.add_guild("Sandbox Café", guild_id=DEMO_GUILD_ID)
    for name, channel_id in DEMO_CHANNEL_IDS.items():
        sandbox.add_text_channel(
            DEMO_GUILD_ID,
            name,
            channel_id=channel_id,
            topic=_CHANNEL_TOPICS[name],
            nsfw=name in NSFW_CHANNELS,
        )
    moderators = sandbox.add_role(
        DEMO_GUILD_ID,
        "Moderators",
        permissions=MODERATOR_PERMISSIONS,
        role_id=DEMO_MODERATOR_ROLE_ID,
    )
    helpers = sandbox.add_role(
        DEMO_GUILD_ID, "Helpers", permissions=HELPER_PERMISSIONS, role_id=DEMO_HELPER_ROLE_ID
    )
    for name, user_id in DEMO_USER_IDS.items():
        sandbox.add_user(name, user_id=user_id, global_name=name.capitalize())
        roles = [moderators] if name in DEMO_MODERATORS else []
        roles += [helpers] if name in DEMO_HELPERS else []
        sandbox.add_member(DEMO_GUILD_ID, user_id, role_ids=roles)
    return sandbox
