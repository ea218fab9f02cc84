"""The import map of docs/architecture.md, checked on the code (issue 25): no circle between project modules (also
through imports inside functions), no import up a layer, `ingest/` importing only itself and `schemas/`, Dagster only
in `pipeline/`, and project imports at module level except the measured exceptions."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# source folder -> the package it is installed as (pyproject.toml's package-dir)
FOLDERS = {"taxbreak": "taxbreak", "ingest": "taxbreak.ingest", "pipeline": "taxbreak.pipeline",
           "schemas": "taxbreak.schemas", "sql": "taxbreak.sql"}
# the layers from the bottom (docs/architecture.md, "The map"); a module imports only its own layer or below
LAYERS = [
    {"taxbreak.schemas", "taxbreak.sql"},
    {"taxbreak.ingest"},
    {"taxbreak.config", "taxbreak.capture"},
    {"taxbreak.engine.rules", "taxbreak.engine.plan"},  # the description of the tables, which store/ reads
    {"taxbreak.store"},
    {"taxbreak.engine"},
    {"taxbreak.features"},
    {"taxbreak.read"},
    {"taxbreak.api", "taxbreak.pipeline"},
    {"taxbreak.cli"},
    {"taxbreak.demo"},
    {"taxbreak"},  # the package's lazy face (``import taxbreak as tb``)
]
# imports inside a function body, each measured or needed: torch for the capture tools (1.4 s at start-up), the
# notebook API loaded only when ``tb.open`` is first used
BODY_IMPORTS_ALLOWED = {"taxbreak.capture", "taxbreak"}


def _modules() -> dict[str, Path]:
    mods = {}
    for folder, pkg in FOLDERS.items():
        for f in sorted((ROOT / folder).rglob("*.py")):
            rel = f.relative_to(ROOT / folder)
            if folder == "taxbreak" and rel.parts[0] == "pipeline":  # the link to pipeline/ (installed layout)
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([pkg, *parts])] = f
    return mods


MODULES = _modules()


def _resolve(name: str) -> str | None:
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


class _Imports(ast.NodeVisitor):
    """The imports of one module, each with whether it sits inside a function body."""

    def __init__(self) -> None:
        self.found: list[tuple[str, bool]] = []
        self.depth = 0

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function  # noqa: N815 - ast.NodeVisitor's names

    def visit_Import(self, node: ast.Import) -> None:  # noqa: N802 - ast.NodeVisitor's name
        self.found += [(a.name, self.depth > 0) for a in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:  # noqa: N802 - ast.NodeVisitor's name
        if node.module and node.level == 0:
            self.found += [(f"{node.module}.{a.name}", self.depth > 0) for a in node.names]


def _imports() -> tuple[dict[str, set[str]], dict[str, set[str]], dict[str, set[str]]]:
    """(module-level project imports, project imports inside functions, every other top-level package imported)."""
    top: dict[str, set[str]] = {m: set() for m in MODULES}
    body: dict[str, set[str]] = {m: set() for m in MODULES}
    external: dict[str, set[str]] = {m: set() for m in MODULES}
    for mod, path in MODULES.items():
        seen = _Imports()
        seen.visit(ast.parse(path.read_text(encoding="utf-8")))
        for name, in_body in seen.found:
            target = _resolve(name) if name.split(".")[0] == "taxbreak" else None
            if target is None:
                external[mod].add(name.split(".")[0])
            elif target != mod:
                (body if in_body else top)[mod].add(target)
    return top, body, external


TOP, BODY, EXTERNAL = _imports()


def _layer(mod: str) -> int:
    best = None
    for i, names in enumerate(LAYERS):
        for name in names:
            if (mod == name or mod.startswith(name + ".")) and (best is None or len(name) > best[1]):
                best = (i, len(name))
    assert best is not None, f"{mod}: in no layer of LAYERS"
    return best[0]


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_map_finds_the_project() -> None:
    assert {"taxbreak.engine.plan", "taxbreak.store.marts", "taxbreak.ingest.kineto", "taxbreak.pipeline.defs.checks",
            "taxbreak.cli.main", "taxbreak.schemas.events"} <= set(MODULES)
    assert "taxbreak.store.marts" in TOP["taxbreak.store.warehouse"]  # an import the map must see


def test_no_import_circle() -> None:
    assert _circles(TOP) == []
    assert _circles({m: TOP[m] | BODY[m] for m in MODULES}) == []  # not even one a function-body import hides


def test_no_import_up_a_layer() -> None:
    # the package root is imported before any of its modules whatever the layer: only its ``__version__`` is read
    up = sorted((m, t) for m in MODULES for t in TOP[m] | BODY[m] if _layer(t) > _layer(m) and t != "taxbreak")
    assert up == []


def test_ingest_imports_only_itself_and_the_schemas() -> None:
    out = sorted((m, t) for m in MODULES if m.startswith("taxbreak.ingest") for t in TOP[m] | BODY[m]
                 if not t.startswith(("taxbreak.ingest", "taxbreak.schemas")))
    assert out == []


def test_only_pipeline_imports_dagster() -> None:
    users = sorted(m for m in MODULES if "dagster" in EXTERNAL[m])
    assert users and all(m.startswith("taxbreak.pipeline") for m in users), users


def test_project_imports_sit_at_module_level() -> None:
    inside = sorted((m, t) for m in MODULES for t in BODY[m]
                    if not any(m == a or m.startswith(a + ".") for a in BODY_IMPORTS_ALLOWED))
    assert inside == []
