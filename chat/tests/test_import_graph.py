"""The code's imports run one way (README, "Layout"): entry points → gateway → loop → services
→ selectors, ports, windows, llm, models → pipeline. This walks every module's imports (those
inside functions and ``TYPE_CHECKING`` blocks too, relative ones resolved) and fails on any
edge against that flow, on any import of ``discord`` outside ``chat/gateway/``, and on any
import of the worker's composition root but ``runbot``'s. A fixture module that breaks the
rules (``import_graph_fixture.py``, in the tests tree the real walk leaves out) proves the
walk fails on it."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("botproject", "chat", "personas", "accounts", "dashboard")

# The flow, lowest first: a module may import modules of its own level or below.
LAYERS: dict[str, int] = {
    "chat.pipeline": 0,
    "chat.llm": 1,
    "chat.models": 1,
    "chat.models_memory": 1,
    "chat.models_persona_tests": 1,
    "chat.models_spend": 1,
    "chat.fields": 1,
    "chat.codec": 1,
    "chat.caches": 1,
    "chat.db_connections": 1,
    "chat.migrations": 1,
    "chat.ports": 1,
    "chat.windows": 1,
    "chat.shards": 1,
    "chat.metrics": 1,
    "chat.selectors": 1,
    "chat.admin": 1,
    "chat.apps": 1,
    "personas": 1,
    "botproject.env": 1,
    "botproject.settings": 1,
    "botproject.settings_test": 1,
    "botproject.live_updates": 1,
    "botproject.failures": 1,
    "accounts.models": 1,
    "accounts.roles": 1,
    "accounts.selectors": 1,
    "accounts.migrations": 1,
    "accounts.apps": 1,
    "chat.services": 2,
    "chat.why": 2,
    "chat.leases": 2,
    "chat.heartbeats": 2,
    "personas.services": 2,
    "personas.case_services": 2,
    "personas.cards": 2,
    "accounts.services": 2,
    "accounts.discord_api": 2,
    "chat.loop": 3,
    "chat.gateway": 4,
    "chat.worker": 5,
    "chat.tasks": 5,
    "chat.runtime": 5,
    "chat.sandbox": 5,
    "chat.management": 5,
    "personas.management": 5,
    "dashboard": 5,
    "accounts": 5,
    "botproject.celery": 5,
    "botproject.celery_metrics": 5,
    "botproject.urls": 5,
    "botproject.asgi": 5,
    "botproject.wsgi": 5,
}

# Edges the levels allow but the design does not.
FORBIDDEN: list[tuple[str, str, str]] = [
    ("chat.llm", "django", "model access needs no Django: settings come in as arguments"),
    ("chat.llm", "chat.models", "model access needs no Django: the services record turns"),
    ("chat.llm", "chat.models_memory", "model access needs no Django"),
    ("chat.llm", "chat.models_spend", "model access needs no Django"),
    ("chat.llm", "chat.selectors", "model access needs no Django"),
    ("chat.llm", "personas", "model access needs no Django"),
    ("chat.metrics", "django", "the model client counts its calls there: no Django"),
    ("chat.metrics", "chat", "the series are defined alone; the places that count import them"),
    ("personas", "chat", "configuration does not depend on the bot"),
    ("dashboard", "chat.loop", "the dashboard talks to the worker only through the layer"),
    ("dashboard", "chat.gateway", "the dashboard talks to the worker only through the layer"),
    ("dashboard", "chat.worker", "the dashboard talks to the worker only through the layer"),
    ("dashboard", "chat.sandbox", "the dashboard reaches the sandbox through chat.runtime's port"),
    ("chat.tasks", "chat.worker", "Celery composes through chat.runtime, not the worker"),
]

# Modules only some importers may import: (module, the importers allowed, why).
ONLY: list[tuple[str, tuple[str, ...], str]] = [
    ("discord", ("chat.gateway",), "only chat/gateway/ speaks discord.py"),
    (
        "chat.worker",
        ("chat.worker", "chat.management.commands.runbot", "chat.sandbox.harness"),
        "the worker's composition root is runbot's alone (and the harness's, which builds it the "
        "same way for the end-to-end tests and benchmarks); shared parts live in chat.runtime",
    ),
]

# Deliberate exceptions to FORBIDDEN: (importer, imported module, why it is allowed).
ALLOWED: list[tuple[str, str, str]] = [
    (
        "personas.config_schema",
        "chat.pipeline.lorebook",
        "the schema refuses a lorebook key the activation could not read: one parser for "
        "/pattern/flags keys, in the pure pipeline",
    ),
    (
        "personas.config_schema",
        "chat.pipeline.moderation",
        "the schema refuses a moderation category a guild may never allow: one list of "
        "categories and one rule, the pure policy's",
    ),
    (
        "personas",
        "chat.pipeline.types",
        "privacy levels and block kinds are one vocabulary, the pure pipeline's enums; the "
        "models store their values and label them",
    ),
]


def _allowed(name: str, imported: str) -> bool:
    return any(_within(name, src) and _within(imported, mod) for src, mod, _ in ALLOWED)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> Iterator[tuple[str, Path]]:
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "tests" in path.parts:
                continue
            yield _module_name(path), path


def _is_module(name: str) -> bool:
    base = ROOT.joinpath(*name.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _imports(path: Path, name: str) -> Iterator[tuple[int, str]]:
    """Every module that ``path`` (the module ``name``) imports: ``from chat import selectors``
    counts as ``chat.selectors``, and ``from ..loop import scheduler`` in ``chat.services.turns``
    as ``chat.loop.scheduler``."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                candidate = f"{module}.{alias.name}" if module else alias.name
                yield node.lineno, candidate if _is_module(candidate) else module


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _level(name: str) -> int | None:
    matches = [prefix for prefix in LAYERS if _within(name, prefix)]
    return LAYERS[max(matches, key=len)] if matches else None


def test_every_module_has_a_place_in_the_flow():
    unplaced = [name for name, _ in _sources() if name not in PACKAGES and _level(name) is None]
    assert unplaced == []


def _violations(sources: Iterable[tuple[str, Path]]) -> list[str]:
    """Every import of ``sources`` (module name, file) that breaks a rule, one line each."""
    against = []
    for name, path in sources:
        level = _level(name)
        for line, imported in _imports(path, name):
            where = f"{path.name}:{line}: {name} → {imported}"
            target = _level(imported)
            if level is not None and target is not None and target > level:
                against.append(f"{where} (against the flow)")
            for source, banned, why in FORBIDDEN:
                if (
                    _within(name, source)
                    and _within(imported, banned)
                    and not _allowed(name, imported)
                ):
                    against.append(f"{where} ({why})")
            for module, importers, why in ONLY:
                if _within(imported, module) and not any(_within(name, i) for i in importers):
                    against.append(f"{where} ({why})")
    return against


def test_no_import_runs_against_the_flow():
    assert _violations(_sources()) == []


FIXTURE = Path(__file__).with_name("import_graph_fixture.py")


@pytest.mark.parametrize(
    ("pretends_to_be", "broken"),
    [
        ("dashboard.fixture", "chat.gateway.rest (the dashboard talks to the worker only"),
        ("dashboard.fixture", "chat.sandbox.control (the dashboard reaches the sandbox"),
        ("dashboard.fixture", "chat.loop.scheduler (the dashboard talks to the worker only"),
        ("dashboard.fixture", "discord (only chat/gateway/ speaks discord.py)"),
        ("chat.tasks", "chat.worker (Celery composes through chat.runtime"),
        ("chat.runtime", "chat.worker (the worker's composition root is runbot's alone"),
        ("chat.services.fixture", "chat.loop.intake (against the flow)"),
        ("chat.pipeline.fixture", "chat.selectors (against the flow)"),
    ],
)
def test_the_walker_fails_on_a_module_that_breaks_a_rule(pretends_to_be, broken):
    found = _violations([(pretends_to_be, FIXTURE)])
    assert any(broken in line for line in found), found


def test_the_fixture_is_left_out_of_the_real_walk():
    assert FIXTURE not in {path for _, path in _sources()}


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from chat import selectors", "chat.selectors"),
        ("from chat.services.event_queue import OwnIdentity", "chat.services.event_queue"),
        ("import chat.services", "chat.services"),
        # Relative imports, read from the module chat.services.probe:
        ("from .turns import turn_run", "chat.services.turns"),
        ("from . import turns", "chat.services.turns"),
        ("from ..loop import scheduler", "chat.loop.scheduler"),
        ("from .. import selectors", "chat.selectors"),
    ],
)
def test_the_walker_resolves_each_import_form(tmp_path, source, expected):
    module = tmp_path / "probe.py"
    module.write_text(source + "\n")
    assert [name for _, name in _imports(module, "chat.services.probe")] == [expected]


def test_the_walker_fails_on_an_upward_import(tmp_path):
    module = tmp_path / "probe.py"
    module.write_text("from chat.loop.scheduler import Scheduler\n")

    assert _violations([("chat.services.probe", module)]) != []
    assert _violations([("chat.worker", module)]) == []
