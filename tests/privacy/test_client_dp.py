"""Client-level DP (DP-FedAvg, fixed and adaptive clipping) against Flower 1.41's server-side
DP wrappers on the same replies, the noise's scale, determinism, refusals and accounting."""

from __future__ import annotations

import math

import numpy as np
import pytest

pytest.importorskip("flwr", reason="needs Flower (flwr is not installed)")
import torch
from flwr.app import Array, ArrayRecord
from flwr.serverapp import strategy as flwr_strategy
from flwr.supercore.differential_privacy import compute_adaptive_noise_params, compute_stdv

from fedretain.algorithms import build_algorithm
from fedretain.core.algorithm import RoundInfo
from fedretain.core.optim import sgd
from fedretain.errors import ConfigError
from fedretain.privacy.client_dp import ClientDP, client_dp_epsilon, with_client_dp
from tests.algorithms.test_server_side import (  # Flower replies; a run stamped on them
    _a_flower_run,  # noqa: F401 (an autouse fixture)
    _messages,
)
from tests.tiny import run_rounds, tiny_engine

SHAPES = {"a": (3, 4), "b": (4,)}  # a small model of two arrays, no buffers


def _fedavg(dp: ClientDP, **hparams):
    return with_client_dp(build_algorithm("fedavg", sgd(), **hparams), dp)


def _info(n: int, rnd: int = 0, seed: int = 0) -> RoundInfo:
    return RoundInfo(round=rnd, num_clients=50, clients=tuple(range(n)), lr=0.1, seed=seed)


def _replies(
    x0: dict[str, np.ndarray], rnd: int, n: int = 7
) -> tuple[list[dict[str, np.ndarray]], list[int]]:
    """``n`` clients' models around ``x0`` with update norms spread over about 0.3 to 3."""
    rng = np.random.default_rng([rnd, n])
    models = []
    for i in range(n):
        step = {k: rng.normal(size=s) for k, s in SHAPES.items()}
        norm = math.sqrt(sum(float((v**2).sum()) for v in step.values()))
        size = 0.3 + 2.7 * i / (n - 1)
        models.append({k: (x0[k] + v * size / norm).astype(np.float32) for k, v in step.items()})
    return models, [int(c) for c in rng.integers(5, 50, size=n)]


def _norms(x0: dict[str, np.ndarray], models: list[dict[str, np.ndarray]]) -> np.ndarray:
    return np.array(
        [math.sqrt(sum(float(((m[k] - x0[k]) ** 2).sum()) for k in SHAPES)) for m in models]
    )


def _stacked(models: list[dict[str, np.ndarray]]) -> dict:
    y = {k: torch.from_numpy(np.stack([m[k] for m in models])) for k in SHAPES}
    return {"y": y, "buffers": {}}


def _torch(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in arrays.items()}


def _flower_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: np.asarray(a.numpy(), dtype=np.float64) for k, a in record.items()}


def _close(ours: dict, theirs: dict[str, np.ndarray], tol: float = 1e-6) -> None:
    for k, v in theirs.items():
        np.testing.assert_allclose(ours[k].double().numpy(), v, atol=tol, rtol=tol, err_msg=k)


def _x0(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}


def test_fixed_clipping_without_noise_equals_flowers_server_side_wrapper_on_fedavg():
    """Two rounds: one with a clip norm between the updates' norms (some clipped, some not),
    one below them all; weights are the replies' num-examples."""
    n = 7
    current = _x0()
    # a norm between the 4th and 5th updates' (none on the edge), then one below them all
    picks = (lambda s: float(np.sort(s)[3:5].mean()), lambda s: 0.5 * float(s.min()))
    for rnd, pick in enumerate(picks):
        models, counts = _replies(current, rnd, n)
        norms = _norms(current, models)
        clip = pick(norms)
        theirs = flwr_strategy.DifferentialPrivacyServerSideFixedClipping(
            flwr_strategy.FedAvg(), noise_multiplier=0.0, clipping_norm=clip, num_sampled_clients=n
        )
        theirs.current_arrays = ArrayRecord({k: Array(v) for k, v in current.items()})
        record, _ = theirs.aggregate_train(rnd + 1, _messages(models, counts))
        expected = _flower_arrays(record)

        algo = _fedavg(ClientDP(noise_multiplier=0.0, clipping_norm=clip))
        state = algo.server_init(_torch(current), {})
        weights = torch.tensor(counts, dtype=torch.float32)
        new, metrics = algo.aggregate(state, _stacked(models), weights, _info(n, rnd))
        _close(new["x"], expected)
        assert float(metrics["clipped_fraction"]) == pytest.approx((norms > clip).mean())
        assert float(metrics["clip"]) == pytest.approx(clip)
        if rnd == 0:
            assert 0 < (norms > clip).sum() < n
        # clipping mattered: plain FedAvg on the same replies is elsewhere
        plain, _ = build_algorithm("fedavg", sgd()).aggregate(
            state, _stacked(models), weights, _info(n, rnd)
        )
        assert not np.allclose(plain["x"]["a"].numpy(), expected["a"], atol=1e-3)
        current = {k: v.astype(np.float32) for k, v in expected.items()}


@pytest.mark.parametrize("adaptive", [False, True])
def test_noise_std_is_sigma_clip_over_m_on_params_and_float_buffers(adaptive):
    """Noise on minus noise off, same replies: std σC/m (adaptive: Flower's adjusted z_Δ) on
    the 20,000 weights and the float buffer, mean 0; the integer buffer untouched."""
    n, sigma, clip, count_std = 8, 1.3, 0.5, 2.0
    gen = torch.Generator().manual_seed(0)
    x = {"w": torch.randn(200, 100, generator=gen)}
    buffers = {"bn.running_mean": torch.zeros(5000), "bn.num_batches_tracked": torch.tensor(3)}
    uplinks = {
        "y": {"w": x["w"] + 0.1 * torch.randn(n, 200, 100, generator=gen)},
        "buffers": {
            "bn.running_mean": 0.1 * torch.randn(n, 5000, generator=gen),
            "bn.num_batches_tracked": torch.full((n,), 7),
        },
    }
    kw = {"adaptive": True, "clipped_count_stddev": count_std} if adaptive else {}
    on = _fedavg(ClientDP(sigma, clip, **kw), weighted=False)
    off = _fedavg(ClientDP(0.0, clip, **{**kw, "clipped_count_stddev": 0.0}), weighted=False)
    weights = torch.ones(n)
    a, metrics = on.aggregate(on.server_init(x, buffers), uplinks, weights, _info(n))
    b, _ = off.aggregate(off.server_init(x, buffers), uplinks, weights, _info(n))
    assert float(metrics["clipped_fraction"]) == 1.0  # every update is above C: C bounds them
    z = compute_adaptive_noise_params(sigma, n, count_std)[1] if adaptive else sigma
    assert (z > sigma) == adaptive
    expected = compute_stdv(z, clip, n)
    for noise in (
        a["x"]["w"] - b["x"]["w"],
        a["buffers"]["bn.running_mean"] - b["buffers"]["bn.running_mean"],
    ):
        assert float(noise.std()) == pytest.approx(expected, rel=0.03)
        assert abs(float(noise.mean())) < 4 * expected / math.sqrt(noise.numel())
    assert int(a["buffers"]["bn.num_batches_tracked"]) == 7


def test_adaptive_norm_update_is_flowers_with_the_clipped_count_turned_round():
    """Noise off. Flower counts the clipped updates where Andrew et al. count the unclipped
    ones: with Flower's target 1 − γ its new norm is C²/ours; the model is the same."""
    n, gamma, lr = 7, 0.3, 0.2
    x0 = _x0(1)
    models, counts = _replies(x0, 0, n)
    norms = _norms(x0, models)
    clip = float(np.sort(norms)[4:6].mean())  # 2 of 7 above it
    theirs = flwr_strategy.DifferentialPrivacyServerSideAdaptiveClipping(
        flwr_strategy.FedAvg(),
        noise_multiplier=0.0,
        num_sampled_clients=n,
        initial_clipping_norm=clip,
        target_clipped_quantile=1 - gamma,
        clip_norm_lr=lr,
        clipped_count_stddev=0.0,
    )
    theirs.current_arrays = ArrayRecord({k: Array(v) for k, v in x0.items()})
    record, _ = theirs.aggregate_train(1, _messages(models, counts))

    dp = ClientDP(0.0, clip, adaptive=True, target_quantile=gamma, clip_lr=lr)
    algo = _fedavg(dp)
    state = algo.server_init(_torch(x0), {})
    weights = torch.tensor(counts, dtype=torch.float32)
    new, metrics = algo.aggregate(state, _stacked(models), weights, _info(n))
    ours = float(new["client_dp"]["clip"])
    unclipped = (norms <= clip).mean()
    assert unclipped == pytest.approx(5 / 7)
    assert ours == pytest.approx(clip * math.exp(-lr * (unclipped - gamma)), rel=1e-12)
    assert ours * theirs.clipping_norm == pytest.approx(clip**2, rel=1e-9)
    assert float(metrics["clip"]) == pytest.approx(clip)  # the round's norm
    _close(new["x"], _flower_arrays(record))


@pytest.mark.parametrize(("factor", "direction"), [(10.0, -1), (0.01, 1)])
def test_adaptive_norm_falls_when_all_updates_are_below_and_rises_when_all_are_above(
    factor, direction
):
    n, gamma, lr = 7, 0.5, 0.2
    x0 = _x0(2)
    models, counts = _replies(x0, 0, n)
    clip = factor * float(_norms(x0, models).max() if factor > 1 else _norms(x0, models).min())
    algo = _fedavg(ClientDP(0.0, clip, adaptive=True, target_quantile=gamma, clip_lr=lr))
    state = algo.server_init(_torch(x0), {})
    new, _ = algo.aggregate(state, _stacked(models), torch.tensor(counts).float(), _info(n))
    ratio = float(new["client_dp"]["clip"]) / clip
    assert math.copysign(1, math.log(ratio)) == direction
    assert ratio == pytest.approx(math.exp(direction * lr * gamma))


def test_adaptive_norm_settles_at_the_target_quantile_of_the_update_norms():
    """Update norms 1, 2, ..., 9 every round, γ = 0.5: the norm ends near the median, 5."""
    n = 9
    x = {"w": torch.zeros(4)}
    directions = torch.eye(4)[torch.arange(n) % 4]
    uplinks = {"y": {"w": directions * torch.arange(1.0, n + 1)[:, None]}, "buffers": {}}
    algo = _fedavg(ClientDP(0.0, 0.1, adaptive=True), weighted=False)
    state = algo.server_init(x, {})
    for rnd in range(150):
        state, _ = algo.aggregate({**state, "x": x}, uplinks, torch.ones(n), _info(n, rnd))
    assert 4.0 <= float(state["client_dp"]["clip"]) <= 6.0


def test_noise_is_seeded_by_seed_and_round_and_leaves_the_global_rngs_alone():
    n = 5
    x0 = _x0(3)
    models, counts = _replies(x0, 0, n)
    algo = _fedavg(ClientDP(1.0, 1.0, adaptive=True, clipped_count_stddev=1.0))
    weights = torch.tensor(counts).float()

    def run(rnd: int, seed: int) -> dict:
        state = algo.server_init(_torch(x0), {})
        return algo.aggregate(state, _stacked(models), weights, _info(n, rnd, seed))[0]

    torch_rng, np_rng = torch.get_rng_state(), np.random.get_state()
    first, again = run(3, 0), run(3, 0)
    assert torch.equal(torch.get_rng_state(), torch_rng)
    assert all(np.array_equal(a, b) for a, b in zip(np.random.get_state(), np_rng, strict=True))
    assert all(torch.equal(first["x"][k], again["x"][k]) for k in SHAPES)
    assert torch.equal(first["client_dp"]["clip"], again["client_dp"]["clip"])
    for other in (run(4, 0), run(3, 1)):
        assert not torch.allclose(first["x"]["a"], other["x"]["a"])
        assert float(first["client_dp"]["clip"]) != float(other["client_dp"]["clip"])


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("scaffold", r"its uplink \(dy, dc, buffers\) carries no model y"),
        ("gradma", r"its uplink \(d, buffers\) carries no model y"),
        ("mimelite", r"its uplink also carries grad"),
        ("mifa", r"its server averages a table"),
    ],
)
def test_algorithms_without_a_model_uplink_or_with_their_own_server_step_are_refused(name, why):
    with pytest.raises(ConfigError, match=rf"client DP cannot wrap {name}: {why}") as err:
        with_client_dp(build_algorithm(name, sgd()), ClientDP(1.0, 1.0))
    message = str(err.value)
    assert "\n" not in message
    composing = message.split("composes with", 1)[1]
    assert "fedavg" in composing and "fedprox" in composing and name not in composing


def test_wrapped_fedavg_keeps_its_name_gains_dp_hparams_and_runs_on_the_engine():
    dp = ClientDP(0.5, 0.05, adaptive=True, clipped_count_stddev=0.5)
    algo = _fedavg(dp)
    assert algo.name == "fedavg" and algo.hparams["weighted"] is True
    assert algo.hparams["dp_noise_multiplier"] == 0.5
    assert algo.hparams["dp_adaptive"] is True and algo.hparams["dp_clipped_count_stddev"] == 0.5
    engine = tiny_engine(algo)
    state = engine.algorithm.server_init(*engine.task.init())
    state, metrics = engine.run_round(state, 0, 0.1, per_round=2)
    assert metrics["clip"] == pytest.approx(0.05)
    assert metrics["clipped_fraction"] == 1.0  # the tiny updates are far above 0.05
    assert float(state["client_dp"]["clip"]) != pytest.approx(0.05)
    # without noise the tiny model moves by at most C per round
    quiet = run_rounds(tiny_engine(_fedavg(ClientDP(0.0, 0.05), weighted=False)), 1)
    assert abs(float(quiet["x"]["weight"].reshape(())) - 1.0) <= 0.05 + 1e-7


def test_settings_are_checked_in_one_line():
    bad = [
        ({"noise_multiplier": -1.0, "clipping_norm": 1.0}, "noise_multiplier must be >= 0"),
        ({"noise_multiplier": 1.0, "clipping_norm": 0.0}, "clipping_norm must be > 0"),
        ({"noise_multiplier": 1.0, "clipping_norm": 1.0, "target_quantile": 1.5}, r"\[0, 1\]"),
        ({"noise_multiplier": 1.0, "clipping_norm": 1.0, "clip_lr": 0.0}, "clip_lr must be > 0"),
        ({"noise_multiplier": float("nan"), "clipping_norm": 1.0}, "finite"),
        (
            {"noise_multiplier": 1.0, "clipping_norm": 1.0, "clipped_count_stddev": -1.0},
            "clipped_count_stddev must be >= 0",
        ),
        (
            {
                "noise_multiplier": 1.0,
                "clipping_norm": 1.0,
                "adaptive": True,
                "clipped_count_stddev": 0.4,
            },
            "not below twice clipped_count_stddev",
        ),
    ]
    for kw, match in bad:
        with pytest.raises(ConfigError, match=match) as err:
            ClientDP(**kw)
        assert "\n" not in str(err.value)
    # the default σ_b = m/20 is checked against the round: 10 clients, σ = 1 = 2 · 10/20
    dp = ClientDP(1.0, 1.0, adaptive=True)
    with pytest.raises(ConfigError, match="default clipped_count_stddev"):
        dp.model_noise_multiplier(10)
    for m in (11, 40):
        assert dp.model_noise_multiplier(m) == compute_adaptive_noise_params(1.0, m, None)[1]
    assert ClientDP(1.0, 1.0).model_noise_multiplier(10) == 1.0


def test_epsilon_is_opacus_rdp_and_grows_with_rounds_and_falls_with_sigma():
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    for _ in range(30):
        accountant.step(noise_multiplier=1.1, sample_rate=0.1)
    expected = accountant.get_epsilon(delta=1e-5)
    assert client_dp_epsilon(1.1, 0.1, 30, 1e-5) == pytest.approx(expected, rel=1e-12)
    eps = [client_dp_epsilon(1.1, 0.1, r, 1e-5) for r in (10, 30, 100)]
    assert eps[0] < eps[1] < eps[2]
    by_sigma = [client_dp_epsilon(s, 0.1, 30, 1e-5) for s in (0.8, 1.1, 2.0)]
    assert by_sigma[0] > by_sigma[1] > by_sigma[2]
    assert client_dp_epsilon(0.0, 0.1, 30, 1e-5) == math.inf
    assert client_dp_epsilon(1.1, 0.1, 0, 1e-5) == 0.0
    with pytest.raises(ConfigError, match="sample_rate"):
        client_dp_epsilon(1.1, 0.0, 30, 1e-5)
