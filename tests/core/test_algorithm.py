"""An algorithm's settings are its factory's, stamped; transformations add theirs and change its
hints; the local rule's chain (penalty, correction, optimiser step) is one."""

import inspect

import pytest
import torch

from fedretain.algorithms import ALGORITHMS, build_algorithm
from fedretain.algorithms.fedavg import fedavg
from fedretain.algorithms.fedprox import prox_penalty
from fedretain.core.algorithm import SUPPLIED, algorithm_factory, transform
from fedretain.core.local import LocalRule, make_local_init
from fedretain.core.optim import sgd
from fedretain.registry import config_key


def test_every_registered_algorithm_records_the_settings_its_config_names():
    import fedretain.continual  # noqa: F401  (registers the continual methods)

    for name in ALGORITHMS:
        factory = ALGORITHMS.get(name).factory
        params = inspect.signature(factory).parameters
        supplied = {"rounds_per_task": 2} if "rounds_per_task" in params else {}
        algo = factory(**supplied)
        expected = {
            config_key(k): supplied.get(k, p.default)
            for k, p in params.items()
            if p.default is not inspect.Parameter.empty and k not in SUPPLIED
        }
        assert set(algo.hparams) == set(expected), name
        derived = {k for k, v in expected.items() if v is None}  # a default the factory derives
        assert {k: v for k, v in algo.hparams.items() if k not in derived} == {
            k: v for k, v in expected.items() if k not in derived
        }, name


def test_the_settings_are_those_it_was_called_with_and_a_derived_default_is_recorded():
    algo = build_algorithm("fedcurv", **{"lambda": 0.5, "memory": True})
    assert algo.hparams["lambda"] == 0.5 and algo.hparams["memory"] is True
    fedreg = build_algorithm("fedreg", eta_s=0.1)
    assert fedreg.hparams["eta_p"] == pytest.approx(0.001)  # eta_p=None: 0.01 eta_s
    assert build_algorithm("fedreg", eta_s=0.1, eta_p=0.3).hparams["eta_p"] == 0.3


def test_a_variant_records_its_own_settings_not_those_of_what_it_is_built_on():
    @algorithm_factory
    def halved(*, factor: float = 0.5, opt=None):
        return transform(fedavg(weighted=False, opt=opt), name="halved")

    algo = halved(factor=0.25)
    assert (algo.name, algo.hparams) == ("halved", {"factor": 0.25})
    assert algo.follows_local_rule()  # transform kept FedAvg's step and its rule


def test_transform_adds_settings_and_replaces_only_the_hints_it_names():
    base = build_algorithm("fedprox", mu=0.1)
    changed = transform(
        base,
        name="fedprox+x",
        local_step=lambda state, batch, ctx: (state, {}),
        hparams={"x": 1},
        hints={"vectorisable": False, "sequential_because": "why"},
    )
    assert changed.hparams == {"mu": 0.1, "weighted": True, "x": 1}
    assert not changed.hints.vectorisable and changed.hints.sequential_because == "why"
    assert changed.hints.schedule == base.hints.schedule == "minibatch"
    assert changed.hints.local_rule is base.hints.local_rule
    assert base.follows_local_rule() and not changed.follows_local_rule()  # a step of its own
    assert base.hints.vectorisable and base.hparams == {"mu": 0.1, "weighted": True}


def test_the_local_rules_descent_adds_the_penalty_then_corrects_then_steps():
    # p = 1, anchor (the global model) 3, grads 2, lr 0.5, mu 0.1, correction + 0.4:
    # p - lr (g + mu (p - anchor) + 0.4) = 1 - 0.5 (2 - 0.2 + 0.4) = -0.1
    rule = LocalRule(sgd(), prox_penalty(0.1), lambda g, state: {"w": g["w"] + 0.4})
    down = {"x": {"w": torch.tensor([3.0])}, "buffers": {}}

    class Info:
        lr = 0.5

    class Ctx:
        info = Info()

    state = make_local_init(rule.opt, rule.penalty)(down, {}, Ctx())
    state = {**state, "params": {"w": torch.tensor([1.0])}}
    new = rule.descend(state, {"w": torch.tensor([2.0])}, {})
    assert new["params"]["w"].item() == pytest.approx(-0.1)
    assert new["lr_sum"].item() == pytest.approx(0.5)
    # a closed-form penalty is not added to the objective; an autograd one is
    assert rule.penalised(torch.tensor(1.0), state["params"], state).item() == 1.0
    plain = LocalRule(sgd(), lambda p, s: (p["w"] ** 2).sum())
    assert plain.penalised(torch.tensor(1.0), state["params"], state).item() == 2.0
