"""Trees to Flower records and back: every payload key becomes one named ``ArrayRecord``.

A payload ``{"x": {"fc.weight": w, "fc.bias": b}, "buffers": {}}`` travels as two
``ArrayRecord``\\ s of a ``RecordDict``, named ``"x"`` and ``"buffers"``. Inside a record:

- a leaf is stored under its path, the keys joined by ``"/"`` (``{"a": {"b": t}}`` -> ``"a/b"``);
- an empty sub-tree is stored as a zero-size marker under its path and a trailing ``"/"``
  (``{"a": {}}`` -> ``"a/"``), so structure survives the trip;
- a payload value that is a bare tensor (not a tree) is stored under the empty key ``""``.

Tensors whose dtype numpy has travel as Flower's standard ``numpy.ndarray`` arrays, readable by
any Flower code; the others (``bfloat16``, the ``float8`` kinds) travel as their raw bytes with
``stype = "torch.raw"`` and the torch dtype's name. The round trip is exact: values, dtypes,
shapes and nested keys. Tree keys must be non-empty and contain no ``"/"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, RecordDict
from torch import Tensor

from fedretain.core.tree import Tree

RAW = "torch.raw"  # stype of arrays holding a tensor's bytes (dtypes numpy lacks)
NUMPY = "numpy.ndarray"  # Flower's standard stype (flwr.common.constant.SType.NUMPY)
RESERVED = "fedretain."  # record names the engine uses for its own records
_SEP = "/"
_EMPTY = np.zeros(0, dtype=np.uint8)  # marker of an empty sub-tree

_NUMPY_DTYPES = {
    torch.bool,
    torch.uint8,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
}


def tensor_to_array(t: Tensor) -> Array:
    """One tensor as a Flower ``Array`` (numpy-serialised where numpy has the dtype)."""
    t = t.detach().to("cpu")
    if t.dtype in _NUMPY_DTYPES:
        return Array(t.resolve_conj().resolve_neg().numpy())
    raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
    name = str(t.dtype).removeprefix("torch.")
    return Array(dtype=name, shape=tuple(t.shape), stype=RAW, data=raw)


def array_to_tensor(a: Array) -> Tensor:
    """Inverse of :func:`tensor_to_array`."""
    if a.stype == NUMPY:
        x = a.numpy()
        if not (x.flags.c_contiguous and x.flags.writeable):
            x = x.copy(order="C")
        return torch.from_numpy(x)
    if a.stype == RAW:
        dtype = getattr(torch, a.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"array of unknown torch dtype {a.dtype!r}")
        if not a.data:
            return torch.empty(tuple(a.shape), dtype=dtype)
        flat = torch.frombuffer(bytearray(a.data), dtype=torch.uint8)
        return flat.view(dtype).reshape(tuple(a.shape))
    raise ValueError(f"array of unsupported serialisation {a.stype!r}")


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key or _SEP in key:
        raise ValueError(
            f"tree key {key!r} cannot travel in a Flower record: keys must be non-empty "
            f"strings without '{_SEP}'"
        )
    return key


def _put(arrays: dict[str, Array], prefix: str, tree: Tree) -> None:
    if not tree and prefix:
        arrays[prefix] = Array(_EMPTY)
    for key, value in tree.items():
        path = prefix + _check_key(key)
        if isinstance(value, dict):
            _put(arrays, path + _SEP, value)
        elif isinstance(value, Tensor):
            arrays[path] = tensor_to_array(value)
        else:
            raise ValueError(f"tree leaf {path!r} is a {type(value).__name__}, not a tensor")


def tree_to_record(tree: Tree | Tensor) -> ArrayRecord:
    """A tree (or a bare tensor) as one ``ArrayRecord``; see the module docstring for keys."""
    arrays: dict[str, Array] = {}
    if isinstance(tree, Tensor):
        arrays[""] = tensor_to_array(tree)
    else:
        _put(arrays, "", tree)
    return ArrayRecord(arrays) if arrays else ArrayRecord()


def record_to_tree(record: ArrayRecord) -> Tree | Tensor:
    """Inverse of :func:`tree_to_record` (tensors on the CPU)."""
    if list(record.keys()) == [""]:
        return array_to_tensor(record[""])
    out: Tree = {}
    for name, array in record.items():
        *path, last = name.split(_SEP)
        node = out
        for part in path:
            node = node.setdefault(part, {})
        if last:  # a name ending in "/" marks an empty sub-tree, created just above
            node[last] = array_to_tensor(array)
    return out


def payload_to_records(payload: Tree) -> dict[str, ArrayRecord]:
    """One ``ArrayRecord`` per payload key, named after it."""
    out = {}
    for key, value in payload.items():
        if not isinstance(key, str) or not key or key.startswith(RESERVED):
            raise ValueError(f"payload key {key!r} is empty or uses the reserved {RESERVED!r}")
        out[key] = tree_to_record(value)
    return out


def records_to_payload(content: RecordDict | Mapping, keys: Iterable[str]) -> Tree:
    """The payload of ``keys`` from a message's records (raises a clear error when one is
    missing)."""
    out: Tree = {}
    for key in keys:
        if key not in content:
            raise ValueError(f"message has no record {key!r} (records: {', '.join(content)})")
        record = content[key]
        if not isinstance(record, ArrayRecord):
            raise ValueError(f"record {key!r} is a {type(record).__name__}, not an ArrayRecord")
        out[key] = record_to_tree(record)
    return out


__all__ = [
    "array_to_tensor",
    "payload_to_records",
    "record_to_tree",
    "records_to_payload",
    "tensor_to_array",
    "tree_to_record",
]
