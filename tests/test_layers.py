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
    extras      which optional package each feature needs (a one-line error naming its extra)
    registry | files | errors

Besides import statements, a call ``kind("X")`` (:func:`fedretain.registry.kind`, a string
literal) imports the modules that register kind X's entries (``registry.PROVIDERS``): the
calling module depends on each of them, and these lookups obey the layers as imports do.
Cycles are looked for between modules and between packages (``fedretain.<package>``, an
``__init__``'s imports included): importing any module of a package runs its ``__init__``
first, so two packages that import each other form a cycle even where no two of their modules
do. A package looking up its own kind is how a registry avoids a cycle at import time: such a
lookup counts for the packages, not between its modules.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import fedretain
from fedretain.registry import PROVIDERS

LAYERS = {
    "cli": 9,
    "cli_ray": 9,
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


def _lookups(name: str, path: Path, known: set[str]) -> set[str]:
    """The provider modules of every kind ``name`` looks up with ``kind("X")``; a lookup of a
    kind held in a variable (``kind(comp.kind)``) may be any kind: it counts as all of them."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and node.args):
            continue
        func, arg = node.func, node.args[0]
        named = isinstance(func, ast.Name) and func.id == "kind"
        named |= isinstance(func, ast.Attribute) and func.attr == "kind"
        if not named:
            continue
        if isinstance(arg, ast.Constant):
            found |= set(PROVIDERS.get(arg.value, ()))
        else:
            found |= {m for ms in PROVIDERS.values() for m in ms}
    return {m for m in found if m in known and m != name}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[-1] in ("__main__", "app"):
        return 9  # entrances sit on top wherever they live
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def _package(module: str) -> str:
    """``fedretain.<package>`` of a module (a top-level module and an entrance: their own)."""
    if module.split(".")[-1] in ("__main__", "app"):
        return module
    return ".".join(module.split(".")[:2])


# Lookups that run up the layers, known and not yet removed: validating a config checks every
# component's name and options against its kind's registry, and three kinds have providers
# above recipe (engine: the Flower engine registers itself from flower; diagnostic and
# tracker: their registries and entries live in experiments). They are imports made by
# kind() at validation time, not at module load. Removing one means checking those kinds in
# the layer that owns them; the test fails when one is removed (shrink this set) or another
# appears.
KNOWN_UP_LOOKUPS = {
    ("fedretain.recipe.config", "fedretain.flower"),
    ("fedretain.recipe.config", "fedretain.experiments.diagnostics"),
    ("fedretain.recipe.config", "fedretain.experiments.generator_quality"),
    ("fedretain.recipe.config", "fedretain.experiments.tracking"),
}
GRAPH = {m: _imports(m, p, set(_modules())) for m, p in _modules().items()}
ALL_LOOKUPS = {m: _lookups(m, p, set(_modules())) for m, p in _modules().items()}
LOOKUPS = {m: {b for b in bs if (m, b) not in KNOWN_UP_LOOKUPS} for m, bs in ALL_LOOKUPS.items()}
# every dependency: imports, and lookups of a kind (whose providers the lookup imports)
USES = {m: GRAPH[m] | LOOKUPS[m] for m in GRAPH}
# between modules: imports, and lookups of another package's kind
MODULE_GRAPH = {m: GRAPH[m] | {b for b in LOOKUPS[m] if _package(b) != _package(m)} for m in GRAPH}


def test_every_subpackage_has_a_layer():
    unplaced = {m.split(".")[1] for m in GRAPH if len(m.split(".")) > 1 and _layer(m) is None}
    assert not unplaced, f"put {sorted(unplaced)} in LAYERS (and in the layering of DESIGN)"


def test_no_import_runs_up_the_layers():
    up = [
        f"{a} -> {b}"
        for a, outs in USES.items()
        for b in outs
        if _layer(a) is not None and _layer(b) is not None and _layer(b) > _layer(a)
    ]
    assert not up, "imports against the layering:\n" + "\n".join(sorted(up))


def test_no_import_cycle():
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(module: str, path: list[str]) -> None:
        seen[module] = 1
        for other in sorted(MODULE_GRAPH[module]):
            if seen.get(other) == 1:
                cycles.append(" -> ".join([*path[path.index(other) :], other]))
            elif other not in seen:
                visit(other, [*path, other])
        seen[module] = 2

    for module in sorted(MODULE_GRAPH):
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
    cycles = _package_cycles(USES)
    assert not cycles, "import cycles between packages:\n" + "\n".join(cycles)


def test_the_known_upward_lookups_are_exactly_those_listed():
    found = {
        (a, b)
        for a, outs in ALL_LOOKUPS.items()
        for b in outs - GRAPH[a]
        if _layer(a) is not None and _layer(b) is not None and _layer(b) > _layer(a)
    }
    assert found == KNOWN_UP_LOOKUPS, (
        f"new: {sorted(found - KNOWN_UP_LOOKUPS)}; gone: {sorted(KNOWN_UP_LOOKUPS - found)}"
    )


def test_every_provider_is_a_module():
    missing = [f"{k}: {m}" for k, ms in PROVIDERS.items() for m in ms if m not in GRAPH]
    assert not missing, "registry.PROVIDERS names no module:\n" + "\n".join(missing)


def test_the_checker_sees_an_upward_import():
    """The graph is read, not assumed: a known edge and a known layer order are found."""
    assert "fedretain.engines.round" in GRAPH["fedretain.engines.sequential"]
    assert _layer("fedretain.experiments.run") > _layer("fedretain.recipe.config")
    assert _layer("fedretain.flower.__main__") == 9
    # kind("participation") in the aggregators loads the participation models
    assert "fedretain.engines.schedule" in USES["fedretain.algorithms.aggregators"]
    # kind(comp.kind) in the config's validation may be any kind: all providers
    assert "fedretain.data.datasets" in ALL_LOOKUPS["fedretain.recipe.config"]
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
