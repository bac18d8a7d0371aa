"""Model access needs no Django: the worker passes settings in and records results itself."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[3]


def test_model_access_imports_without_django() -> None:
    modules = [
        "base",
        "capabilities",
        "openai_compat",
        "attempts",
        "streaming",
        "turn_completion",
        "reply",
        "tools",
        "tool_arguments",
        "video_transcripts",
        "fake_server",
        "fake_answers",
        "fake_moderation",
        "embeddings",
        "moderation",
        "metering",
        "tls",
    ]
    # Every module of the package: it has no Django-aware part left.
    assert sorted([*modules, "__init__"]) == sorted(
        p.stem for p in (PROJECT_ROOT / "chat" / "llm").glob("*.py")
    )
    imports = "; ".join(f"import chat.llm.{module}" for module in modules)
    check = f"import sys; {imports}; sys.exit('django' in sys.modules)"
    environment = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}

    finished = subprocess.run(
        [sys.executable, "-c", check], cwd=PROJECT_ROOT, env=environment, check=False
    )

    assert finished.returncode == 0
