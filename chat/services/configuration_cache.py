"""The worker's channel configurations, kept between passes and read anew only when they changed.

Every pass of a channel loop (and every batch of a reactive one) needs the channel's
configuration (`chat.selectors.channel_configuration`: three or four queries and the persona
rows built into objects). `ChannelConfigurations` keeps what it read per channel with the
`personas.config_version` stamps it was read under; while those stamps stand (one primary-key
statement), the kept configuration is exactly what a fresh read would return, so a change still
applies from the next pass or batch. Blocks are kept with their expiries and judged at each
read's instant: a block that lapses stops applying without any write.

The stamps are read before the rows they cover: a change committed while a configuration is
being read moves a stamp already read, and the next read reads anew.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Mapping

from chat import selectors
from chat.caches import BoundedCache
from chat.selectors import ChannelConfiguration, ConfiguredChannel
from personas.config_version import DM_VERSION_KEY, config_versions

CONFIGURATIONS_KEPT = 4096
"""Channels whose configuration a worker keeps (the least recently read beyond go)."""

_ChannelKey = tuple[int, int | None]


class _Kept:
    __slots__ = ("configured", "stamps")

    def __init__(self, configured: ConfiguredChannel | None, stamps: Mapping[int, str]) -> None:
        self.configured = configured
        self.stamps = dict(stamps)


class ChannelConfigurations:
    """`chat.selectors.channel_configuration`, answered from what was read before while the
    configuration's stamps stand; at most ``capacity`` channels kept (least recently read go
    first). Safe to call from several threads."""

    def __init__(
        self,
        *,
        capacity: int = CONFIGURATIONS_KEPT,
        read_stamps: Callable[[set[int]], Mapping[int, str]] = config_versions,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"ChannelConfigurations capacity must be at least 1, not {capacity}")
        self._read_stamps = read_stamps
        self._kept: BoundedCache[_ChannelKey, _Kept] = BoundedCache(capacity)
        self._lock = threading.Lock()
        self.reads = 0
        """Configurations read from the database (not answered from what was kept)."""

    def __len__(self) -> int:
        return len(self._kept)

    def __call__(
        self, *, channel_id: int, guild_id: int | None, now: dt.datetime
    ) -> ChannelConfiguration | None:
        """The channel's configuration at ``now``, as `chat.selectors.channel_configuration`
        returns it; None when the bot does not serve that guild."""
        key = (channel_id, guild_id)
        with self._lock:
            kept = self._kept.peek(key)
        wanted = {DM_VERSION_KEY if guild_id is None else guild_id}
        if kept is not None:
            wanted |= kept.stamps.keys()
        while True:
            stamps = self._read_stamps(wanted)
            if kept is not None and all(stamps[k] == s for k, s in kept.stamps.items()):
                with self._lock:
                    self._kept.get(key)  # the most recently used now
                return kept.configured.at(now) if kept.configured is not None else None
            configured = selectors.configured_channel(channel_id=channel_id, guild_id=guild_id)
            self.reads += 1
            covered = configured.version_keys if configured is not None else wanted
            if covered <= stamps.keys():
                break
            # It is read under a stamp not read before it (a DM persona's guild): read that
            # stamp, then the configuration again under it.
            wanted |= covered
            kept = None
        self._keep(key, _Kept(configured, {k: stamps[k] for k in covered}))
        return configured.at(now) if configured is not None else None

    def _keep(self, key: _ChannelKey, kept: _Kept) -> None:
        with self._lock:
            self._kept.put(key, kept)
