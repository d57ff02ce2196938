"""A second device on a CPU, to find what would mix devices on a GPU before a GPU is lent.

On CUDA, an operation whose tensors sit on different devices fails ("Expected all tensors to
be on the same device"); on a CPU there is only one device, so code that forgets to move a
tensor (the generator-quality FID whose running sums stayed on the host while its features
came from the GPU) runs without a complaint. :class:`DeviceMixing` tells the two apart on the
CPU: it runs the code under a ``TorchFunctionMode`` that tags each tensor with where it would
live on a GPU machine,

- ``run``: created on the run's device (``device=RUN``, ``.to(RUN)``, ``.cuda()``), or computed
  from such a tensor. ``RUN`` is ``torch.device("cpu", 0)``: a CPU device that compares unequal
  to the plain ``cpu``, which the run is given as its device (:func:`run_device_patched`); a
  tagged tensor reports ``RUN`` as its ``.device``, so ``x.to(y.device)`` follows ``y``;
- ``host``: created where no device is named (torch's default device: the CPU on a GPU machine
  too), on ``cpu``, by ``torch.from_numpy`` or ``.cpu()``, or computed from such tensors only;

and records every operation that takes a ``run`` tensor and a ``host`` tensor with at least
one dimension (CUDA accepts a 0-dimensional CPU tensor as a scalar), except those that move
data between devices (``copy_``, ``to``, assigning ``.data``, indexing a tensor with a host
index), and ``.numpy()`` of a ``run`` tensor (CUDA refuses it). Tensors made before the mode
or by torch's C++ code without passing through Python carry no tag and take part in nothing.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakTensorKeyDictionary

RUN = torch.device("cpu", 0)
UNKNOWN = torch.device("cpu", 1)  # the .device of an untagged tensor: what it makes is untagged
RUN_TAG, HOST_TAG, NO_TAG = "run", "host", "untagged"
# functions whose tensors may sit on different devices: they move data between them
MOVES = {"copy_", "to", "__set__", "set_", "_has_compatible_shallow_copy_type", "__getitem__"}
SHAPE = {"size", "dim", "numel", "__len__", "shape", "ndim", "dtype", "is_floating_point"}
PACKAGE = str(Path(__file__).resolve().parents[1] / "fedretain")


@dataclass(frozen=True)
class Mixing:
    """One operation that would mix devices on a GPU: the function and where it was called."""

    function: str
    where: str
    operands: str = ""  # the tags and shapes of its tensors

    def __str__(self) -> str:
        return f"{self.function} at {self.where}" + (f" ({self.operands})" if self.operands else "")


def _name(func: Any) -> str:
    name = getattr(func, "__name__", str(func))
    if name in ("__get__", "__set__"):  # a property of Tensor: its descriptor's name
        return f"{getattr(func.__self__, '__name__', '?')}.{name}"
    return name


def _where() -> str:
    """The innermost fedretain frame of the current stack (else the innermost frame)."""
    frames = traceback.extract_stack()[:-3]
    ours = [f for f in frames if f.filename.startswith(PACKAGE)]
    f = (ours or frames)[-1]
    return f"{Path(f.filename).name}:{f.lineno} ({f.name})"


class DeviceMixing(TorchFunctionMode):
    """Tags tensors ``run`` or ``host`` and records the operations that mix them (see the
    module's docstring); :attr:`mixed` lists them, once per function and place."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: WeakTensorKeyDictionary = WeakTensorKeyDictionary()
        self.origins: WeakTensorKeyDictionary = WeakTensorKeyDictionary()  # host: made where
        self.mixed: list[Mixing] = []
        self.on_run = 0  # operations that took a run-device tensor: the check saw the run

    def tag(self, t: Any) -> str | None:
        return self.tags.get(t) if isinstance(t, torch.Tensor) else None

    def _record(self, function: str, inputs: list[torch.Tensor] = ()) -> None:
        operands = ", ".join(
            f"{self.tag(t)} {tuple(t.shape)}"
            + (f" made by {self.origins[t]}" if t in self.origins else "")
            for t in inputs
        )
        m = Mixing(function, _where(), operands)
        if all((m.function, m.where) != (k.function, k.where) for k in self.mixed):
            self.mixed.append(m)

    @staticmethod
    def _device_tag(device: Any) -> str | None:
        if device is None:
            return None
        if isinstance(device, torch.Tensor):
            return None
        d = torch.device(device) if not isinstance(device, torch.device) else device
        if d == UNKNOWN:
            return NO_TAG
        return RUN_TAG if d == RUN or d.type == "cuda" else HOST_TAG

    def _target(self, name: str, args: tuple, kwargs: dict) -> str | None:
        """The tag a call names for its result: its device, or None."""
        if name == "cpu":
            return HOST_TAG
        if name == "cuda":
            return RUN_TAG
        if name == "from_numpy":
            return HOST_TAG
        if name == "to":
            rest = [*args[1:], *kwargs.values()]
            other = next((a for a in rest if isinstance(a, torch.Tensor)), None)
            if other is not None:
                return self.tag(other) or NO_TAG
            device = kwargs.get("device")
            if device is None:
                device = next((a for a in args[1:] if isinstance(a, str | torch.device)), None)
            return self._device_tag(device)
        return self._device_tag(kwargs.get("device"))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _name(func)
        if name == "device.__get__":
            tag = self.tag(args[0])
            return RUN if tag == RUN_TAG else UNKNOWN if tag is None else func(*args, **kwargs)
        if name in ("data.__set__", "grad.__set__"):
            out = func(*args, **kwargs)
            if self.tag(args[1]) is not None:
                self.tags[args[0]] = self.tag(args[1])
            return out
        inputs = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        tags = [(self.tag(t), t.dim()) for t in inputs]
        has_run = any(tag == RUN_TAG for tag, _ in tags)
        has_host = any(tag == HOST_TAG and dim > 0 for tag, dim in tags)
        base = name.split(".")[0]
        self.on_run += has_run
        if name == "numpy" and has_run:
            self._record(".numpy() of a run-device tensor")
        elif has_run and has_host and base not in MOVES and base not in SHAPE:
            self._record(name, inputs)
        out = func(*args, **kwargs)
        target = self._target(name, args, kwargs)
        if args and out is args[0] and target in (RUN_TAG, HOST_TAG) and target != self.tag(out):
            out = out.clone()  # torch's no-op move between its two CPUs: a copy on a GPU
        if target is None:
            if has_run:
                target = RUN_TAG
            elif any(tag == HOST_TAG for tag, _ in tags) or not inputs:
                target = HOST_TAG  # a factory without a device: torch's default, the host
        if target not in (None, NO_TAG):
            self.tag_all(out, target)
            if target == HOST_TAG:  # where a host tensor came from, for the report
                hosts = [t for t in inputs if self.tag(t) == HOST_TAG and t in self.origins]
                origin = self.origins[hosts[0]] if hosts else f"{name} at {_where()}"
                for t in tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor):
                        self.origins[t] = origin
        return out

    def tag_all(self, tree: Any, tag: str) -> None:
        for t in tree_flatten(tree)[0]:
            if isinstance(t, torch.Tensor):
                self.tags[t] = tag

    def tag_from(self, out: Any, inputs: Any) -> None:
        """Tag ``out`` as made from ``inputs`` (by code the mode does not see, like vmap's)."""
        tags = {self.tag(t) for t in tree_flatten(inputs)[0]}
        if RUN_TAG in tags or HOST_TAG in tags:
            self.tag_all(out, RUN_TAG if RUN_TAG in tags else HOST_TAG)


@contextmanager
def second_device(monkeypatch: Any) -> Iterator[DeviceMixing]:
    """The check, active: runs built inside get :data:`RUN` as their device (a config says
    ``device=cpu``), and what ``torch.func.vmap`` returns is tagged from its inputs."""
    import fedretain.engines.vmap as vectorised
    import fedretain.recipe.federation as federation

    mode = DeviceMixing()
    real_device, real_vmap = federation.resolve_device, vectorised.vmap

    def vmap(func: Any, *a: Any, **k: Any) -> Any:
        inner = real_vmap(func, *a, **k)

        def call(*args: Any, **kwargs: Any) -> Any:
            out = inner(*args, **kwargs)
            mode.tag_from(out, (args, kwargs))
            return out

        return call

    monkeypatch.setattr(
        federation, "resolve_device", lambda n: RUN if n == "cpu" else real_device(n)
    )
    monkeypatch.setattr(vectorised, "vmap", vmap)
    with mode:
        yield mode


__all__ = ["RUN", "DeviceMixing", "Mixing", "second_device"]
