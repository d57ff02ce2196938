"""The experiment configuration: typed, validated, written back fully resolved.

Sources, later ones winning: the defaults below, a TOML file (``--config exp.toml``), and
``key=value`` overrides from the command line. Keys with a dot address the parameters of a
named component: ``partition.alpha``, ``dataset.split``, ``model.hidden``, ``algo.mu``. In a
TOML file these are tables (``[partition]`` with ``name = "dirichlet"`` and ``alpha = 0.1``,
``[algo]`` with ``mu = 0.01``); ``partition = "dirichlet"`` alone also works.

Every error names the key, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import difflib
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedretain.errors import ConfigError, unknown_choice

ENGINES = ("sequential", "vmap", "flower")
ON_DIVERGENCE = ("stop", "skip")
CLIENT_STORES = ("memory", "disk")
DIAGNOSTICS = ("forgetting",)
OPTIMIZERS = ("sgd", "adam")


@dataclass
class Config:
    """Every setting of a run. ``fedretain run --help`` and README.md describe them."""

    name: str = ""  # label in reports; defaults to the algorithm name
    algorithm: str = "fedavg"
    dataset: str = "fashion-mnist"
    data_dir: str = ""  # empty: the dataset's default folder
    partition: str = "iid"
    val_fraction: float = 0.0  # per-client validation split (TCE uses 0.1)
    clients: int = 100
    clients_per_round: int = 10
    participation: str = "uniform"  # or "bernoulli": client i reachable with probability p_i
    rounds: int = 20
    local_epochs: int = 1
    local_steps: int = 0  # > 0: this many local mini-batch steps instead of local_epochs
    batch_size: int = 10
    lr: float = 0.05
    lr_schedule: str = ""  # "0=0.01, 1000=0.1": lr from each round on (0-based)
    optimizer: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    model: str = "cnn"
    loss: str = "ce"
    seed: int = 0
    eval_every: int = 1
    eval_batch_size: int = 1000
    targets: list[float] = field(default_factory=lambda: [0.5, 0.6, 0.7, 0.8, 0.9])
    engine: str = "sequential"  # "vmap": clients trained together; "flower": Flower clients
    vmap_chunk: int = 0  # engine=vmap: clients per vectorised call (0: sized to memory)
    vmap_compile: bool = False  # engine=vmap: torch.compile the step (faster, slower start)
    flower_client_cpus: float = 1.0  # engine=flower: Ray CPUs per simulated client
    flower_reply_timeout: float = 300.0  # engine=flower: seconds a round waits for replies
    device: str = "cpu"
    threads: int = 0  # torch CPU threads; 0 keeps torch's default
    checkpoint_every: int = 10  # rounds between checkpoints (0: none); `run --resume` continues
    on_divergence: str = "stop"  # NaN/Inf in a client's update: "stop" the run or "skip" it
    client_store: str = "memory"  # per-client state in RAM, or "disk": DIR/client_state/
    client_store_dtype: str = "float32"  # or float16 / bfloat16: half the bytes per client
    diagnostics: list[str] = field(default_factory=list)  # ["forgetting"]: DIR/forgetting.jsonl
    diagnostics_rounds: list[int] = field(default_factory=list)  # F_ki heat maps (default: last)
    # forgetting: also train this algorithm's local models from the same global model on the
    # same clients and batches (FedReg App. B.3's paired comparison); the run itself is unchanged
    diagnostics_reference: str = ""
    diagnostics_samples: int = 0  # forgetting: losses/F_ki on at most this many samples per client
    dataset_params: dict[str, Any] = field(default_factory=dict)
    partition_params: dict[str, Any] = field(default_factory=dict)
    model_params: dict[str, Any] = field(default_factory=dict)
    participation_params: dict[str, Any] = field(default_factory=dict)
    algo: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.name or self.algorithm

    def lr_at(self, rnd: int) -> float:
        """The local learning rate of round ``rnd`` (0-based)."""
        lr = self.lr
        for start, value in parse_lr_schedule(self.lr_schedule):
            if rnd >= start:
                lr = value
        return lr


# component name -> the dict field holding its parameters
_GROUPS = {
    "dataset": "dataset_params",
    "partition": "partition_params",
    "model": "model_params",
    "participation": "participation_params",
    "algo": "algo",
}
_FIELDS = {f.name: f for f in dataclasses.fields(Config) if f.name not in _GROUPS.values()}


def parse_lr_schedule(text: str) -> list[tuple[int, float]]:
    """``"0=0.01, 1000=0.1"`` -> ``[(0, 0.01), (1000, 0.1)]``, sorted by round."""
    if not text.strip():
        return []
    out = []
    for item in text.replace(";", ",").split(","):
        if not item.strip():
            continue
        try:
            start, value = item.split("=")
            out.append((int(start), float(value)))
        except ValueError:
            raise ConfigError(
                f"lr_schedule: cannot read '{item.strip()}'; write ROUND=LR pairs, "
                "e.g. lr_schedule='0=0.01, 1000=0.1'"
            ) from None
    for start, value in out:
        if start < 0 or not value > 0:
            raise ConfigError(f"lr_schedule: need ROUND >= 0 and LR > 0, got {start}={value}")
    return sorted(out)


def parse_value(text: str) -> Any:
    """A command-line value as TOML would read it (numbers, booleans, lists), else a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Check ``value`` against the type of ``default``; ints are accepted for floats."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        expected = "true or false"
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        expected = "an integer"
    elif isinstance(default, float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        expected = "a number"
    elif isinstance(default, str):
        if isinstance(value, str):
            return value
        expected = "a string"
    elif isinstance(default, list | tuple):
        if isinstance(value, list | tuple):
            return list(value)
        if isinstance(value, str):  # diagnostics=forgetting or a,b: one item per comma
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, int | float) and not isinstance(value, bool):
            return [value]
        expected = "a list, e.g. [1, 2]"
    else:
        return value
    raise ConfigError(f"{key}: expected {expected}, got {value!r}")


def _unknown_key(key: str, valid: list[str]) -> ConfigError:
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"unknown key '{key}'{hint}; valid keys: {', '.join(sorted(valid))}")


def _flatten_toml(data: dict[str, Any]) -> dict[str, Any]:
    """TOML tables to dotted keys; a component table's ``name`` becomes the component."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            if key not in _GROUPS:
                raise _unknown_key(key, list(_FIELDS) + [f"[{g}]" for g in _GROUPS])
            for sub, v in value.items():
                if sub == "name" and key != "algo":
                    flat[key] = v
                else:
                    flat[f"{key}.{sub}"] = v
        else:
            flat[key] = value
    return flat


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from None
    try:
        return _flatten_toml(tomllib.loads(text))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path} is not valid TOML: {e}") from None


def parse_overrides(items: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"cannot read '{item}': overrides are KEY=VALUE, e.g. rounds=50")
        out[key.strip()] = parse_value(value.strip())
    return out


def make_config(values: dict[str, Any]) -> Config:
    """Build and validate a :class:`Config` from flat (dotted) keys."""
    cfg = Config()
    for key, value in values.items():
        group, dot, sub = key.partition(".")
        if dot:
            if group not in _GROUPS or not sub:
                raise _unknown_key(key, list(_FIELDS) + [f"{g}.<param>" for g in _GROUPS])
            getattr(cfg, _GROUPS[group])[sub] = value
        elif key in _FIELDS:
            setattr(cfg, key, _coerce(key, value, getattr(Config(), key)))
        else:
            raise _unknown_key(key, list(_FIELDS) + [f"{g}.<param>" for g in _GROUPS])
    validate(cfg)
    return cfg


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    values = load_toml(path) if path else {}
    values.update(parse_overrides(overrides or []))
    return make_config(values)


def _check_params(kind: str, given: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, value in given.items():
        if key not in defaults:
            valid = ", ".join(f"{kind}.{k}" for k in defaults) or "none"
            raise ConfigError(f"unknown key '{kind}.{key}'; valid: {valid}")
        default = defaults[key]
        out[key] = value if default is None else _coerce(f"{kind}.{key}", value, default)
    return out


def _positive(cfg: Config, *keys: str, minimum: float = 1) -> None:
    for key in keys:
        value = getattr(cfg, key)
        if value < minimum:
            raise ConfigError(f"{key} must be >= {minimum}, got {value}")


def validate(cfg: Config) -> None:
    """Check every value; component parameters are checked against their signatures."""
    from fedretain.algorithms import ALGORITHMS, algorithm_params
    from fedretain.data.datasets import dataset_params
    from fedretain.data.partition import partition_params
    from fedretain.engines.schedule import PARTICIPATIONS, Participation, participation_params
    from fedretain.engines.store import STORE_DTYPES
    from fedretain.losses import LOSSES
    from fedretain.models import model_params

    _positive(cfg, "clients", "clients_per_round", "rounds", "batch_size", "eval_every")
    _positive(cfg, "eval_batch_size", "local_epochs")
    _positive(cfg, "local_steps", "seed", "threads", "checkpoint_every", "vmap_chunk", minimum=0)
    _positive(cfg, "diagnostics_samples", minimum=0)
    if cfg.clients_per_round > cfg.clients:
        raise ConfigError(
            f"clients_per_round ({cfg.clients_per_round}) cannot exceed clients ({cfg.clients})"
        )
    if not cfg.lr > 0:
        raise ConfigError(f"lr must be > 0, got {cfg.lr}")
    if cfg.momentum < 0 or cfg.momentum >= 1:
        raise ConfigError(f"momentum must be in [0, 1), got {cfg.momentum}")
    if cfg.weight_decay < 0:
        raise ConfigError(f"weight_decay must be >= 0, got {cfg.weight_decay}")
    if not 0 <= cfg.val_fraction < 1:
        raise ConfigError(f"val_fraction must be in [0, 1), got {cfg.val_fraction}")
    for t in cfg.targets:
        if not isinstance(t, int | float) or not 0 < t <= 1:
            raise ConfigError(f"targets must be accuracies in (0, 1], got {t!r}")
    parse_lr_schedule(cfg.lr_schedule)
    if cfg.engine not in ENGINES:
        raise ConfigError(unknown_choice("engine", cfg.engine, ENGINES))
    if cfg.on_divergence not in ON_DIVERGENCE:
        raise ConfigError(unknown_choice("on_divergence", cfg.on_divergence, ON_DIVERGENCE))
    for d in cfg.diagnostics:
        if d not in DIAGNOSTICS:
            raise ConfigError(unknown_choice("diagnostics", d, DIAGNOSTICS))
    if cfg.diagnostics_reference:
        if "forgetting" not in cfg.diagnostics:
            raise ConfigError(
                "diagnostics_reference needs diagnostics=forgetting (it adds a reference "
                "algorithm's loss increase to that diagnostic)"
            )
        if cfg.diagnostics_reference not in ALGORITHMS:
            raise ConfigError(
                unknown_choice("diagnostics_reference", cfg.diagnostics_reference, ALGORITHMS)
            )
    for r in cfg.diagnostics_rounds:
        if not isinstance(r, int) or not 1 <= r <= cfg.rounds:
            raise ConfigError(f"diagnostics_rounds must be rounds in 1..{cfg.rounds}, got {r!r}")
    if cfg.client_store not in CLIENT_STORES:
        raise ConfigError(unknown_choice("client_store", cfg.client_store, CLIENT_STORES))
    if cfg.client_store_dtype not in STORE_DTYPES:
        raise ConfigError(
            unknown_choice("client_store_dtype", cfg.client_store_dtype, STORE_DTYPES)
        )
    if cfg.algorithm == "fedcurv" and cfg.client_store_dtype == "float16":
        raise ConfigError(
            "fedcurv with client_store_dtype=float16: its stored Fisher entries below ~6e-8 "
            "would round to 0; use client_store_dtype=bfloat16 (float32's range) or float32"
        )
    if cfg.optimizer not in OPTIMIZERS:
        raise ConfigError(unknown_choice("optimizer", cfg.optimizer, OPTIMIZERS))
    if cfg.loss not in LOSSES:
        raise ConfigError(unknown_choice("loss", cfg.loss, LOSSES))
    if not (cfg.device == "cpu" or cfg.device.startswith("cuda")):
        raise ConfigError(f"device must be cpu or cuda[:N], got {cfg.device!r}")
    cfg.algo = _check_params("algo", cfg.algo, algorithm_params(cfg.algorithm))
    cfg.dataset_params = _check_params("dataset", cfg.dataset_params, dataset_params(cfg.dataset))
    cfg.partition_params = _check_params(
        "partition", cfg.partition_params, partition_params(cfg.partition)
    )
    cfg.model_params = _check_params("model", cfg.model_params, model_params(cfg.model))
    if cfg.participation not in PARTICIPATIONS:
        raise ConfigError(unknown_choice("participation", cfg.participation, PARTICIPATIONS))
    cfg.participation_params = _check_params(
        "participation", cfg.participation_params, participation_params(cfg.participation)
    )
    try:
        Participation(cfg.participation, 1, 1, 0, **cfg.participation_params)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def resolved(cfg: Config) -> dict[str, Any]:
    """The full configuration as TOML-ready data, every default filled in."""
    from fedretain.algorithms import algorithm_params
    from fedretain.data.datasets import dataset_params
    from fedretain.data.partition import partition_params
    from fedretain.engines.schedule import participation_params
    from fedretain.models import model_params

    def full(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
        merged = {**defaults, **given}
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in merged.items() if v is not None
        }

    out: dict[str, Any] = {k: getattr(cfg, k) for k in _FIELDS if k not in _GROUPS}
    out["name"] = cfg.label
    out["dataset"] = {"name": cfg.dataset, **full(dataset_params(cfg.dataset), cfg.dataset_params)}
    out["partition"] = {
        "name": cfg.partition,
        **full(partition_params(cfg.partition), cfg.partition_params),
    }
    out["model"] = {"name": cfg.model, **full(model_params(cfg.model), cfg.model_params)}
    out["participation"] = {
        "name": cfg.participation,
        **full(participation_params(cfg.participation), cfg.participation_params),
    }
    out["algo"] = full(algorithm_params(cfg.algorithm), cfg.algo)
    return out
