"""Each baseline against numbers computed by hand on the one-weight model of tests/tiny.py.

Local gradients at weight ``w``: client 0 ``w − 2``; client 1 ``4w``. ``lr = 0.1``.
"""

import pytest
import torch

from fedretain.algorithms import build_algorithm
from fedretain.core.algorithm import RoundInfo
from fedretain.core.optim import sgd as sgd_opt
from fedretain.errors import ConfigError
from tests.tiny import run_rounds, tiny_engine, w


def test_fedavg_weighted_mean_after_one_epoch():
    # client 0: 1 − 0.1·(−1) = 1.1; client 1: 1 − 0.1·4 = 0.6; weights 1 and 2
    state = run_rounds(tiny_engine(build_algorithm("fedavg")), 1)
    assert w(state) == pytest.approx((1.1 + 2 * 0.6) / 3, abs=1e-6)


def test_fedavg_unweighted_mean_and_two_epochs():
    # client 0: 1.1 then 1.1 + 0.09 = 1.19; client 1: 0.6 then 0.6 − 0.24 = 0.36
    state = run_rounds(tiny_engine(build_algorithm("fedavg", weighted=False), epochs=2), 1)
    assert w(state) == pytest.approx((1.19 + 0.36) / 2, abs=1e-6)


def test_sgd_takes_one_full_batch_step_whatever_the_epochs():
    state = run_rounds(tiny_engine(build_algorithm("sgd"), epochs=5), 1)
    assert w(state) == pytest.approx((1.1 + 2 * 0.6) / 3, abs=1e-6)


def test_fedavgm_two_rounds_of_heavy_ball():
    # round 1: mean 0.766667, Δ = 0.233333 = v, x = 0.766667
    # round 2: clients 0.89 and 0.46, mean 0.603333, Δ = 0.163333,
    #          v = 0.9·0.233333 + 0.163333 = 0.373333, x = 0.766667 − 0.373333 = 0.393333
    state = run_rounds(tiny_engine(build_algorithm("fedavgm", beta=0.9)), 2)
    assert w(state) == pytest.approx(0.393333, abs=1e-5)
    assert w(state, "server_opt/b") == pytest.approx(0.373333, abs=1e-5)


def test_fedavgm_with_zero_momentum_is_fedavg():
    a = run_rounds(tiny_engine(build_algorithm("fedavgm", beta=0.0)), 3)
    b = run_rounds(tiny_engine(build_algorithm("fedavg")), 3)
    assert w(a) == pytest.approx(w(b), abs=1e-6)


def test_fedprox_proximal_gradient():
    # μ = 1, 2 epochs. step 2 gradients: client 0 −0.9 + (1.1 − 1) = −0.8 -> 1.18;
    # client 1 2.4 + (0.6 − 1) = 2.0 -> 0.4; weighted mean (1.18 + 2·0.4)/3 = 0.66
    state = run_rounds(tiny_engine(build_algorithm("fedprox", mu=1.0), epochs=2), 1)
    assert w(state) == pytest.approx(0.66, abs=1e-6)


def test_fedproxm_combines_prox_clients_and_momentum_server():
    # one round from v = 0: x = 1 − (1 − 0.66) = 0.66, v = 0.34
    state = run_rounds(tiny_engine(build_algorithm("fedproxm", mu=1.0), epochs=2), 1)
    assert w(state) == pytest.approx(0.66, abs=1e-6)
    assert w(state, "server_opt/b") == pytest.approx(0.34, abs=1e-6)


def test_scaffold_two_rounds_by_hand():
    # round 1 (c = c_i = 0): y0 = 1.19, y1 = 0.36 (as FedAvg, 2 epochs)
    #   c_0 = (1 − 1.19)/0.2 = −0.95, c_1 = (1 − 0.36)/0.2 = 3.2
    #   x = 1 + (0.19 − 0.64)/2 = 0.775, c = (−0.95 + 3.2)/2 = 1.125
    engine = tiny_engine(build_algorithm("scaffold"), epochs=2)
    state = run_rounds(engine, 1)
    assert w(state) == pytest.approx(0.775, abs=1e-6)
    # c divides float32 differences of the models by K·lr = 0.2: 2.4e-7 seen, the bound keeps
    # >10x (AVX-512 and AVX2 kernels, 1 and 2 threads)
    assert w(state, "c") == pytest.approx(1.125, abs=3e-6)
    assert float(engine.store[0]["c_i"]["weight"].reshape(())) == pytest.approx(-0.95, abs=1e-5)
    assert float(engine.store[1]["c_i"]["weight"].reshape(())) == pytest.approx(3.2, abs=1e-5)
    # round 2: corrected gradients g + 2.075 (client 0) and g − 2.075 (client 1)
    #   client 0: 0.775 -> 0.69 -> 0.6135; client 1: 0.775 -> 0.6725 -> 0.611
    #   x = 0.775 + (−0.1615 − 0.164)/2 = 0.61225
    #   c_0 = −2.075 + 0.8075 = −1.2675, c_1 = 2.075 + 0.82 = 2.895, c = 0.81375
    state, _ = engine.run_round(state, 1, 0.1, per_round=2)
    assert w(state) == pytest.approx(0.61225, abs=1e-5)
    assert w(state, "c") == pytest.approx(0.81375, abs=1e-5)
    assert float(engine.store[0]["c_i"]["weight"].reshape(())) == pytest.approx(-1.2675, abs=1e-4)


def test_scaffold_divides_the_control_update_by_all_clients():
    algo = build_algorithm("scaffold")
    zero = {"weight": torch.zeros(1, 1)}
    state = algo.server_init(zero, {})
    uplinks = {
        "dy": {"weight": torch.tensor([[[0.0]], [[0.0]]])},
        "dc": {"weight": torch.tensor([[[1.0]], [[3.0]]])},
        "buffers": {},
    }
    info = RoundInfo(round=0, num_clients=4, clients=(0, 1), lr=0.1, seed=0)
    new, _ = algo.aggregate(state, uplinks, torch.tensor([1.0, 1.0]), info)
    assert float(new["c"]["weight"].reshape(())) == pytest.approx(1.0)  # (1 + 3) / N, N = 4


def test_scaffold_refuses_local_momentum():
    with pytest.raises(ConfigError, match="plain local SGD"):
        build_algorithm("scaffold", opt=sgd_opt(momentum=0.9))


def test_unknown_hyperparameter_is_named():
    with pytest.raises(ConfigError, match=r"algo\.mux.*algo\.mu"):
        build_algorithm("fedprox", mux=1.0)


def test_unknown_algorithm_lists_choices():
    with pytest.raises(ConfigError, match="did you mean 'fedavg'"):
        build_algorithm("fedavgg")


@pytest.mark.parametrize("name", ["scaffold", "mimelite", "fedreg"])
def test_plain_sgd_algorithms_refuse_weight_decay_too(name):
    """Their updates assume p - lr * g: weight decay changes that as momentum does."""
    with pytest.raises(ConfigError, match="plain local SGD"):
        build_algorithm(name, opt=sgd_opt(weight_decay=0.01))
    assert build_algorithm(name, opt=sgd_opt()).name == name
