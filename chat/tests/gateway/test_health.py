"""The worker's monitoring endpoint on its own threads: /readyz without a gateway client,
/healthz following the event loop, /metrics in the text format, anything else 404."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter
from prometheus_client.parser import text_string_to_metric_families

from chat.gateway.health import WorkerHealth, WorkerMonitor


@pytest.fixture
async def monitor():
    registry = CollectorRegistry()
    Counter("personabot_example", "an example series", registry=registry).inc(3)
    monitor = WorkerMonitor(
        WorkerHealth(shard_count=4),
        host="127.0.0.1",
        port=0,
        registry=registry,
        loop_answer_seconds=0.3,
    )
    await monitor.start()
    yield monitor
    await monitor.stop()


async def get(monitor: WorkerMonitor, path: str) -> httpx.Response:
    async with httpx.AsyncClient() as http:
        return await http.get(f"http://127.0.0.1:{monitor.port}{path}")


async def test_a_worker_without_a_gateway_client_is_alive_but_not_ready(monitor):
    ready = await get(monitor, "/readyz")
    assert (ready.status_code, ready.text) == (
        503,
        "not ready: no gateway client: waiting for the shard lease\n",
    )
    alive = await get(monitor, "/healthz")
    assert (alive.status_code, alive.text) == (200, "ok\n")
    assert (await get(monitor, "/other")).status_code == 404


async def test_metrics_hold_the_registry_and_the_workers_gauges(monitor):
    answer = await get(monitor, "/metrics")
    assert answer.status_code == 200
    samples = {
        sample.name: sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }
    assert samples["personabot_example_total"] == 3
    assert (samples["personabot_shards_ready"], samples["personabot_shard_count"]) == (0, 4)
    # No worker serves yet: no queue or pool of its shards to count, no latency known.
    assert "personabot_event_queue_ready" not in samples
    assert "personabot_gateway_latency_seconds" not in samples


async def test_healthz_answers_503_while_the_event_loop_is_stuck(monitor):
    with ThreadPoolExecutor(max_workers=1) as prober:
        answers = prober.submit(_get_blocking, monitor, "/healthz")
        time.sleep(1.5)  # noqa: ASYNC251  (the event loop stuck is what this test is about)
        answer = answers.result()
    assert (answer.status_code, answer.text) == (503, "the event loop does not answer\n")
    assert (await get(monitor, "/healthz")).status_code == 200


def _get_blocking(monitor: WorkerMonitor, path: str) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{monitor.port}{path}")
