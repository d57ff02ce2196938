"""The package's import graph: no cycles, and no import that runs up the layers.

Layers, top to bottom (a module may import its own layer and those below it):

    entrances   cli, any ``__main__`` or ``app`` module (``python -m fedretain.flower``, the
                ``flwr run`` app)
    experiments the run, checkpoints, diagnostics' observers, reports, plots
    flower      Flower's engine, ClientApp, strategy, launch tooling
    recipe      the configuration and the federation built from it
    algorithms | engines | metrics
    core        the Algorithm bundle, local training, optimisers, trees, Task
    data | models | losses
    registry | files | errors
"""

from __future__ import annotations

import ast
from pathlib import Path

import fedretain

LAYERS = {
    "cli": 9,
    "experiments": 8,
    "flower": 7,
    "recipe": 6,
    "algorithms": 5,
    "engines": 5,
    "metrics": 5,
    "continual": 5,
    "privacy": 5,
    "core": 4,
    "data": 3,
    "models": 3,
    "losses": 3,
    "registry": 1,
    "files": 1,
    "errors": 1,
}
ROOT = Path(fedretain.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts).removesuffix(".__init__")] = path
    return out


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules ``name`` imports (any import statement, also inside functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return {m for m in found if m in known and m != name}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[-1] in ("__main__", "app"):
        return 9  # entrances sit on top wherever they live
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


GRAPH = {m: _imports(m, p, set(_modules())) for m, p in _modules().items()}


def test_every_subpackage_has_a_layer():
    unplaced = {m.split(".")[1] for m in GRAPH if len(m.split(".")) > 1 and _layer(m) is None}
    assert not unplaced, f"put {sorted(unplaced)} in LAYERS (and in the layering of DESIGN)"


def test_no_import_runs_up_the_layers():
    up = [
        f"{a} -> {b}"
        for a, outs in GRAPH.items()
        for b in outs
        if _layer(a) is not None and _layer(b) is not None and _layer(b) > _layer(a)
    ]
    assert not up, "imports against the layering:\n" + "\n".join(sorted(up))


def test_no_import_cycle():
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        seen[module] = 1
        for other in sorted(GRAPH[module]):
            if seen.get(other) == 1:
                cycles.append(" -> ".join([*path[path.index(other) :], other]))
            elif other not in seen:
                visit(other, [*path, other])
        seen[module] = 2

    for module in sorted(GRAPH):
        if module not in seen:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_checker_sees_an_upward_import():
    """The graph is read, not assumed: a known edge and a known layer order are found."""
    assert "fedretain.engines.round" in GRAPH["fedretain.engines.sequential"]
    assert _layer("fedretain.experiments.run") > _layer("fedretain.recipe.config")
    assert _layer("fedretain.flower.__main__") == 9
