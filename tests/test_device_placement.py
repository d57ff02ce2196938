"""Device placement, checked without a GPU: tensors stay on the run's device.

Tensors go where the run's device is (``Federation.device``, the tensors' own ``.device``, or
the ``device`` a caller passes), so a CUDA run has no hidden round trip through the host and
no module pins a device of its own. The rule, over every module of ``fedretain/`` (read with
``ast``, not imported): no call of

- ``x.cuda(...)`` or ``x.cpu()``,
- ``x.to("cpu")`` / ``x.to("cuda...")`` (a string literal, positional or ``device=``),
- ``torch.device("cpu")`` / ``torch.device("cuda...")`` with a string literal,
- any call with a keyword ``device="cpu"`` / ``device="cuda..."``,

except a host copy that goes straight to numpy or Python (``.cpu()`` or ``.to("cpu", ...)``
immediately followed by ``.numpy()``, ``.tolist()`` or ``.item()``), and except in the modules
of :data:`ALLOWED`, where placing on a device is their job (each entry says why).

This reads the source only: a tensor made without naming a device (torch's default, the host)
that then meets the run's is found at run time by tests/test_device_mixing.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import fedretain

ROOT = Path(fedretain.__file__).parent

# module (relative to fedretain/) -> why it places tensors on a named device
ALLOWED = {
    "core/client.py": "`Clients`' default device (CPU), for clients built without a run's",
    "engines/store.py": "the client store's host copies: CPU until the engine names its device; "
    "the disk store writes CPU tensors",
    "experiments/checkpoint.py": "checkpoints are written from CPU copies (safetensors)",
    "flower/engine.py": "engine=flower trains its clients on the CPU",
    "flower/records.py": "Flower's records carry numpy arrays",
    "flower/store.py": "the states pushed to Flower clients travel as host copies",
    "continual/acgan.py": "noise drawn from a seeded CPU torch.Generator: the same on any device",
    "continual/replay.py": "replay labels and noise from a seeded CPU torch.Generator (as acgan)",
    "continual/fedcil.py": "consolidation labels and noise from a seeded CPU torch.Generator",
    "continual/quality.py": "the feature network's cache file and the sample grid's PNG are "
    "written from host copies; an extractor without parameters has no device but the CPU",
    "privacy/client_dp.py": "server noise from a seeded CPU torch.Generator (as acgan)",
    "privacy/dpsgd.py": "a generator's state is a CPU byte tensor (torch.Generator.set_state)",
    "privacy/attacks.py": "an attack's results hold each reconstruction on the host, for the "
    "study's numpy file and image grid",
}
HOST = {"numpy", "tolist", "item"}  # a host copy that leaves torch at once


def _device_literal(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and (node.value == "cpu" or node.value.startswith("cuda"))
    )


def _placement(call: ast.Call) -> str | None:
    """What ``call`` pins, or None when it names no device."""
    func = call.func
    if isinstance(func, ast.Attribute):
        if func.attr == "cuda":
            return ".cuda()"
        if func.attr == "cpu" and not call.args:
            return ".cpu()"
        if func.attr == "to" and call.args and _device_literal(call.args[0]):
            return f'.to("{call.args[0].value}")'  # type: ignore[attr-defined]
        if (
            func.attr == "device"
            and isinstance(func.value, ast.Name)
            and func.value.id == "torch"
            and call.args
            and _device_literal(call.args[0])
        ):
            return f'torch.device("{call.args[0].value}")'  # type: ignore[attr-defined]
    for kw in call.keywords:
        if kw.arg == "device" and _device_literal(kw.value):
            return f'device="{kw.value.value}"'  # type: ignore[attr-defined]
    return None


def _to_host(call: ast.Call, parents: dict[ast.AST, ast.AST]) -> bool:
    """``call`` is a host copy whose result goes straight to ``.numpy()``/``.tolist()``/
    ``.item()``."""
    attr = parents.get(call)
    return (
        isinstance(attr, ast.Attribute)
        and attr.attr in HOST
        and isinstance(parents.get(attr), ast.Call)
        and parents[attr].func is attr  # type: ignore[attr-defined]
    )


def placements(source: str) -> list[tuple[int, str]]:
    """(line, what) for each device placement in ``source`` the rule refuses."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        what = _placement(node)
        if what is None:
            continue
        if what in (".cpu()", '.to("cpu")') and _to_host(node, parents):
            continue
        found.append((node.lineno, what))
    return sorted(found)


def test_no_module_pins_a_device_outside_the_allowlist():
    hits = []
    for path in sorted(ROOT.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if name in ALLOWED:
            continue
        hits += [f"fedretain/{name}:{line}: {what}" for line, what in placements(path.read_text())]
    assert not hits, (
        "tensors placed on a named device (use the run's device: the tensors' own .device or "
        "the device passed in; a host copy for numpy is `.cpu().numpy()`):\n" + "\n".join(hits)
    )


def test_every_allowed_module_exists_and_still_places_tensors():
    """An entry is removed once its module no longer needs it."""
    for name, why in ALLOWED.items():
        path = ROOT / name
        assert path.is_file(), f"ALLOWED names fedretain/{name}, which does not exist"
        assert why
        assert placements(path.read_text()), f"fedretain/{name} no longer needs its entry"


def test_the_rule_catches_each_form_and_lets_host_copies_pass():
    source = """
import torch
a = x.cuda()
b = x.cuda(1)
c = x.cpu()
d = x.to("cpu")
e = x.to("cuda:0", torch.float64)
f = torch.device("cuda")
g = torch.zeros(3, device="cpu")
h = torch.Generator(device="cuda")
ok1 = x.cpu().numpy()
ok2 = x.detach().to("cpu", torch.float64).numpy()
ok3 = x.cpu().tolist()
ok4 = x.sum().cpu().item()
ok5 = x.to(device)
ok6 = torch.device(name)
ok7 = torch.zeros(3, device=x.device)
ok8 = torch.cuda.is_available()
"""
    assert [line for line, _ in placements(source)] == list(range(3, 11))
