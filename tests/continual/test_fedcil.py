"""FedCIL: consistency terms, model consolidation, refusals outside a continual scenario."""

import pytest
import torch

from fedretain.algorithms import build_algorithm, continual_only
from fedretain.continual.fedcil import Consistency, kl
from fedretain.core.tree import tree_map
from fedretain.errors import ConfigError
from fedretain.experiments.run import Run
from fedretain.recipe.config import make_config
from tests.continual.test_replay import CI

FEDCIL = {
    **{k: v for k, v in CI.items() if k != "replay"},
    "algorithm": "fedcil",
    "algo.consolidation_steps": 2,
    "algo.consolidation_batch": 4,
}


def test_each_consistency_loss_is_zero_when_the_distributions_agree():
    torch.manual_seed(0)
    logits = torch.randn(5, 4)
    labels = torch.tensor([0, 1, 2, 3, 0])
    terms = Consistency().losses(logits, logits, logits, logits, labels)
    assert float(terms["kl_real"]) == pytest.approx(0.0, abs=1e-7)
    assert float(terms["kl_generators"]) == pytest.approx(0.0, abs=1e-7)
    # CE: zero when the classifier's distribution on global samples agrees with their labels
    confident = 100.0 * torch.nn.functional.one_hot(labels, 4).float()
    terms = Consistency().losses(logits, logits, confident, confident, labels)
    assert float(terms["ce_global"]) == pytest.approx(0.0, abs=1e-7)
    # and positive otherwise; each weight scales its own term
    other = torch.randn(5, 4)
    terms = Consistency().losses(logits, other, logits, other, labels)
    assert float(terms["kl_real"]) > 0 and float(terms["kl_generators"]) > 0
    only_real = Consistency(kl_real=2.0, kl_generators=0.0, ce_global=0.0).weighted(terms)
    assert float(only_real) == pytest.approx(2 * float(terms["kl_real"]))


def test_kl_matches_torch():
    p, q = torch.randn(3, 5), torch.randn(3, 5)
    ref = torch.nn.KLDivLoss(reduction="batchmean")(torch.log_softmax(q, -1), torch.softmax(p, -1))
    assert float(kl(p, q)) == pytest.approx(float(ref), rel=1e-5)


def test_fedcil_refuses_the_non_continual_setting():
    assert "fedcil" in continual_only()
    with pytest.raises(ConfigError, match="scenario=class_incremental"):
        make_config({"algorithm": "fedcil", "model": "acgan", "dataset": "digits"})
    no_acgan = {k: v for k, v in FEDCIL.items() if not k.startswith("model")}
    with pytest.raises(ConfigError, match="model=acgan"):
        make_config({**no_acgan, "model": "mlp"})
    with pytest.raises(ConfigError, match="takes no server_opt"):
        make_config({**FEDCIL, "server_opt": "adam"})


def _round_uplinks(tmp_path):
    run = Run(make_config(FEDCIL), tmp_path)
    run.start()
    for rnd in range(3):  # into task 1: past classes, a trained global generator
        run.round(rnd)
    rounds, algo = run.rounds, run.rounds.algorithm
    opened = rounds.open(run.server_state, 3, 1e-3, clients=torch.arange(2).numpy())
    run.before = {c: tree_map(torch.clone, rounds.store[c]) for c in rounds.store}
    for trained in rounds.engine.train(opened.work):
        rounds.collect(opened, trained)
    return run, algo, opened


def test_consolidation_changes_only_the_global_model(tmp_path):
    run, algo, opened = _round_uplinks(tmp_path)
    uplinks = opened.stack.stacked()
    kept = tree_map(torch.clone, uplinks)
    weights = torch.tensor([run.rounds.clients.size(c) for c in range(2)], dtype=torch.float32)
    state = tree_map(torch.clone, run.server_state)
    new, _ = algo.aggregate(state, uplinks, weights, opened.info)
    # the uplinks and the server state passed in are untouched
    assert all(torch.equal(a, b) for a, b in zip(_leaves(kept), _leaves(uplinks), strict=True))
    assert all(
        torch.equal(a, b) for a, b in zip(_leaves(run.server_state), _leaves(state), strict=True)
    )
    # without consolidation the global model is FedAvg's mean; consolidation moves it
    plain = build_algorithm(
        "fedcil",
        model=run.fed.task.model,
        rounds_per_task=2,
        consolidation_steps=0,
    )
    merged, _ = plain.aggregate(tree_map(torch.clone, state), uplinks, weights, opened.info)
    assert set(new) == set(merged)
    assert any(not torch.equal(new["x"][k], merged["x"][k]) for k in new["x"])
    assert torch.equal(new["classes"], merged["classes"])
    expected = (weights[:, None] * uplinks["y"]["discriminator.head.bias"]).sum(0) / weights.sum()
    assert torch.allclose(merged["x"]["discriminator.head.bias"], expected, atol=1e-6)
    # the server learns the union of the uploaded classes
    union = torch.clamp(uplinks["classes"].sum(0), max=1.0)
    assert torch.equal(new["classes"], torch.clamp(state["classes"] + union, max=1.0))


def _leaves(tree):
    out = []
    for v in tree.values():
        out.extend(_leaves(v) if isinstance(v, dict) else [v])
    return out


def test_fedcil_ledger_counts_the_declared_payloads(tmp_path):
    run = Run(make_config(FEDCIL), tmp_path)
    run.start()
    run.round(0)
    algo = run.rounds.algorithm
    assert algo.downlink_keys == ("x", "buffers", "classes")
    assert set(run.rounds.ledger.by_key["up"]) == set(algo.uplink_keys)
    assert set(run.rounds.ledger.by_key["down"]) == set(algo.downlink_keys)
