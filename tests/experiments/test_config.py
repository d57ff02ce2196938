import pytest

from fedretain.errors import ConfigError
from fedretain.recipe.config import (
    Config,
    load_config,
    make_config,
    parse_lr_schedule,
    parse_overrides,
    resolved,
)


def test_defaults_validate():
    cfg = make_config({})
    assert cfg == Config(**{**cfg.__dict__})
    assert cfg.label == "fedavg"


def test_overrides_are_typed_like_toml():
    values = parse_overrides(["rounds=5", "lr=0.1", "model.hidden=[64, 32]", "algorithm=fedprox"])
    assert values == {"rounds": 5, "lr": 0.1, "model.hidden": [64, 32], "algorithm": "fedprox"}
    cfg = make_config({**values, "algo.mu": 1, "model": "mlp"})
    assert cfg.algo == {"mu": 1.0} and isinstance(cfg.algo["mu"], float)
    assert cfg.model_params == {"hidden": [64, 32]}


@pytest.mark.parametrize(
    "values, message",
    [
        ({"roundz": 5}, "unknown key 'roundz' \\(did you mean 'rounds'\\?\\)"),
        ({"rounds": "many"}, "rounds: expected an integer, got 'many'"),
        ({"rounds": 0}, "rounds must be >= 1, got 0"),
        ({"lr": -1}, "lr must be > 0"),
        ({"clients": 5, "clients_per_round": 6}, "clients_per_round \\(6\\) cannot exceed"),
        ({"algorithm": "fedavgg"}, "unknown algorithm 'fedavgg'.*choose one of"),
        ({"algorithm": "fedprox", "algo.muu": 1}, "unknown key 'algo.muu'.*algo.mu"),
        ({"algorithm": "fedprox", "algo.mu": "big"}, "algo.mu: expected a number"),
        ({"partition": "dirichlet", "partition.alpha": "x"}, "partition.alpha: expected a number"),
        ({"partition": "nope"}, "unknown partition 'nope'"),
        ({"model": "nope"}, "unknown model 'nope'"),
        ({"dataset": "nope"}, "unknown dataset 'nope'"),
        ({"loss": "nope"}, "unknown loss 'nope'"),
        ({"engine": "warp"}, "unknown engine 'warp'"),
        ({"precision": "fp16"}, "unknown precision 'fp16'.*choose one of: bf16, fp32"),
        ({"lr_schedule": "0:0.1"}, "lr_schedule: cannot read '0:0.1'"),
        ({"targets": [1.5]}, "targets must be accuracies in \\(0, 1\\]"),
        ({"bogus.key": 1}, "unknown key 'bogus.key'"),
    ],
)
def test_bad_values_name_key_value_and_choices(values, message):
    with pytest.raises(ConfigError, match=message):
        make_config(values)


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    "values, message",
    [
        ({"lr": INF}, r"^lr must be a finite number, got inf$"),
        ({"lr": NAN}, r"^lr must be a finite number, got nan$"),
        ({"val_fraction": -INF}, r"^val_fraction must be a finite number, got -inf$"),
        ({"lr_schedule": "0=0.01, 10=inf"}, r"^lr_schedule: need .*a finite LR > 0, got 10=inf$"),
        ({"algorithm": "fedprox", "algo.mu": INF}, r"^algo\.mu must be a finite number, got inf$"),
        ({"optimizer.momentum": NAN}, r"^optimizer\.momentum must be a finite number, got nan$"),
        ({"server_opt": "adam", "server_opt.lr": INF}, r"^server_opt\.lr must be a finite"),
        ({"server_opt": "sgd", "server_opt.lr": NAN}, r"^server_opt\.lr must be a finite"),
        ({"aggregator": "trimmed_mean", "aggregator.beta": NAN}, r"^aggregator\.beta must be"),
        ({"partition": "dirichlet", "partition.alpha": INF}, r"^partition\.alpha must be a"),
        ({"privacy": "dpsgd", "privacy.noise_multiplier": INF}, r"^privacy\.noise_multiplier"),
    ],
)
def test_nan_and_infinity_are_refused_in_one_line_naming_the_key(values, message):
    with pytest.raises(ConfigError, match=message) as err:
        make_config(values)
    assert "\n" not in str(err.value)


def test_evaluation_batch_defaults_to_100_for_a_convolutional_model_on_a_cpu():
    from fedretain.recipe.federation import build_federation

    small = {"dataset": "digits", "clients": 4, "clients_per_round": 2}
    assert build_federation(make_config({**small, "model": "resnet20"})).eval_batch == 100
    assert build_federation(make_config({**small, "model": "mlp"})).eval_batch == 1000
    fed = build_federation(make_config({**small, "model": "resnet20", "eval_batch_size": 7}))
    assert fed.eval_batch == 7
    with pytest.raises(ConfigError, match="eval_batch_size must be >= 0, got -1"):
        make_config({"eval_batch_size": -1})


def test_lr_schedule_steps_by_round():
    assert parse_lr_schedule("1000=0.1, 0=0.01") == [(0, 0.01), (1000, 0.1)]
    cfg = make_config({"lr": 0.5, "lr_schedule": "0=0.01, 1000=0.1"})
    assert cfg.lr_at(0) == 0.01 and cfg.lr_at(999) == 0.01 and cfg.lr_at(1000) == 0.1
    assert make_config({"lr": 0.5}).lr_at(10) == 0.5


def test_toml_tables_and_overrides(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text(
        'algorithm = "fedprox"\nrounds = 3\n[partition]\nname = "dirichlet"\nalpha = 0.1\n'
        "[algo]\nmu = 0.1\n"
    )
    cfg = load_config(path, ["rounds=4", "partition.alpha=0.5"])
    assert cfg.rounds == 4 and cfg.partition == "dirichlet"
    assert cfg.partition_params == {"alpha": 0.5} and cfg.algo == {"mu": 0.1}


def test_resolved_config_reads_back_the_same(tmp_path):
    import tomli_w

    cfg = make_config({"algorithm": "fedprox", "partition": "shards", "model": "mlp"})
    path = tmp_path / "config.toml"
    path.write_text(tomli_w.dumps(resolved(cfg)))
    again = load_config(path)
    assert resolved(again) == resolved(cfg)
    assert again.partition_params["classes_per_client"] == 2


def test_bad_toml_file_is_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("rounds = = 3\n")
    with pytest.raises(ConfigError, match="is not valid TOML") as e:
        load_config(path)
    assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")


def test_every_key_has_its_meaning_in_one_place():
    import dataclasses

    from fedretain.recipe.config import COMPONENTS, Config, describe_settings, param_help

    for f in dataclasses.fields(Config):
        assert f.metadata.get("help"), f"Config.{f.name} has no help text"
    settings = {s.key: s for s in describe_settings()}
    params_fields = {c.params_field for c in COMPONENTS.values()}
    assert set(settings) == {f.name for f in dataclasses.fields(Config)} - params_fields
    assert settings["rounds"].default == "20" and settings["algorithm"].default == '"fedavg"'
    assert settings["targets"].default == "[0.5, 0.6, 0.7, 0.8, 0.9]"
    assert settings["diagnostics"].default == "[]"
    assert all(param_help(prefix) for prefix in COMPONENTS)


def test_tracking_defaults_to_none_and_is_resolved():
    cfg = make_config({})
    assert cfg.tracking == "" and resolved(cfg)["tracking"] == ""


def test_an_override_choosing_another_component_replaces_the_files_options(tmp_path):
    path = tmp_path / "exp.toml"
    path.write_text(
        '[partition]\nname = "dirichlet"\nalpha = 0.1\n[engine]\nname = "vmap"\nchunk = 5\n'
    )
    cfg = load_config(path, ["partition=iid", "engine=sequential"])
    assert cfg.partition == "iid" and cfg.partition_params == {} and cfg.engine_params == {}
    kept = load_config(path, ["partition=dirichlet", "partition.alpha=0.5"])
    assert kept.partition_params == {"alpha": 0.5}  # the same component keeps its table
    assert load_config(path).engine_params == {"chunk": 5}
