"""The message index's record of a proxy system's messages (who a proxied message speaks as,
who sent it, which original it replaced)."""

from __future__ import annotations

from chat.models import MessageIndex


def proxied_message_record(
    *,
    message_id: int,
    channel_id: int,
    guild_id: int | None,
    webhook_id: int | None,
    member_id: str,
    member_name: str,
    sender_id: int,
    original_id: int | None,
) -> None:
    """Index a proxy system's message: the member it speaks as, the sender behind it (whose
    blocks and privacy apply), and the original it superseded (never answered, never in
    history). Recording it again changes nothing."""
    MessageIndex.objects.update_or_create(
        message_id=message_id,
        defaults={
            "channel_id": channel_id,
            "guild_id": guild_id,
            "author_id": webhook_id,
            "webhook_id": webhook_id,
            "proxy_member_id": member_id,
            "proxy_member_name": member_name[:100],
            "proxy_sender_id": sender_id,
            "proxy_original_id": original_id,
        },
    )
