"""``model=acgan`` and ``replay=acgan``: the zoo model, the replay's client state and refusals."""

from dataclasses import replace

import pytest
import torch

from fedretain.algorithms import build_algorithm
from fedretain.continual.replay import generator_part, with_acgan_replay
from fedretain.errors import ConfigError
from fedretain.experiments.run import Run
from fedretain.models import build_model
from fedretain.recipe.config import make_config
from fedretain.registry import kind

CI = {
    "dataset": "digits",
    "scenario": "class_incremental",
    "scenario.tasks": 2,
    "scenario.classes_per_task": 2,
    "scenario.rounds_per_task": 2,
    "rounds": 4,
    "clients": 2,
    "clients_per_round": 2,
    "batch_size": 8,
    "local_steps": 2,
    "engine": "sequential",
    "threads": 1,
    "model": "acgan",
    "model.width": 4,
    "model.z_dim": 16,
    "replay": "acgan",
    "optimizer": "adam",
    "lr": 1e-3,
}


def test_acgan_is_a_zoo_model_whose_forward_is_the_classifier():
    assert "acgan" in kind("model")
    torch.manual_seed(0)
    model = build_model("acgan", (1, 8, 8), 10, width=4, z_dim=16)
    x = torch.rand(3, 1, 8, 8)
    assert torch.equal(model(x), model.discriminator.classify(x))
    assert model(x).shape == (3, 10)
    names = {n.split(".")[0] for n, _ in model.named_parameters()}
    assert names == {"generator", "discriminator"}
    assert model.generate(torch.randn(2, 16)).shape == (2, 1, 8, 8)


def test_replay_refuses_what_it_cannot_run():
    with pytest.raises(ConfigError, match="needs model=acgan"):
        make_config({**{k: v for k, v in CI.items() if not k.startswith("model.")}, "model": "mlp"})
    no_scenario = {k: v for k, v in CI.items() if not k.startswith("scenario")}
    with pytest.raises(ConfigError, match="scenario=class_incremental"):
        make_config({**no_scenario, "rounds": 4})
    own_step = replace(build_algorithm("fedavg"), local_step=lambda state, batch, ctx: None)
    with pytest.raises(ConfigError, match="fedavg or algorithm=fedprox"):
        with_acgan_replay(own_step, 2)


def test_replay_uses_the_clients_own_generator_of_its_last_task(tmp_path):
    cfg = make_config(CI)
    run = Run(cfg, tmp_path)
    run.start()
    assert run.rounds.algorithm.name == "fedavg+acgan"
    seen = {}
    algo = run.rounds.algorithm
    base_init = algo.local_init

    def spy(down, client_state, ctx):
        state = base_init(down, client_state, ctx)
        seen[(ctx.info.round, ctx.client_id)] = state["replay"]
        return state

    run.rounds.algorithm = replace(algo, local_init=spy)
    plan = run.fed.continual.plan
    stored = {}
    for rnd in range(cfg.rounds):
        run.round(rnd)
        stored[rnd] = {c: run.rounds.store[c] for c in range(2)}
    for cid in range(2):
        # task 0: nothing to replay
        assert float(seen[(0, cid)]["on"]) == 0.0 and float(seen[(1, cid)]["on"]) == 0.0
        # task 1: the generator the client trained in its last round of task 0 ...
        last = stored[1][cid]["last"]
        for rnd in (2, 3):
            prev = seen[(rnd, cid)]["prev"]
            assert set(prev) == set(last)
            assert all(torch.equal(prev[k], last[k]) for k in last)
            assert float(seen[(rnd, cid)]["on"]) == 1.0
        # ... replaying the classes of task 0, learning those of task 1
        past = seen[(2, cid)]["past"].nonzero().flatten().tolist()
        assert past == list(plan.classes[cid][0])
        cur = seen[(2, cid)]["cur"].nonzero().flatten().tolist()
        assert cur == list(plan.classes[cid][1])
        # "last" is the client's own trained generator, not the global one
        global_g = generator_part(run.server_state["x"])
        assert any(not torch.equal(global_g[k], stored[3][cid]["last"][k]) for k in global_g)


def test_replay_ledger_counts_the_declared_payloads(tmp_path):
    run = Run(make_config(CI), tmp_path)
    run.start()
    run.round(0)
    algo = run.rounds.algorithm
    assert set(run.rounds.ledger.by_key["up"]) == set(algo.uplink_keys)
    assert set(run.rounds.ledger.by_key["down"]) == set(algo.downlink_keys)


DGR = {
    **{k: v for k, v in CI.items() if not k.startswith("model")},
    "model": "mlp",
    "model.hidden": [16],
    "replay": "dgr",
    "replay.width": 4,
    "replay.z_dim": 16,
}


def test_dgr_keeps_its_gan_private_and_shares_the_classifier(tmp_path):
    run = Run(make_config(DGR), tmp_path)
    run.start()
    assert run.rounds.algorithm.name == "fedavg+dgr"
    classifier = set(run.server_state["x"])
    assert not any(k.startswith(("generator.", "discriminator.")) for k in classifier)
    gans = []
    for rnd in range(4):
        run.round(rnd)
        gans.append({c: run.rounds.store[c]["gan"] for c in range(2)})
        # the uplink is the classifier alone: the ledger counts its bytes, no GAN
        assert set(run.rounds.ledger.by_key["up"]) == {"y", "buffers"}
    for cid in range(2):
        g0, g3 = gans[0][cid], gans[3][cid]
        assert any(not torch.equal(g0[k], g3[k]) for k in g0)  # trained, and kept
        state = run.rounds.store[cid]
        # task 1: the generator and classifier of the end of task 0 are the replay's
        assert all(torch.equal(state["prev_gen"][k], gans[1][cid][k]) for k in g0)
        assert state["past"].nonzero().flatten().tolist() == list(
            run.fed.continual.plan.classes[cid][0]
        )
    # the two clients' GANs are their own
    assert any(not torch.equal(gans[3][0][k], gans[3][1][k]) for k in gans[3][0])


def test_dgr_needs_a_scenario():
    no_scenario = {k: v for k, v in DGR.items() if not k.startswith("scenario")}
    with pytest.raises(ConfigError, match="scenario=class_incremental"):
        make_config({**no_scenario, "rounds": 4})


def test_generator_quality_records_fid_and_sample_grids(tmp_path):
    from fedretain.experiments.run import run_experiment
    from fedretain.files import read_jsonl

    cfg = make_config(
        {
            **CI,
            "rounds": 4,
            "diagnostics": ["generator_quality"],
            "diagnostics.fid_every": 3,
            "diagnostics.fid_samples": 40,
            "diagnostics.per_class": 2,
            "diagnostics.cache_dir": str(tmp_path / "cache"),
        }
    )
    summary = run_experiment(cfg, tmp_path / "run", progress=False)
    rows = read_jsonl(tmp_path / "run" / "generator_quality.jsonl")
    assert [r["round"] for r in rows] == [2, 3, 4]  # task ends, every 3 rounds, the last
    assert all(r["fid"] >= 0 for r in rows) and [r["task"] for r in rows] == [0, 1, 1]
    for png in ("samples/task-0.png", "samples/task-1.png", "fid.png"):
        assert (tmp_path / "run" / png).stat().st_size > 0
    assert summary["generator_quality"]["fid"] == rows[-1]["fid"]
    with pytest.raises(ConfigError, match="model=acgan"):
        make_config({**DGR, "diagnostics": ["generator_quality"]})


def test_a_studys_feature_network_is_made_once_and_read_where_it_is_placed(tmp_path, monkeypatch):
    """What a study on Ray ships (reproduce/cluster.py): the FID feature network made on the
    caller, put in a node's cache, measures that node's run without training one of its own."""
    from fedretain.continual import quality
    from fedretain.experiments.generator_quality import feature_net_file, place_feature_net
    from fedretain.experiments.run import run_experiment

    settings = {
        **CI,
        "rounds": 4,
        "diagnostics": ["generator_quality"],
        "diagnostics.fid_samples": 40,
        "diagnostics.cache_dir": str(tmp_path / "caller"),
    }
    assert (
        feature_net_file(make_config({**CI, "rounds": 4})) is None
    )  # no FIDs measured: nothing to ship
    name, data = feature_net_file(make_config(settings))  # trained here, cached
    assert (tmp_path / "caller" / name).read_bytes() == data

    def trains(*args, **kwargs):
        raise AssertionError("a feature network was trained again")

    monkeypatch.setattr(quality, "train_feature_net", trains)
    assert feature_net_file(make_config(settings)) == (name, data)  # from the cache
    node = make_config({**settings, "diagnostics.cache_dir": str(tmp_path / "node")})
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / name).write_bytes(b"trained on the node's own CPU")
    assert place_feature_net(node, (name, data)).read_bytes() == data  # replaced
    run_experiment(node, tmp_path / "run", progress=False)  # no training: the placed network
    assert (tmp_path / "run" / "generator_quality.jsonl").read_text()
