"""Services and selectors take keyword-only arguments (STYLE, "One service per use case"): a
call names what it passes, so adding a parameter or reordering two of the same type can never
silently swap them. This walks every public module-level function of the service and selector
modules and fails on any that takes an argument by position; a fixture source that breaks the
rule proves the walk finds it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULES = (
    "chat/services",
    "chat/selectors",
    "dashboard/selectors.py",
    "personas/services.py",
    "personas/selectors.py",
    "personas/case_services.py",
    "accounts/services.py",
    "accounts/selectors.py",
)


def _sources() -> Iterator[Path]:
    for name in MODULES:
        path = ROOT / name
        yield from sorted(path.glob("*.py")) if path.is_dir() else [path]


def positional_parameters(source: str) -> list[str]:
    """``name(parameters)`` of each public module-level function of ``source`` that takes an
    argument by position."""
    found = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if node.name.startswith("_"):
            continue
        positional = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
        if positional or node.args.vararg is not None:
            found.append(f"{node.name}({', '.join(positional)})")
    return found


def test_every_service_and_selector_takes_keyword_only_arguments():
    offenders = [
        f"{path.relative_to(ROOT)}: {signature}"
        for path in _sources()
        for signature in positional_parameters(path.read_text())
    ]
    assert len(list(_sources())) > 40  # the walk reads the modules, not an empty list
    assert offenders == []


def test_the_walk_finds_positional_parameters():
    source = (
        "def turn_save(turn, *, now): ...\n"
        "async def turn_read(turn_id, /): ...\n"
        "def notes_join(*notes): ...\n"
        "def turn_claim(*, turn): ...\n"
        "def _helper(turn): ...\n"
    )
    assert positional_parameters(source) == [
        "turn_save(turn)",
        "turn_read(turn_id)",
        "notes_join()",
    ]
