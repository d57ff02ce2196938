"""precision=fp64: model, data and every algorithm state in float64, a reference for float32
runs; fp32 runs are untouched by it."""

import torch

from fedretain.core.tree import leaves, tree_map
from fedretain.data.base import as_float, as_input
from tests.engines.test_vmap_conformance import _max_diff, _run


def _floats(tree: dict) -> list[torch.Tensor]:
    return [t for t in leaves(tree) if t.is_floating_point()]


def test_fp64_runs_keep_the_model_the_data_and_the_states_in_float64():
    state, rounds = _run({"algorithm": "scaffold", "precision": "fp64"}, rounds=2)
    assert rounds.clients.data(0)["x"].dtype == torch.float64
    assert {t.dtype for t in _floats(state)} == {torch.float64}
    assert len(rounds.store) > 0
    for cid in rounds.store:
        assert {t.dtype for t in _floats(rounds.store[cid])} == {torch.float64}


def test_fp32_and_fp64_runs_differ_by_float32_rounding():
    # float32 against float64 after 2 rounds: 8.8e-8 seen (AVX-512 and AVX2 kernels, 1 and 2
    # threads); the bound keeps > 10x, a wrong step is off by 1e-3 or more
    fp32, _ = _run({"algorithm": "scaffold"}, rounds=2)
    fp64, _ = _run({"algorithm": "scaffold", "precision": "fp64"}, rounds=2)
    assert {t.dtype for t in _floats(fp32)} == {torch.float32}
    as64 = tree_map(lambda t: t.double() if t.is_floating_point() else t, fp32)
    assert 0 < _max_diff(as64, fp64) < 2e-6


def test_fp64_batches_scale_images_in_float64():
    images = torch.tensor([[[[0, 51], [255, 128]]]], dtype=torch.uint8)
    x64 = as_input(images, torch.float64)
    assert x64.dtype == torch.float64 and torch.equal(x64, images.double() / 255)
    assert torch.equal(as_input(images), as_float(images))  # fp32 runs: as before
    # float32 images are scaled the same way, to float32 rounding: a correctly rounded quotient
    # below 1 is within half a float32 ulp (2**-25) of the exact one
    assert torch.allclose(as_float(images).double(), x64, rtol=0, atol=2**-24)
    x = torch.rand(3, 4)
    assert torch.equal(as_input(x, torch.float64), x.double()) and as_input(x) is x


def test_fp64_runs_whole_with_forgetting_diagnostics_and_a_continual_scenario(tmp_path):
    from fedretain.experiments.run import run_experiment
    from fedretain.files import read_jsonl
    from fedretain.recipe.config import make_config
    from tests.continual.test_scenario import CI as CONTINUAL

    base = {"dataset": "digits", "model": "mlp", "model.hidden": [16], "rounds": 2}
    base |= {"clients": 4, "clients_per_round": 2, "local_steps": 2, "threads": 1}
    forgetting = {**base, "diagnostics": ["forgetting"], "precision": "fp64"}
    for name, keys in (("forgetting", forgetting), ("continual", CONTINUAL)):
        out = tmp_path / name
        summary = run_experiment(make_config({**keys, "precision": "fp64"}), out, progress=False)
        assert summary["rounds"] == keys["rounds"]
        assert all(0 <= r["test_accuracy"] <= 1 for r in read_jsonl(out / "metrics.jsonl"))
    assert read_jsonl(tmp_path / "forgetting" / "forgetting.jsonl")
