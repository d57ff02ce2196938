"""The package's import graph: no cycles, and no import that runs up the layers.

Layers, top to bottom (a module may import its own layer and those below it):

    entrances   cli, any ``__main__`` or ``app`` module (``python -m fedretain.flower``, the
                ``flwr run`` app)
    studies     presets, reproduce, sweeps, tuning, the privacy study, compare: many runs
    experiments one run: its loop and results folder, checkpoints, observers, plots
    flower      Flower's engine, ClientApp, strategy, launch tooling
    recipe      the configuration and the federation built from it
    algorithms | engines | metrics
    core        the Algorithm bundle, local training, optimisers, trees, Task
    data | models | losses
    extras      which optional package each feature needs (a one-line error naming its extra)
    registry | files | errors

Cycles are looked for between modules and between packages (``fedretain.<package>``, an
``__init__``'s imports included): importing any module of a package runs its ``__init__``
first, so two packages that import each other form a cycle even where no two of their modules
do.

Registries (:mod:`fedretain.registry`) name no module: a kind's entries are registered by the
modules that add them, when imported, and ``kind("X")`` finds what is imported. So the
registrations must be reachable by imports: each layer that checks or lists components sees
every entry registered at its layer and below, and everything registered anywhere is seen
from the command line (tested in fresh processes below).
"""

from __future__ import annotations

import ast
import functools
import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

import fedretain

ENTRANCE = 10
LAYERS = {
    "cli": ENTRANCE,
    "cli_ray": ENTRANCE,
    "studies": 9,
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
    "extras": 2,
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
        return ENTRANCE  # entrances sit on top wherever they live
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def _package(module: str) -> str:
    """``fedretain.<package>`` of a module (a top-level module and an entrance: their own)."""
    if module.split(".")[-1] in ("__main__", "app"):
        return module
    return ".".join(module.split(".")[:2])


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


def _package_cycles(uses: dict[str, set[str]]) -> list[str]:
    """Every cycle between the packages of ``uses`` (module -> the modules it uses), each with
    one module edge behind each of its package edges."""
    packages: dict[str, set[str]] = {}
    edge: dict[tuple[str, str], str] = {}
    for a, outs in uses.items():
        packages.setdefault(_package(a), set())
        for b in outs:
            if _package(b) != _package(a):
                packages[_package(a)].add(_package(b))
                edge.setdefault((_package(a), _package(b)), f"{a} -> {b}")
    cycles = []
    for start in sorted(packages):
        path, todo = [start], [iter(sorted(packages[start]))]
        while todo:  # every simple path from start through packages sorted after it
            nxt = next(todo[-1], None)
            if nxt is None:
                path.pop()
                todo.pop()
            elif nxt == start:
                found = [*path, start]
                why = "; ".join(edge[e] for e in itertools.pairwise(found))
                cycles.append(f"{' -> '.join(found)}  ({why})")
            elif nxt > start and nxt not in path:
                path.append(nxt)
                todo.append(iter(sorted(packages.get(nxt, ()))))
    return cycles


def test_no_cycle_between_packages():
    cycles = _package_cycles(GRAPH)
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def test_the_checker_sees_an_upward_import():
    """The graph is read, not assumed: a known edge and a known layer order are found."""
    assert "fedretain.engines.round" in GRAPH["fedretain.engines.sequential"]
    assert _layer("fedretain.experiments.run") > _layer("fedretain.recipe.config")
    assert _layer("fedretain.flower.__main__") == ENTRANCE
    assert _layer("fedretain.studies.sweep") > _layer("fedretain.experiments.run")
    # the aggregators read the participation models' registry (bernoulli's defaults)
    assert "fedretain.engines.schedule" in GRAPH["fedretain.algorithms.aggregators"]
    # the config's validation imports the packages registering the kinds it checks
    assert "fedretain.data.datasets" in GRAPH["fedretain.recipe.config"]
    # a cycle through two packages' __init__ modules, where no two modules form one
    two = {
        "fedretain.a": {"fedretain.b.y"},
        "fedretain.b.y": {"fedretain.a.x"},
        "fedretain.a.x": set(),
    }
    assert _package_cycles(two) == [
        "fedretain.a -> fedretain.b -> fedretain.a  "
        "(fedretain.a -> fedretain.b.y; fedretain.b.y -> fedretain.a.x)"
    ]


# Prints every (kind, name, registering module) once the named modules are imported; "cli"
# stands for the command line's components() (every layer's registrations).
_ENTRIES = """
import importlib, json, sys
for name in sys.argv[1:]:
    if name == "cli":
        importlib.import_module("fedretain.cli").components()
    else:
        importlib.import_module(name)
from fedretain.registry import kind, kinds
print(json.dumps([[k, n, e.module] for k in kinds() for n, e in kind(k).items()]))
"""
# kinds that no config chooses from, with the module that must see all their entries
OWN_ENTRANCE = {"preset": "fedretain.studies.presets"}


def _registered(*modules: str) -> set[tuple[str, str, str]]:
    """Every registry entry in a fresh process that imported ``modules``."""
    done = subprocess.run(
        [sys.executable, "-c", _ENTRIES, *modules], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {tuple(e) for e in json.loads(done.stdout.splitlines()[-1])}


@functools.cache
def _everything() -> set[tuple[str, str, str]]:
    """The entries registered by importing every module of the package."""
    return _registered(*(m for m in sorted(GRAPH) if m.split(".")[-1] != "__main__"))


def _missing(expected: set, seen: set) -> str:
    return "\n".join(f"{k} '{n}' (registered by {m})" for k, n, m in sorted(expected - seen))


def test_every_registration_is_reachable_from_the_command_line():
    """Each registry entry anywhere in the package is seen where its kind is used: a config's
    kinds from the command line, the presets from the presets' package. A module that
    registers a component and is imported by no one fails here, naming the module."""
    everything = _everything()
    assert len({k for k, _, _ in everything}) >= 16 and len(everything) > 100
    config_kinds = {(k, n, m) for k, n, m in everything if k not in OWN_ENTRANCE}
    missing = _missing(config_kinds, _registered("cli"))
    assert not missing, "not reachable from `fedretain` (import it where its kind is):\n" + missing
    for kind_name, entrance in OWN_ENTRANCE.items():
        own = {e for e in everything if e[0] == kind_name}
        assert own, kind_name
        missing = _missing(own, _registered(entrance))
        assert not missing, f"not reachable from {entrance}:\n" + missing


@pytest.mark.parametrize("checker", ["fedretain.recipe.config", "fedretain.experiments.run"])
def test_each_layer_sees_every_registration_at_and_below_it(checker):
    """The configuration's checks (recipe) see every algorithm, model, engine... registered
    in the layers below it, the run's also Flower's engine and its own diagnostics and
    trackers, whatever else is imported: no check depends on the order of imports."""
    expected = {
        (k, n, m)
        for k, n, m in _everything()
        if k not in OWN_ENTRANCE and _layer(m) is not None and _layer(m) <= _layer(checker)
    }
    seen = _registered(checker)
    assert len(expected) > 50
    missing = _missing(expected, seen)
    assert not missing, f"{checker} does not see (import the modules in its layer):\n" + missing
    if checker == "fedretain.recipe.config":  # the run's kinds and entries are not its
        assert not {k for k, _, _ in seen} & {"diagnostic", "tracker"}
        assert ("engine", "flower", "fedretain.flower") not in seen
