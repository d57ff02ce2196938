"""Checkpoints: everything a run needs to continue exactly where it stopped.

A checkpoint holds the server state, every stored client state, the ledger, the torch RNG
states, the metrics so far, the elapsed time and the JSON states of the run's observers, by
name (``extra``: the privacy ``accountant``, the ``continual`` recorder; see
:mod:`fedretain.experiments.observers`). (Client sampling and mini-batch orders are
pure functions of seed, round and client, so they need no saved state.) Tensors go to a
``safetensors`` file, everything else to JSON: nothing is unpickled when a checkpoint loads,
so a crafted checkpoint cannot run code.

Layout in the results folder: ``checkpoint/state-<round>.safetensors`` and
``checkpoint/meta.json`` naming it; the checkpoint before it stays too, named by
``checkpoint/previous.json``. The tensor file is written first under a new name, then the
old ``meta.json`` becomes ``previous.json``, then ``meta.json`` is replaced, then tensor
files neither names are removed, each step atomic: a crash at any moment leaves two whole
checkpoints (or one, early on). When the latest cannot be read (a truncated file) or its
bytes are not those written (``meta.json`` records the SHA-256 of each state file, checked when
it loads: a flipped bit, a damaged disk), loading falls back to the previous one. A checkpoint
written before checksums were recorded loads unverified (its ``verified`` is False). With
``store=disk`` the client states are not copied into the tensor file:
``checkpoint/clients-<round>/`` holds hard links to the store's files of that moment (see
:mod:`fedretain.engines.store`), each with its checksum.

Resuming: :func:`resume_point` is the checkpoint a resumed run continues from, and
:func:`check_rounds` refuses a resumed run that would plan fewer rounds than it has.
"""

from __future__ import annotations

import hashlib
import shlex
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from fedretain.core.tree import Tree, flatten
from fedretain.engines.store import ClientStore, DiskStore
from fedretain.errors import ConfigError, DataError
from fedretain.files import atomic_write_bytes, read_json, write_json
from fedretain.recipe.config import Config, flat_settings, resolved

FORMAT = 1


def structure(tree: Tree) -> dict[str, Any]:
    """The keys of a tree, leaves as None (empty sub-trees are kept)."""
    for k in tree:
        if "/" in k:
            raise ValueError(f"tree key {k!r} contains '/', which checkpoints reserve")
    return {k: structure(v) if isinstance(v, dict) else None for k, v in tree.items()}


def _put(flat: dict[str, torch.Tensor], prefix: str, tree: Tree) -> None:
    structure(tree)  # refuses keys with '/'
    for name, v in flatten(tree, prefix + "/").items():
        flat[name] = v.detach().to("cpu").contiguous().clone()


def _get(flat: dict[str, torch.Tensor], prefix: str, shape: dict[str, Any], device: torch.device):
    return {
        k: _get(flat, f"{prefix}/{k}", s, device)
        if isinstance(s, dict)
        else flat[f"{prefix}/{k}"].to(device)
        for k, s in shape.items()
    }


@dataclass
class Checkpoint:
    round: int  # rounds completed
    server: Tree
    clients: ClientStore | dict[int, Tree]  # saving: the engine's store; loading: memory states
    ledger: dict[str, Any]
    records: list[dict[str, Any]]
    elapsed: float  # wall seconds of the run so far
    torch_rng: torch.Tensor
    cuda_rng: list[torch.Tensor]
    fingerprint: dict[str, Any]  # the resolved config the state belongs to
    client_dir: Path | None = None  # loading a disk store's checkpoint: its snapshot folder
    extra: dict[str, Any] = field(default_factory=dict)  # observer name -> its JSON state
    file: str = ""  # loading: the tensor file read (``state-<round>.safetensors``)
    damaged: str = ""  # loading: why the latest checkpoint was passed over for this one
    verified: bool = True  # loading: False where no checksum was recorded (an older checkpoint)

    def restore_rng(self) -> None:
        """Set torch's RNG states (CUDA's too, where there is a GPU) to the checkpoint's."""
        torch.set_rng_state(self.torch_rng)
        if self.cuda_rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(self.cuda_rng)

    def restore_clients(self, store: ClientStore) -> None:
        """Put the checkpoint's client states into the engine's (empty) store."""
        if self.client_dir is not None:
            if not isinstance(store, DiskStore):
                raise DataError(
                    "this checkpoint keeps client states on disk: resume with store=disk"
                )
            store.restore(self.client_dir)
            return
        assert isinstance(self.clients, dict)
        for cid, state in self.clients.items():
            store.put(cid, state)


def rng_states(device: torch.device) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """torch's RNG state and, on a CUDA device, every GPU's: a checkpoint's ``torch_rng`` and
    ``cuda_rng``."""
    cuda = device.type == "cuda"
    return torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else []


# called with a run's folder after each of its checkpoints is saved: a Ray task whose node does
# not share the study's folder sends the run back from there (studies/reproduce/storage.py)
SAVED: list[Callable[[Path], None]] = []


def save_checkpoint(folder: str | Path, ckpt: Checkpoint) -> None:
    folder = Path(folder) / "checkpoint"
    folder.mkdir(parents=True, exist_ok=True)
    flat: dict[str, torch.Tensor] = {}
    _put(flat, "server", ckpt.server)
    on_disk = isinstance(ckpt.clients, DiskStore)
    clients: dict[str, Any] = {}
    client_dir = f"clients-{ckpt.round}"
    sums: dict[str, str] = {}
    if on_disk:
        shutil.rmtree(folder / client_dir, ignore_errors=True)
        ckpt.clients.snapshot(folder / client_dir)  # type: ignore[union-attr]
        for path in sorted((folder / client_dir).iterdir()):
            sums[f"{client_dir}/{path.name}"] = _sha256(path.read_bytes())
    else:
        for cid, state in ckpt.clients.items():
            _put(flat, f"client/{cid}", state)
            clients[str(cid)] = structure(state)
    flat["rng/torch"] = ckpt.torch_rng.clone()
    for i, s in enumerate(ckpt.cuda_rng):
        flat[f"rng/cuda/{i}"] = s.clone()
    name = f"state-{ckpt.round}.safetensors"
    data = st_save(flat)
    sums[name] = _sha256(data)
    atomic_write_bytes(folder / name, data)
    try:
        old = _read_meta(folder / "meta.json")
    except DataError:  # none yet, or damaged: the previous one stays what it was
        old = None
    if old is not None and old.get("round", ckpt.round) < ckpt.round and _whole(folder, old):
        write_json(folder / "previous.json", old)
        previous: dict[str, Any] | None = old
    else:
        try:
            previous = _read_meta(folder / "previous.json")
        except DataError:
            previous = None
    write_json(
        folder / "meta.json",
        {
            "format": FORMAT,
            "round": ckpt.round,
            "tensors": name,
            "bytes": len(data),
            "sha256": sums,  # of each state file: the tensors and a disk store's client files
            "server": structure(ckpt.server),
            "clients": clients,
            "client_dir": client_dir if on_disk else None,
            "cuda_rng": len(ckpt.cuda_rng),
            "ledger": ckpt.ledger,
            "records": ckpt.records,
            "elapsed": ckpt.elapsed,
            "fingerprint": ckpt.fingerprint,
            "extra": ckpt.extra,
        },
    )
    keep = {
        name,
        client_dir,
        *((previous.get("tensors"), previous.get("client_dir")) if previous else ()),
    }
    for path in [*folder.glob("state-*.safetensors"), *folder.glob("clients-*")]:
        if path.name not in keep:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    for hook in SAVED:
        hook(folder.parent)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _check_sum(meta: dict[str, Any], name: str, data: bytes, path: Path) -> None:
    """A DataError when ``data`` (the file ``name`` of the checkpoint) is not what was
    written; nothing to check where no checksum was recorded."""
    sums = meta.get("sha256")
    if isinstance(sums, dict) and name in sums and _sha256(data) != sums[name]:
        raise DataError(
            f"checkpoint {path} is damaged: its SHA-256 is not the one recorded when it was written"
        )


def start_over_command(folder: str | Path) -> str:
    """The command that starts the run in ``folder`` over with its own settings (its
    ``config.toml``): what to type when no checkpoint of it can be read."""
    folder = Path(folder)
    config, out = shlex.quote(str(folder / "config.toml")), shlex.quote(str(folder))
    return f"fedretain run --config {config} --overwrite --out {out}"


def _whole(folder: Path, meta: dict[str, Any]) -> bool:
    """Whether the tensor file ``meta`` names is there, of the size it was written with."""
    tensors = folder / str(meta.get("tensors"))
    return tensors.is_file() and tensors.stat().st_size == meta.get("bytes", tensors.stat().st_size)


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = read_json(path)
    except (OSError, ValueError) as e:  # ValueError: not JSON
        raise DataError(f"checkpoint {path} cannot be read ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DataError(f"{path} is not a fedretain checkpoint of format {FORMAT}")
    return meta


def load_checkpoint(folder: str | Path, device: str | torch.device = "cpu") -> Checkpoint:
    """The latest checkpoint in ``folder``, or the one before it when the latest cannot be
    read (its ``damaged`` says why); a DataError naming the damaged file when neither can."""
    folder = Path(folder) / "checkpoint"
    meta_path, previous = folder / "meta.json", folder / "previous.json"
    if not meta_path.exists() and not previous.exists():
        raise DataError(
            f"no checkpoint in {folder.parent} (looked for {meta_path}); runs write one every "
            "checkpoint_every rounds"
        )
    fix = (
        f"start the run over with its own settings (`{start_over_command(folder.parent)}`) or "
        f"restore {folder} from a backup"
    )
    try:
        return _load(folder, meta_path, torch.device(device))
    except DataError as e:
        if not previous.exists():
            raise DataError(f"{e}; there is no earlier checkpoint: {fix}") from None
        damaged = str(e)
    try:
        ckpt = _load(folder, previous, torch.device(device))
    except DataError as e:
        raise DataError(f"{damaged}; the previous checkpoint is damaged too ({e}): {fix}") from None
    ckpt.damaged = damaged
    return ckpt


def _load(folder: Path, meta_path: Path, device: torch.device) -> Checkpoint:
    meta = _read_meta(meta_path)
    tensors = folder / str(meta.get("tensors"))
    try:
        data = tensors.read_bytes()
        if "bytes" in meta and len(data) != meta["bytes"]:
            raise ValueError(f"{len(data)} bytes instead of {meta['bytes']}: truncated")
        _check_sum(meta, tensors.name, data, tensors)
        flat = st_load(data)
    except (OSError, SafetensorError, ValueError) as e:
        raise DataError(f"checkpoint {tensors} cannot be read ({e})") from None
    client_dir = folder / meta["client_dir"] if meta.get("client_dir") else None
    if client_dir is not None and not client_dir.is_dir():
        raise DataError(f"checkpoint {tensors} names client states {client_dir}, which is gone")
    sums = meta.get("sha256")
    if client_dir is not None and isinstance(sums, dict):
        named = {n for n in sums if n.startswith(f"{client_dir.name}/")}
        there = {f"{client_dir.name}/{p.name}" for p in client_dir.iterdir()}
        if named != there:
            raise DataError(
                f"checkpoint {client_dir} is damaged: it holds other client files than were written"
            )
        for name in sorted(named):
            try:
                data = (folder / name).read_bytes()
            except OSError as e:
                raise DataError(f"checkpoint {folder / name} cannot be read ({e})") from None
            _check_sum(meta, name, data, folder / name)
    try:
        return Checkpoint(
            round=int(meta["round"]),
            server=_get(flat, "server", meta["server"], device),
            clients={
                int(c): _get(flat, f"client/{c}", s, device) for c, s in meta["clients"].items()
            },
            ledger=meta["ledger"],
            records=meta["records"],
            elapsed=float(meta["elapsed"]),
            torch_rng=flat["rng/torch"],
            cuda_rng=[flat[f"rng/cuda/{i}"] for i in range(int(meta["cuda_rng"]))],
            fingerprint=meta["fingerprint"],
            client_dir=client_dir,
            extra=meta.get("extra", {}),
            file=tensors.name,
            verified=isinstance(meta.get("sha256"), dict) and tensors.name in meta["sha256"],
        )
    except (KeyError, TypeError, ValueError) as e:
        raise DataError(f"checkpoint {tensors} is incomplete or corrupt ({e!r})") from None


# settings that may change when a run is resumed: they do not change the computation (a
# component's name stands for its parameters too: ``engine`` covers ``engine.chunk``)
RESUMABLE = (
    "name",
    "rounds",
    "eval_every",
    "eval_batch_size",  # evaluation only: the test loss moves by float rounding
    "targets",
    "threads",
    "checkpoint_every",
    "stop_after",  # when this process pauses the run: never what it computes
    "device",
    "gpu_share",  # where the memory plan is: the chunks, as engine.chunk
    "deterministic",  # which CUDA kernels compute the same thing: reproducibility, not results
    "engine",
    "diagnostics",
    "tracking",
)


def fingerprint(cfg: Config) -> dict[str, Any]:
    """The settings a checkpoint belongs to, as flat keys (``algo.mu``, ``model``)."""
    return _fingerprint(resolved(cfg))


def _fingerprint(settings: dict[str, Any]) -> dict[str, Any]:
    flat = flat_settings(settings)  # also gives old checkpoints' keys their new names
    return {k: v for k, v in flat.items() if k.partition(".")[0] not in RESUMABLE}


def load_for_resume(
    folder: str | Path, cfg: Config, device: str | torch.device = "cpu"
) -> Checkpoint | None:
    """The checkpoint in ``folder`` if it belongs to ``cfg`` (ConfigError naming what
    differs otherwise); None when the run stopped before its first checkpoint."""
    checkpoint = Path(folder) / "checkpoint"
    if not (checkpoint / "meta.json").exists() and not (checkpoint / "previous.json").exists():
        return None
    ckpt = load_checkpoint(folder, device)
    new = fingerprint(cfg)
    old = _fingerprint(ckpt.fingerprint)
    defaults = fingerprint(Config())  # a key newer than the checkpoint counts as its default
    changed = [k for k in set(old) | set(new) if old.get(k, defaults.get(k)) != new.get(k)]
    if changed:
        raise ConfigError(
            f"cannot resume {folder}: {', '.join(sorted(changed))} "
            f"{'differs' if len(changed) == 1 else 'differ'} from the checkpoint; "
            f"only {', '.join(RESUMABLE)} (and their parameters) may change"
        )
    return ckpt


def rounds_done(out: Path) -> int:
    """How many rounds the run in ``out`` has: its summary's or its latest checkpoint's (0
    where neither can be read)."""
    done = 0
    for path, key in (
        (out / "summary.json", "rounds"),
        (out / "checkpoint" / "meta.json", "round"),
    ):
        try:
            value = read_json(path).get(key, 0)
        except (OSError, ValueError, AttributeError):  # none, or not a JSON object
            continue
        done = max(done, value if isinstance(value, int) else 0)
    return done


def check_rounds(out: Path, cfg: Config, done: int | None = None) -> None:
    """A ConfigError when resuming ``out`` would plan fewer rounds than the run already has
    (``done``, else :func:`rounds_done`): a resumed run's ``rounds`` can only be extended."""
    done = rounds_done(out) if done is None else done
    if cfg.rounds < done:
        raise ConfigError(
            f"cannot resume {out} with rounds={cfg.rounds}: the run already has {done} rounds; "
            f"rounds can only be extended (rounds={done} or more)"
        )


def resume_point(out: Path, cfg: Config, device: torch.device) -> Checkpoint | None:
    """The checkpoint a resumed run continues from (None: it starts over), with a note."""
    ckpt = load_for_resume(out, cfg, device)
    if ckpt is None:
        print(f"note: {out} has no checkpoint yet; starting over from round 0", file=sys.stderr)
        return None
    check_rounds(out, cfg, ckpt.round)  # the previous checkpoint's, where meta.json is damaged
    if ckpt.damaged:
        print(f"note: {ckpt.damaged}; using the previous checkpoint", file=sys.stderr)
    if not ckpt.verified:
        print(
            f"note: checkpoint {ckpt.file} has no checksum (written by an earlier fedretain): "
            "resuming from it unverified",
            file=sys.stderr,
        )
    where = f"round {ckpt.round} of {cfg.rounds} (checkpoint {ckpt.file})"
    print(f"resuming {out} from {where}", file=sys.stderr)
    return ckpt
