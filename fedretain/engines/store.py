"""Per-client persistent state, kept only for the clients that have taken part.

SCAFFOLD's ``c_i``, FedDyn's ``g_i`` or MOON's previous model are one model-sized tree per
client: 2.3 MB for ``cnn-fedavg``, 23 GB for 10,000 clients in float32. Two knobs keep that in
bounds (``store`` and ``store.dtype`` in the config):

- :class:`MemoryStore` (default) keeps the trees in RAM;
- :class:`DiskStore` writes one ``safetensors`` file per client (atomically) into a folder of
  the results directory and reads it back when the client is sampled again, so RAM holds
  only the round's clients;
- either can keep floating-point leaves in ``float16`` or ``bfloat16`` (half the bytes); they
  come back in the dtype they were stored from. Integer leaves are kept as they are.

Checkpoints copy a memory store into the checkpoint file; a disk store is checkpointed by
hard-linking its files (each write replaces a file with a new one, so a linked snapshot never
changes) and restored the same way: no client state is ever read whole into memory.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from fedretain.core.tree import Tree, flatten, tree_map, unflatten
from fedretain.errors import ConfigError, DataError
from fedretain.files import atomic_write_bytes, durable
from fedretain.registry import Registry

STORE_DTYPES = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _pack(tree: Tree, dtype: torch.dtype | None) -> tuple[Tree, dict[str, str]]:
    """The tree with floating leaves in ``dtype``, and the original dtype of each cast leaf."""
    if dtype is None:
        return tree_map(lambda v: v.detach().clone(), tree), {}
    kinds: dict[str, str] = {}
    flat = {}
    for name, v in flatten(tree).items():
        if v.is_floating_point() and v.dtype != dtype:
            kinds[name] = str(v.dtype).removeprefix("torch.")
            flat[name] = v.detach().to(dtype)
        else:
            flat[name] = v.detach().clone()
    return unflatten(flat), kinds


def _unpack(flat: dict[str, torch.Tensor], kinds: dict[str, str], device: torch.device) -> Tree:
    out = {}
    for name, v in flat.items():
        dtype = getattr(torch, kinds[name]) if name in kinds else v.dtype
        out[name] = v.to(device=device, dtype=dtype)
    return unflatten(out)


class ClientStore(Mapping[int, Tree]):
    """A read-only mapping client id -> state tree (on ``device``), written with :meth:`put`."""

    def __init__(self, dtype: str = "float32") -> None:
        if dtype not in STORE_DTYPES:
            raise ConfigError(
                f"store.dtype must be one of {', '.join(STORE_DTYPES)}, got {dtype!r}"
            )
        self.dtype = STORE_DTYPES[dtype]
        self.device = torch.device("cpu")  # where states are returned; the engine sets it

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids())

    def ids(self) -> list[int]:
        raise NotImplementedError

    def put(self, cid: int, state: Tree) -> None:
        raise NotImplementedError

    def nbytes(self) -> int:
        """Bytes the stored states take (in RAM or on disk)."""
        raise NotImplementedError


class MemoryStore(ClientStore):
    """Client states in RAM, optionally with floating leaves in half precision."""

    def __init__(self, dtype: str = "float32") -> None:
        super().__init__(dtype)
        self._states: dict[int, tuple[Tree, dict[str, str]]] = {}

    def __contains__(self, cid: object) -> bool:
        return cid in self._states

    def __len__(self) -> int:
        return len(self._states)

    def ids(self) -> list[int]:
        return sorted(self._states)

    def __getitem__(self, cid: int) -> Tree:
        tree, kinds = self._states[cid]
        if not kinds:
            return tree
        return _unpack(flatten(tree), kinds, self.device)

    def put(self, cid: int, state: Tree) -> None:
        self._states[cid] = _pack(state, self.dtype)

    def nbytes(self) -> int:
        return sum(
            v.numel() * v.element_size()
            for tree, _ in self._states.values()
            for v in flatten(tree).values()
        )


class DiskStore(ClientStore):
    """One ``safetensors`` file per client in ``folder``, written atomically."""

    def __init__(self, folder: str | Path, dtype: str = "float32") -> None:
        super().__init__(dtype)
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._ids = {int(p.stem) for p in self.folder.glob("*.safetensors") if p.stem.isdigit()}

    def path(self, cid: int) -> Path:
        return self.folder / f"{cid}.safetensors"

    def __contains__(self, cid: object) -> bool:
        return cid in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def ids(self) -> list[int]:
        return sorted(self._ids)

    def __getitem__(self, cid: int) -> Tree:
        if cid not in self._ids:
            raise KeyError(cid)
        path = self.path(cid)
        try:
            data = path.read_bytes()
            loaded = st_load(data)
            meta = _metadata(data)
            kinds = json.loads(meta.get("dtypes", "{}"))
            flat = {k: loaded[k] for k in json.loads(meta["order"])}  # files sort their keys
        except (OSError, ValueError, Exception) as e:  # safetensors raises its own error type
            raise DataError(
                f"client state {path} cannot be read ({e}); the run's client_state folder is "
                "damaged: resume from an earlier results folder or start the run again"
            ) from None
        return _unpack(flat, kinds, self.device)

    def put(self, cid: int, state: Tree) -> None:
        packed, kinds = _pack(state, self.dtype)
        flat = {k: v.to("cpu").contiguous() for k, v in flatten(packed).items()}
        meta = {"dtypes": json.dumps(kinds), "order": json.dumps(list(flat))}
        # no fsync per client: a checkpoint syncs the whole store once before linking it
        atomic_write_bytes(self.path(cid), st_save(flat, metadata=meta), fsync=False)
        self._ids.add(cid)

    def nbytes(self) -> int:
        return sum(self.path(c).stat().st_size for c in self._ids)

    def snapshot(self, target: str | Path) -> None:
        """Hard-link every client file into ``target`` (copy where links are impossible)."""
        target = Path(target)
        target.mkdir(parents=True, exist_ok=True)
        if durable():
            os.sync()  # the store's files were written without fsync
        for cid in self._ids:
            _link_or_copy(self.path(cid), target / self.path(cid).name)

    def restore(self, source: str | Path) -> None:
        """Replace the stored states with the snapshot in ``source``."""
        for cid in list(self._ids):
            self.path(cid).unlink(missing_ok=True)
        self._ids.clear()
        for path in Path(source).glob("*.safetensors"):
            _link_or_copy(path, self.folder / path.name)
            self._ids.add(int(path.stem))


def _metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file's header."""
    size = int.from_bytes(data[:8], "little")
    return json.loads(data[8 : 8 + size]).get("__metadata__", {}) or {}


def _link_or_copy(src: Path, dst: Path) -> None:
    dst.unlink(missing_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def memory(folder: str | Path | None = None, dtype: str = "float32") -> MemoryStore:
    """Client states in RAM (``folder`` is not used).

    :param dtype: dtype of the stored floating-point state: float32, float16 or bfloat16 (half the
        bytes)
    """
    return MemoryStore(dtype)


def disk(folder: str | Path | None = None, dtype: str = "float32") -> DiskStore:
    """Client states in ``folder`` (the run's ``DIR/client_state``).

    :param dtype: dtype of the stored floating-point state: float32, float16 or bfloat16 (half the
        bytes)
    """
    if folder is None:
        raise ValueError("store=disk needs a folder (the run's results folder)")
    return DiskStore(folder, dtype)


STORES = Registry("store", internal=("folder",))
STORES.add("memory", memory, "client states in RAM (dtype: float32, float16 or bfloat16)")
STORES.add("disk", disk, "one safetensors file per client in DIR/client_state (dtype as memory)")


def make_store(kind: str, dtype: str = "float32", folder: str | Path | None = None) -> ClientStore:
    """The store ``kind`` (``memory`` or ``disk``; ``folder`` required for disk)."""
    return STORES.build(kind, {"dtype": dtype}, folder, prefix="store")
