"""The pipeline stays pure: no framework, network or clock, importable without settings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PIPELINE = Path(__file__).resolve().parents[2] / "pipeline"
MODULES = sorted(f"chat.pipeline.{p.stem}" for p in PIPELINE.glob("*.py") if p.stem != "__init__")
FORBIDDEN_MODULES = ("django", "discord", "redis", "httpx", "aiohttp", "requests", "celery")
CLOCK_READS = re.compile(
    r"datetime\.now\(|datetime\.utcnow\(|date\.today\(|time\.time\(|time\.monotonic\("
)


def test_every_module_imports_without_django_settings_or_forbidden_packages():
    probe = (
        f"import sys\nimport {', '.join(MODULES)}\n"
        f"loaded = sorted(m for m in {FORBIDDEN_MODULES!r} if m in sys.modules)\n"
        "assert not loaded, loaded\n"
    )
    environment = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}

    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=PIPELINE.parents[1],
        env=environment,
        capture_output=True,
        text=True,
        check=False,
    )

    assert len(MODULES) >= 18
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", sorted(PIPELINE.glob("*.py")), ids=lambda path: path.name)
def test_no_module_reads_the_clock(path):
    assert CLOCK_READS.findall(path.read_text()) == []
