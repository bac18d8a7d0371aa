from __future__ import annotations

import asyncio
import dataclasses
import faulthandler
import logging
import signal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.gateway.health import WorkerHealth, WorkerMonitor
from chat.gateway.limits import SessionStartLimitReached
from chat.gateway.stops import GatewayStop
from chat.runtime import (
    llm_client_from_settings,
    turn_capabilities_from_settings,
    vision_client_from_settings,
)
from chat.worker import (
    WorkerConfig,
    freeze_startup_heap,
    proxy_resolver_from_settings,
    run_worker,
)

logger = logging.getLogger(__name__)


def _shard_ids(value: str) -> list[int]:
    try:
        return [int(part) for part in value.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--shard-ids takes comma-separated integers, got {value!r}") from None


class Command(BaseCommand):
    help = (
        "Run the bot worker: the Discord gateway, ingress, scheduler and persona turns. "
        "SIGTERM or Ctrl-C closes it cleanly."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--shard-ids",
            type=_shard_ids,
            default=None,
            help="shards this worker runs, e.g. 0,1 (with --shard-count)",
        )
        parser.add_argument(
            "--shard-count", type=int, default=None, help="total shards across all workers"
        )
        parser.add_argument(
            "--standby-shard-ids",
            type=_shard_ids,
            default=None,
            help="another worker's shards this worker stands by for, e.g. 2,3: once that worker "
            "holds them, it takes them over (all together) when their lease lapses",
        )
        parser.add_argument(
            "--lease-seconds",
            type=float,
            default=15.0,
            help="how long a shard lease lasts without renewal; a standby worker takes over "
            "a shard this long after its holder stopped (default 15)",
        )
        parser.add_argument(
            "--max-concurrency",
            type=int,
            default=None,
            help="IDENTIFYs Discord lets start at once (default: as GET /gateway/bot says)",
        )
        parser.add_argument(
            "--no-shared-limits",
            action="store_true",
            help="pace IDENTIFYs and REST requests in this process alone, not through Redis "
            "with the bot's other workers (one worker, or a REST proxy in front of Discord)",
        )
        parser.add_argument(
            "--step-delay",
            type=float,
            default=2.5,
            help="seconds between autonomous planner steps (default 2.5)",
        )

    def handle(
        self,
        *args,
        shard_ids,
        shard_count,
        standby_shard_ids,
        step_delay,
        lease_seconds,
        max_concurrency,
        no_shared_limits,
        **options,
    ) -> None:
        if not settings.DISCORD_TOKEN:
            raise CommandError("DISCORD_TOKEN is not set: the worker cannot log in")
        if shard_ids is not None and shard_count is None:
            raise CommandError("--shard-ids needs --shard-count")
        if lease_seconds < 1:
            raise CommandError("--lease-seconds must be at least 1")
        if shard_count is not None and shard_ids and max(shard_ids) >= shard_count:
            raise CommandError("--shard-ids must be below --shard-count")
        if max_concurrency is not None and max_concurrency < 1:
            raise CommandError("--max-concurrency must be at least 1")
        if standby_shard_ids is not None:
            if not standby_shard_ids or not shard_ids or shard_count is None:
                raise CommandError("--standby-shard-ids needs --shard-ids and --shard-count")
            if max(standby_shard_ids) >= shard_count:
                raise CommandError("--standby-shard-ids must be below --shard-count")
            if set(standby_shard_ids) & set(shard_ids):
                raise CommandError("--standby-shard-ids must not repeat --shard-ids")
        config = WorkerConfig(
            token=settings.DISCORD_TOKEN,
            api_base=settings.DISCORD_API_BASE,
            gateway_url=settings.DISCORD_GATEWAY_URL or None,
            shard_ids=shard_ids,
            shard_count=shard_count,
            step_delay=step_delay,
            lease_seconds=lease_seconds,
            max_concurrency=max_concurrency,
            shared_limits=not no_shared_limits,
        )
        configs = [config]
        if standby_shard_ids:
            configs.append(dataclasses.replace(config, shard_ids=standby_shard_ids))
        asyncio.run(self._run(configs))

    async def _run(self, configs: list[WorkerConfig]) -> None:
        """Run a worker per config (its own shards, then the shards it stands by for), in one
        process, until SIGTERM or Ctrl-C."""
        # `kill -USR1 <pid>` prints every thread's stack to stderr: a hung worker explains itself.
        faulthandler.register(signal.SIGUSR1, all_threads=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        llm = llm_client_from_settings()
        vision_client = vision_client_from_settings()
        capabilities = turn_capabilities_from_settings(vision_client=vision_client or llm)
        proxies = proxy_resolver_from_settings()
        health = WorkerHealth(shard_count=configs[0].shard_count)
        monitor = await self._monitor(health)
        freeze_startup_heap()
        try:
            await asyncio.gather(
                *(
                    self._worker(
                        config,
                        stop=stop,
                        standby=n > 0,
                        llm=llm,
                        capabilities=capabilities,
                        proxies=proxies,
                        health=health,
                    )
                    for n, config in enumerate(configs)
                )
            )
        except (SessionStartLimitReached, GatewayStop) as error:
            raise CommandError(str(error)) from None
        finally:
            if monitor is not None:
                await monitor.stop()
            await llm.aclose()
            if proxies is not None:
                await proxies.aclose()
            if vision_client is not None:
                await vision_client.aclose()
            await capabilities.aclose()
        self.stdout.write("worker stopped")

    @staticmethod
    async def _monitor(health: WorkerHealth) -> WorkerMonitor | None:
        """``/metrics``, ``/healthz`` and ``/readyz`` on ``WORKER_METRICS_PORT`` (None: off)."""
        if settings.WORKER_METRICS_PORT is None:
            return None
        monitor = WorkerMonitor(
            health, host=settings.WORKER_METRICS_HOST, port=settings.WORKER_METRICS_PORT
        )
        try:
            port = await monitor.start()
        except OSError as error:
            raise CommandError(
                f"WORKER_METRICS_PORT: cannot listen on "
                f"{settings.WORKER_METRICS_HOST}:{settings.WORKER_METRICS_PORT}: {error}"
            ) from None
        logger.info(
            "metrics and health checks on http://%s:%s/metrics (/healthz, /readyz)",
            settings.WORKER_METRICS_HOST,
            port,
        )
        return monitor

    @staticmethod
    async def _worker(config: WorkerConfig, *, stop: asyncio.Event, standby: bool, **parts):
        """One worker. Shards it stands by for are another worker's own: it waits until that
        worker holds them (however slowly it starts), then takes them over when they lapse."""
        await run_worker(config, stop=stop, neighbour=standby, **parts)
