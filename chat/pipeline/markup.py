"""Discord markup to prompt text, with no raw snowflake left behind.

Message text carries ids in several shapes: mentions (``<@id>``, ``<@&id>``, ``<#id>``), custom
emoji (``<:name:id>``), command mentions (``</name:id>``), message links, and plain numbers people
paste. The model gets names (``@Alice``, ``#general``, ``:wave:``, ``/roll``) or a neutral
placeholder, so no run of 17 or more digits ever reaches a prompt (`SNOWFLAKE_PATTERN`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Set as AbstractSet

from chat.pipeline.types import NameDirectory

SNOWFLAKE_PATTERN = re.compile(r"\d{17,}")
"""Any run of 17 or more digits, even glued to letters (``user1234…``)."""
SNOWFLAKE_PLACEHOLDER = "[id]"
HIDDEN_USER_NAME = "someone"

_DISCORD_MARKUP = re.compile(
    # The lookahead lets the engine skip every position that cannot start markup (twice as fast
    # on ordinary chat text, which is most of what passes through here).
    r"(?=[<h\d])(?:"
    r"<(?:@!?(?P<user>\d+)|@&(?P<role>\d+)|#(?P<channel>\d+)|a?:(?P<emoji>\w+):\d+"
    r"|/(?P<command>[^<>:]+):\d+)>"
    r"|(?P<link>https?://(?:[\w-]+\.)?discord(?:app)?\.com/channels/(?:@me|\d+)(?:/\d+)+)"
    r"|(?P<snowflake>\d{17,}))"
)


def scrub_snowflakes(text: str) -> str:
    """Replace every raw snowflake in ``text`` with a placeholder (for names and filenames)."""
    return SNOWFLAKE_PATTERN.sub(SNOWFLAKE_PLACEHOLDER, text)


@functools.lru_cache(maxsize=1024)
def markup_free(text: str) -> bool:
    """Whether ``text`` holds no Discord markup and no raw snowflake (`render_markup` would
    return it as it is). Remembered: meant for configured text (prompts, notes), which every
    turn renders again."""
    return _DISCORD_MARKUP.search(text) is None


def render_markup(text: str, names: NameDirectory, hidden_user_ids: AbstractSet[int]) -> str:
    """Render Discord markup in ``text`` as names, in one pass.

    Args:
        text: Message text as Discord stores it.
        names: Display names for users, channels and roles; missing ids become placeholders
            (``@unknown-user``, ``#unknown-channel``, ``@unknown-role``).
        hidden_user_ids: Users who must never appear in a prompt (full privacy): a mention of
            one renders as ``@someone``.

    Returns:
        The text with mentions, custom emoji and command mentions as names, Discord message and
        channel links as ``[Discord link]`` (a link's target may be outside the window, so it
        gets no ``ref_N``), and any other raw snowflake as ``[id]``. Inserted names are scrubbed
        too.
    """

    if _DISCORD_MARKUP.search(text) is None:  # most text: nothing to render, no callback made
        return text

    def replace(match: re.Match[str]) -> str:
        kind = match.lastgroup
        value = match[kind or 0]
        if kind == "user":
            user_id = int(value)
            if user_id in hidden_user_ids:
                return f"@{HIDDEN_USER_NAME}"
            return f"@{scrub_snowflakes(names.users.get(user_id, 'unknown-user'))}"
        if kind == "role":
            return f"@{scrub_snowflakes(names.roles.get(int(value), 'unknown-role'))}"
        if kind == "channel":
            return f"#{scrub_snowflakes(names.channels.get(int(value), 'unknown-channel'))}"
        if kind == "emoji":
            return f":{value}:"
        if kind == "command":
            return f"/{value}"
        if kind == "link":
            return "[Discord link]"
        return SNOWFLAKE_PLACEHOLDER

    return _DISCORD_MARKUP.sub(replace, text)
