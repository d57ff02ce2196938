"""The experiment configuration: typed, validated, written back fully resolved.

Sources, later ones winning: the defaults below, a TOML file (``--config exp.toml``), and
``key=value`` overrides from the command line. Keys with a dot address the parameters of a
named component: ``partition.alpha``, ``dataset.split``, ``model.hidden``, ``algo.mu``. In a
TOML file these are tables (``[partition]`` with ``name = "dirichlet"`` and ``alpha = 0.1``,
``[algo]`` with ``mu = 0.01``); ``partition = "dirichlet"`` alone also works.

Every error names the key, the value and what is allowed.

Each component is checked against its kind's registry (:mod:`fedretain.registry`). This layer
imports the packages that register the kinds at its layer and below (algorithms, data,
models, engines, privacy, continual...); the kinds of the layers above (the run's diagnostics
and trackers) and their entries (``engine=flower``) are registered by those layers when
imported, and a section whose kind no imported module declares is left to the layer that owns
it (the run checks its configuration again with every kind loaded).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# the packages registering the kinds this layer checks (imported for their registrations)
import fedretain.algorithms
import fedretain.continual
import fedretain.core.optim
import fedretain.data.datasets
import fedretain.data.partition
import fedretain.engines
import fedretain.losses
import fedretain.models
import fedretain.privacy.mechanisms
from fedretain.errors import ConfigError, unknown_choice
from fedretain.registry import Registry, coerce, kind, kinds

ON_DIVERGENCE = ("stop", "skip")
PRECISIONS = ("fp32", "bf16", "fp64")


def setting(default: Any = dataclasses.MISSING, help: str = "", *, factory: Any = None) -> Any:
    """A :class:`Config` field with its meaning (``metadata["help"]``): the one text that
    ``fedretain run --help`` and the documentation show for the key."""
    if factory is not None:
        return field(default_factory=factory, metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class Config:
    """Every setting of a run. Each field's ``metadata["help"]`` is its meaning, shown by
    ``fedretain run --help`` (:func:`describe_settings`) and the documentation.

    A named component (an empty name chooses none) takes its parameters as
    ``<prefix>.<param>`` keys, kept in the ``*_params`` fields (``algo`` for the algorithm);
    :data:`COMPONENTS` maps each prefix to its fields and its registry, and ``run --help``
    lists each one's choices from it.
    """

    name: str = setting("", "label of the run in reports; empty: the algorithm's name")
    algorithm: str = setting("fedavg", "the client method (`fedretain list algorithms`)")
    dataset: str = setting("fashion-mnist", "the data set (`fedretain list datasets`)")
    data_dir: str = setting("", "the dataset's folder; empty: the dataset's default folder")
    partition: str = setting(
        "iid",
        "how the training data are split over the clients",
    )
    val_fraction: float = setting(0.0, "per-client validation split (TCE uses 0.1)")
    clients: int = setting(100, "N, the number of clients")
    clients_per_round: int = setting(10, "S, the clients sampled per round without replacement")
    participation: str = setting(
        "uniform",
        "who takes part in a round: uniform draws S of the N clients "
        "(`fedretain list participation` for the others)",
    )
    rounds: int = setting(20, "the number of rounds")
    local_epochs: int = setting(1, "local epochs per round (when local_steps is 0)")
    local_steps: int = setting(
        0, "> 0: exactly this many local mini-batch steps per round instead of local_epochs"
    )
    batch_size: int = setting(10, "the local mini-batch size")
    lr: float = setting(0.05, "the local learning rate")
    lr_schedule: str = setting(
        "", '"0=0.01, 1000=0.1": the learning rate from each (0-based) round on; empty: lr'
    )
    optimizer: str = setting(
        "sgd",
        "the local optimiser (its options: `fedretain list optimizer --params`)",
    )
    server_opt: str = setting(
        "",
        "the server's optimizer on the pseudo-gradient x - agg(y); empty keeps the "
        "algorithm's own server step",
    )
    aggregator: str = setting(
        "mean",
        "how the uplinked models are combined (mean: the algorithm's own weighted mean)",
    )
    model: str = setting(
        "cnn",
        "the model (`fedretain list models`; any model: model.projection=256 adds MOON's "
        "projection head)",
    )
    loss: str = setting(
        "ce",
        "the local training loss (evaluation always uses the cross-entropy over every class)",
    )
    seed: int = setting(0, "the same config and seed give the same numbers")
    eval_every: int = setting(
        1, "test-set evaluation period in rounds (the last round is always evaluated)"
    )
    eval_batch_size: int = setting(
        0,
        "batch size of evaluation (the test set, the diagnostics); 0: 100 for a convolutional "
        "model on a CPU, where 100 images' activations stay in cache (the zoo's CNNs evaluate "
        "1.4-1.9x faster than in batches of 1000), else 1000",
    )
    test_samples: int = setting(
        0,
        "> 0: test (and evaluate the continual tasks) on this many test samples, the same "
        "ones for every seed, method and engine (a fixed draw); 0: the whole test set",
    )
    targets: list[float] = setting(
        help="accuracies for rounds_to (the first round reaching each)",
        factory=lambda: [0.5, 0.6, 0.7, 0.8, 0.9],
    )
    engine: str = setting(
        "auto",
        "how a round's clients are trained (every engine gives the same numbers); auto picks "
        "one by a measured rule",
    )
    device: str = setting("cpu", "cpu, or cuda[:N] for a GPU")
    gpu_share: float = setting(
        1.0,
        "the share of its GPU a run may plan for, in (0, 1]: the vectorised engine sizes its "
        "chunks to this share of the memory it would take alone (an eighth of the card); "
        "studies set it for runs that share a GPU (--run-gpus 0.25: 0.25)",
    )
    deterministic: bool = setting(
        True,
        "on a CUDA device: torch's deterministic algorithms and cuDNN kernels, float32 "
        "convolutions without TF32, so the same config and seed give the same numbers on the "
        "same GPU and software; false gives torch's fast defaults (the cost is not measured "
        "yet: no GPU); a CPU run is deterministic either way and ignores it",
    )
    precision: str = setting(
        "fp32",
        "fp32; or bf16: the model's forward and backward in local training under bfloat16 "
        "autocast (parameters, gradients, updates, the server and evaluation stay float32): "
        "about 1.5x faster convolutions on CPUs with AVX-512 BF16 and on GPUs, slower on CPUs "
        "without it; numbers differ from fp32 by bfloat16 rounding; or fp64: model, data "
        "and algorithm state in float64 (a slow reference to measure float32 rounding "
        "against)",
    )
    threads: int = setting(0, "torch CPU threads; 0 keeps torch's default")
    plots: bool = setting(
        True,
        "write the run's PNG plots when it ends (its results are its JSON files; reproduce's "
        "scale=ci turns them off, its reports draw their own)",
    )
    checkpoint_every: int = setting(
        10, "rounds between checkpoints (and one at the end); 0: none; `run --resume` continues"
    )
    stop_after: float = setting(
        0.0,
        "seconds after which a run pauses itself between rounds, before a round that would "
        "run past them (a checkpoint saved, status 'paused', no summary yet): a slice of a "
        "long run on a machine lent for a while; `run --resume` or `reproduce` continues it, "
        "with the numbers of an uninterrupted run; 0: never",
    )
    on_divergence: str = setting(
        "stop",
        "NaN/Inf in a client's update: stop (keeping the results so far) or skip that update",
    )
    store: str = setting(
        "memory",
        "where per-client state lives (disk: DIR/client_state/); store.dtype=float16|bfloat16 "
        "halves its bytes",
    )
    diagnostics: list[str] = setting(
        help='observers of the run, e.g. ["forgetting"] (DIR/forgetting.jsonl)',
        factory=list,
    )
    privacy: str = setting(
        "",
        "differential privacy: empty for none, else a mechanism, sample-level (in local "
        "training) or client-level (on the server), with its (epsilon, delta) in metrics.jsonl",
    )
    tracking: str = setting(
        "",
        "experiment tracking: empty for none, else each round's metrics also go to the "
        "tracker (tensorboard writes DIR/tensorboard/; mlflow an MLflow run, in "
        "MLFLOW_TRACKING_URI or DIR/mlflow.db; wandb an offline W&B run in DIR/wandb/)",
    )
    scenario: str = setting(
        "",
        "continual learning: empty for none, else a sequence of tasks (rounds = tasks * "
        "rounds_per_task; accuracy on the classes seen so far, DIR/continual.jsonl)",
    )
    replay: str = setting(
        "",
        "replay of past tasks in a continual scenario: empty for none (`fedretain list "
        "replay` for each one's needs)",
    )
    algo: dict[str, Any] = setting(help="the algorithm's hyper-parameters", factory=dict)
    dataset_params: dict[str, Any] = setting(help="the dataset loader's options", factory=dict)
    partition_params: dict[str, Any] = setting(help="the partition's options", factory=dict)
    model_params: dict[str, Any] = setting(help="the model's options", factory=dict)
    participation_params: dict[str, Any] = setting(
        help="the participation model's options", factory=dict
    )
    optimizer_params: dict[str, Any] = setting(help="the local optimiser's options", factory=dict)
    server_opt_params: dict[str, Any] = setting(help="the server optimizer's options", factory=dict)
    aggregator_params: dict[str, Any] = setting(help="the aggregator's options", factory=dict)
    engine_params: dict[str, Any] = setting(help="the engine's options", factory=dict)
    store_params: dict[str, Any] = setting(help="the client store's options", factory=dict)
    diagnostics_params: dict[str, Any] = setting(help="the diagnostics' options", factory=dict)
    privacy_params: dict[str, Any] = setting(help="the privacy mechanism's options", factory=dict)
    scenario_params: dict[str, Any] = setting(help="the continual scenario's options", factory=dict)
    replay_params: dict[str, Any] = setting(help="the generative replay's options", factory=dict)

    @property
    def label(self) -> str:
        return self.name or self.algorithm + (f"+{self.replay}" if self.replay else "")

    def lr_at(self, rnd: int) -> float:
        """The local learning rate of round ``rnd`` (0-based)."""
        lr = self.lr
        for start, value in parse_lr_schedule(self.lr_schedule):
            if rnd >= start:
                lr = value
        return lr


@dataclass(frozen=True)
class Component:
    """A named component of the config: the field holding its name (a list for
    ``diagnostics``), the field holding its parameters, and its registry's kind."""

    name_field: str
    params_field: str
    kind: str


# config prefix -> component; ``algo.mu`` sets ``Config.algo["mu"]`` of ``Config.algorithm``
COMPONENTS = {
    "algo": Component("algorithm", "algo", "algorithm"),
    "dataset": Component("dataset", "dataset_params", "dataset"),
    "partition": Component("partition", "partition_params", "partition"),
    "model": Component("model", "model_params", "model"),
    "participation": Component("participation", "participation_params", "participation"),
    "optimizer": Component("optimizer", "optimizer_params", "optimizer"),
    "server_opt": Component("server_opt", "server_opt_params", "server_opt"),
    "aggregator": Component("aggregator", "aggregator_params", "aggregator"),
    "engine": Component("engine", "engine_params", "engine"),
    "store": Component("store", "store_params", "store"),
    "diagnostics": Component("diagnostics", "diagnostics_params", "diagnostic"),
    "privacy": Component("privacy", "privacy_params", "privacy"),
    "scenario": Component("scenario", "scenario_params", "scenario"),
    "replay": Component("replay", "replay_params", "replay"),
}
# keys that name a registry entry without options: key -> its registry's kind
NAMED = {"loss": "loss", "tracking": "tracker"}


def declared(kind_name: str) -> Registry | None:
    """The registry of ``kind_name`` where an imported module declares it (a kind of an upper
    layer may not be yet), else None."""
    return kind(kind_name) if kind_name in kinds() else None


_PARAM_FIELDS = {c.params_field for c in COMPONENTS.values()}
_FIELDS = {f.name: f for f in dataclasses.fields(Config) if f.name not in _PARAM_FIELDS}
# keys of earlier versions -> their names now (old TOML files and checkpoints)
RENAMED = {
    "vmap_chunk": "engine.chunk",
    "vmap_compile": "engine.compile",
    "flower_client_cpus": "engine.client_cpus",
    "flower_reply_timeout": "engine.reply_timeout",
    "client_store": "store",
    "client_store_dtype": "store.dtype",
    "diagnostics_rounds": "diagnostics.rounds",
    "diagnostics_reference": "diagnostics.reference",
    "diagnostics_samples": "diagnostics.samples",
    "momentum": "optimizer.momentum",
    "weight_decay": "optimizer.weight_decay",
}


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
        if start < 0 or not 0 < value < math.inf:
            raise ConfigError(
                f"lr_schedule: need ROUND >= 0 and a finite LR > 0, got {start}={value}"
            )
    return sorted(out)


def parse_value(text: str) -> Any:
    """A command-line value as TOML would read it (numbers, booleans, lists), else a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _unknown_key(key: str, valid: list[str]) -> ConfigError:
    if key in RENAMED:
        return ConfigError(f"key '{key}' is now '{RENAMED[key]}'; write {RENAMED[key]}=...")
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"unknown key '{key}'{hint}; valid keys: {', '.join(sorted(valid))}")


def flat_settings(data: dict[str, Any]) -> dict[str, Any]:
    """TOML tables to dotted keys; a component table's ``name`` becomes the component. Keys of
    earlier versions (:data:`RENAMED`) take their new names; those that only applied to a
    component the file did not choose (``vmap_chunk`` of a sequential run) are dropped."""
    flat: dict[str, Any] = {}
    renamed = []
    for key, value in data.items():
        if key in RENAMED:
            renamed.append(RENAMED[key])
        key = RENAMED.get(key, key)
        if isinstance(value, dict):
            if key not in COMPONENTS:
                raise _unknown_key(key, list(_FIELDS) + [f"[{g}]" for g in COMPONENTS])
            for sub, v in value.items():
                if sub == "name" and key != "algo":
                    flat[key] = v
                else:
                    flat[f"{key}.{sub}"] = v
        else:
            flat[key] = value
    for key in renamed:
        prefix, _, param = key.partition(".")
        if param and not _applies(prefix, param, flat.get(prefix)):
            del flat[key]
    return flat


def _applies(prefix: str, param: str, chosen: Any) -> bool:
    """Whether ``prefix.param`` is a parameter of the chosen component(s) (or the default)."""
    comp = COMPONENTS[prefix]
    if chosen is None:
        chosen = getattr(Config(), comp.name_field)
    names = chosen if isinstance(chosen, list) else [chosen]
    registry = declared(comp.kind)
    if registry is None:  # its layer is not loaded: kept, for that layer to check
        return True
    return any(n in registry and param in registry.params(n) for n in names)


def load_toml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from None
    try:
        return flat_settings(tomllib.loads(text))
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
    valid = list(_FIELDS) + [f"{g}.<param>" for g in COMPONENTS]
    for key, value in values.items():
        group, dot, sub = key.partition(".")
        if dot:
            if group not in COMPONENTS or not sub:
                raise _unknown_key(key, valid)
            getattr(cfg, COMPONENTS[group].params_field)[sub] = value
        elif key in _FIELDS:
            setattr(cfg, key, coerce(key, value, getattr(Config(), key)))
        else:
            raise _unknown_key(key, valid)
    validate(cfg)
    return cfg


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> Config:
    """The file's settings, then the overrides. An override that chooses another component
    (``partition=iid`` over a file's ``[partition]`` table) replaces the file's options of it."""
    return make_config(config_values(path, overrides))


def config_values(path: str | Path | None = None, overrides: list[str] | None = None) -> dict:
    """The flat (dotted) settings :func:`load_config` builds its :class:`Config` from."""
    values = load_toml(path) if path else {}
    changes = parse_overrides(overrides or [])
    for prefix, comp in COMPONENTS.items():
        name = comp.name_field
        if name in changes and name in values and changes[name] != values[name]:
            values = {k: v for k, v in values.items() if not k.startswith(prefix + ".")}
    return {**values, **changes}


def _positive(cfg: Config, *keys: str, minimum: float = 1) -> None:
    for key in keys:
        value = getattr(cfg, key)
        if value < minimum:
            raise ConfigError(f"{key} must be >= {minimum}, got {value}")


def _finite(key: str, value: Any) -> None:
    """Refuse NaN and infinity in a number (or a list of numbers) the config sets."""
    values = value if isinstance(value, list) else [value]
    bad = [v for v in values if isinstance(v, float) and not math.isfinite(v)]
    if bad:
        raise ConfigError(f"{key} must be a finite number, got {toml_text(bad[0])}")


def component_names(cfg: Config, prefix: str) -> list[str]:
    """The component(s) chosen for ``prefix`` (a list only for ``diagnostics``; none for an
    empty name)."""
    value = getattr(cfg, COMPONENTS[prefix].name_field)
    return list(value) if isinstance(value, list) else [value] if value else []


def component_params(cfg: Config, prefix: str) -> dict[str, Any]:
    """The parameters of ``prefix``'s component(s) with every default filled in (those set
    alone where no imported module declares its kind)."""
    registry = declared(COMPONENTS[prefix].kind)
    defaults: dict[str, Any] = {}
    for name in component_names(cfg, prefix) if registry is not None else []:
        defaults.update(registry.params(name))
    return {**defaults, **getattr(cfg, COMPONENTS[prefix].params_field)}


def validate(cfg: Config) -> None:
    """Check every value: scalars here, each component's name and parameters against its
    registry (one place: :mod:`fedretain.registry`), then what the algorithm requires. No
    number may be NaN or infinite. A section whose kind no imported module declares (a
    diagnostic before the run's layer is loaded) is left to that layer."""
    for key in _FIELDS:
        _finite(key, getattr(cfg, key))
    _positive(
        cfg, "clients", "clients_per_round", "rounds", "batch_size", "eval_every", "local_epochs"
    )
    _positive(
        cfg,
        "local_steps",
        "seed",
        "threads",
        "checkpoint_every",
        "eval_batch_size",
        "test_samples",
        minimum=0,
    )
    _positive(cfg, "stop_after", minimum=0)
    if cfg.stop_after and not cfg.checkpoint_every:
        raise ConfigError(
            "stop_after pauses a run at a checkpoint, and checkpoint_every=0 saves none; set "
            "checkpoint_every >= 1 (or stop_after=0)"
        )
    if cfg.clients_per_round > cfg.clients:
        raise ConfigError(
            f"clients_per_round ({cfg.clients_per_round}) cannot exceed clients ({cfg.clients})"
        )
    if not cfg.lr > 0:
        raise ConfigError(f"lr must be > 0, got {cfg.lr}")
    if not 0 < cfg.gpu_share <= 1:
        raise ConfigError(
            f"gpu_share must be in (0, 1] (the share of its GPU a run may plan for), got "
            f"{cfg.gpu_share}"
        )
    if not 0 <= cfg.val_fraction < 1:
        raise ConfigError(f"val_fraction must be in [0, 1), got {cfg.val_fraction}")
    for t in cfg.targets:
        if not isinstance(t, int | float) or not 0 < t <= 1:
            raise ConfigError(f"targets must be accuracies in (0, 1], got {t!r}")
    parse_lr_schedule(cfg.lr_schedule)
    if cfg.on_divergence not in ON_DIVERGENCE:
        raise ConfigError(unknown_choice("on_divergence", cfg.on_divergence, ON_DIVERGENCE))
    if cfg.precision not in PRECISIONS:
        raise ConfigError(unknown_choice("precision", cfg.precision, PRECISIONS))
    if not (cfg.device == "cpu" or cfg.device.startswith("cuda")):
        raise ConfigError(f"device must be cpu or cuda[:N], got {cfg.device!r}")
    for prefix, comp in COMPONENTS.items():
        registry = declared(comp.kind)
        if registry is None:
            continue
        names = component_names(cfg, prefix)
        for name in names:
            registry.get(name)
        given = getattr(cfg, comp.params_field)
        if not names and given:
            raise ConfigError(
                f"{', '.join(f'{prefix}.{k}' for k in given)} set, but no {prefix} is chosen"
            )
        checked = {}
        for key, value in given.items():
            owner = next((n for n in names if key in registry.params(n)), names[0])
            checked.update(registry.check(owner, {key: value}, prefix))
            _finite(f"{prefix}.{key}", checked[key])
        setattr(cfg, comp.params_field, checked)
    # what a component checks across the config; loss and tracking are named, without options
    picked = [(c.kind, n) for p, c in COMPONENTS.items() for n in component_names(cfg, p)]
    picked.append(("loss", cfg.loss))
    if cfg.tracking:
        picked.append(("tracker", cfg.tracking))
    for kind_name, name in picked:
        registry = declared(kind_name)
        check = registry.get(name).meta.get("check") if registry is not None else None
        if check is not None:
            check(cfg)
    chosen = {"server_opt": bool(cfg.server_opt), "aggregator": cfg.aggregator != "mean"}
    fedretain.algorithms.check_server_side(cfg.algorithm, [k for k, on in chosen.items() if on])
    algorithms = kind("algorithm")
    requires = algorithms.get(cfg.algorithm).meta.get("requires", {})
    for key, (ok, why) in requires.items():
        prefix, _, param = key.partition(".")
        value = component_params(cfg, prefix)[param] if param else getattr(cfg, prefix)
        if not ok(value):
            raise ConfigError(f"{cfg.algorithm} with {key}={value}: {why}")
    # components cheap to build check their parameters' ranges when built
    kind("participation").build(cfg.participation, cfg.participation_params, 1, 1, 0)
    for prefix in ("optimizer", "server_opt", "aggregator"):
        comp = COMPONENTS[prefix]
        for name in component_names(cfg, prefix):
            kind(comp.kind).build(name, getattr(cfg, comp.params_field), prefix=prefix)
    if cfg.privacy:
        privacy_mechanism(cfg)


def privacy_mechanism(cfg: Config) -> Any:
    """The config's privacy mechanism (:mod:`fedretain.privacy.mechanisms`), or None."""
    if not cfg.privacy:
        return None
    registry = kind("privacy")
    supplied = {"batch_size": cfg.batch_size} if registry.takes(cfg.privacy, "batch_size") else {}
    return registry.build(cfg.privacy, cfg.privacy_params, prefix="privacy", **supplied)


def resolved(cfg: Config) -> dict[str, Any]:
    """The full configuration as TOML-ready data, every default filled in."""

    def full(params: dict[str, Any]) -> dict[str, Any]:
        return {
            k: list(v) if isinstance(v, tuple) else v for k, v in params.items() if v is not None
        }

    out: dict[str, Any] = {k: getattr(cfg, k) for k in _FIELDS}
    out["name"] = cfg.label
    for prefix, comp in COMPONENTS.items():
        params = full(component_params(cfg, prefix))
        if prefix == "algo":
            out["algo"] = params  # the algorithm's name is the top-level key ``algorithm``
        else:
            out[prefix] = {"name": getattr(cfg, comp.name_field), **params}
    return out


@dataclass(frozen=True)
class Setting:
    """One top-level key for help texts: its name, its default as TOML text, its meaning."""

    key: str
    default: str
    help: str


def describe_settings() -> list[Setting]:
    """Every top-level key of :class:`Config` (not the ``*_params`` fields: those are the
    ``<prefix>.<option>`` keys of :data:`COMPONENTS`), from the fields' ``metadata["help"]``."""
    defaults = Config()
    return [
        Setting(name, toml_text(getattr(defaults, name)), f.metadata.get("help", ""))
        for name, f in _FIELDS.items()
    ]


def param_help(prefix: str) -> str:
    """The meaning of the ``<prefix>.<option>`` keys (the ``*_params`` field's help)."""
    params_field = COMPONENTS[prefix].params_field
    return next(f for f in dataclasses.fields(Config) if f.name == params_field).metadata["help"]


def option_defaults(prefix: str, name: str) -> list[str]:
    """``<prefix>.<option>=<default>`` for each option of component ``name``."""
    registry = kind(COMPONENTS[prefix].kind)
    return [f"{prefix}.{k}={toml_text(v)}" for k, v in registry.params(name).items()]


def toml_text(value: Any) -> str:
    """A default as a TOML value (``"fedavg"``, ``0.05``, ``true``, ``[0.5, 0.6]``)."""
    if isinstance(value, tuple):
        value = list(value)
    if value is None:
        return "none"
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if value != value else "inf" if value > 0 else "-inf"
    return json.dumps(value, ensure_ascii=False)


def config_from_text(text: str, **overrides: Any) -> Config:
    """A :class:`Config` from the TOML text of a (resolved) configuration."""
    try:
        values = flat_settings(tomllib.loads(text))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"not a valid TOML configuration: {e}") from None
    return make_config({**values, **overrides})
