"""Per-client RDP accounting: Opacus's ε against an independent computation, the ledger."""

import json
import math

import numpy as np
import pytest

pytest.importorskip("opacus", reason="needs Opacus (opacus is not installed)")
from opacus.accountants import RDPAccountant
from scipy.special import gammaln, logsumexp

from fedretain.privacy.accounting import (
    ClientAccountant,
    history_epsilon,
    rdp_epsilon,
    sample_rate,
)

INTEGER_ORDERS = list(range(2, 64))


def sgm_rdp(q: float, sigma: float, alpha: int) -> float:
    """RDP of one sampled Gaussian mechanism at integer order alpha (Mironov, Talwar, Zhang
    2019, arXiv:1908.10530, section 3.3): log(A_alpha) / (alpha - 1) with
    A_alpha = sum_k C(alpha, k) (1 - q)^(alpha - k) q^k exp((k^2 - k) / (2 sigma^2))."""
    k = np.arange(alpha + 1)
    log_binom = gammaln(alpha + 1) - gammaln(k + 1) - gammaln(alpha - k + 1)
    terms = (
        log_binom + (alpha - k) * math.log1p(-q) + k * math.log(q) + (k * k - k) / (2 * sigma**2)
    )
    return float(logsumexp(terms)) / (alpha - 1)


def independent_epsilon(q: float, sigma: float, steps: int, delta: float) -> float:
    """(eps, delta) from RDP over integer orders (Balle et al. 2020, Thm 21, the conversion
    Opacus's get_privacy_spent uses): min over alpha of
    rdp(alpha) - (log delta + log alpha) / (alpha - 1) + log((alpha - 1) / alpha)."""
    best = math.inf
    for a in INTEGER_ORDERS:
        rdp = steps * sgm_rdp(q, sigma, a)
        eps = rdp - (math.log(delta) + math.log(a)) / (a - 1) + math.log((a - 1) / a)
        best = min(best, eps)
    return best


@pytest.mark.parametrize(
    ("q", "sigma", "steps", "delta"), [(0.01, 1.1, 1000, 1e-5), (0.1, 2.0, 100, 1e-5)]
)
def test_opacus_rdp_matches_an_independent_computation(q, sigma, steps, delta):
    mine = independent_epsilon(q, sigma, steps, delta)
    accountant = RDPAccountant()
    accountant.history = [(sigma, q, steps)]
    theirs = accountant.get_epsilon(delta=delta, alphas=INTEGER_ORDERS)
    assert theirs == pytest.approx(mine, rel=1e-6)
    # the default orders (fractional ones too) can only tighten the bound, and not by much
    ours = rdp_epsilon(sigma, q, steps, delta)
    assert mine * 0.9 < ours <= mine + 1e-9
    assert 0.1 < ours < 10


def test_composition_adds_up():
    # the same mechanism in two entries equals one entry with the steps summed
    one = history_epsilon(((1.1, 0.01, 600),), 1e-5)
    two = history_epsilon(((1.1, 0.01, 200), (1.1, 0.01, 400)), 1e-5)
    assert one == pytest.approx(two, rel=1e-12)
    assert rdp_epsilon(1.1, 0.01, 0, 1e-5) == 0.0
    assert rdp_epsilon(0.0, 0.01, 10, 1e-5) == math.inf
    assert sample_rate(32, 500) == pytest.approx(0.064)
    assert sample_rate(32, 20) == 1.0


def test_client_accountant_takes_the_max_over_clients():
    acc = ClientAccountant()
    assert acc.epsilon(1e-5) == 0.0
    for rnd in range(3):
        acc.record(0, 1.0, 0.1, 5)  # client 0 every round
        acc.record(1, 1.0, 0.1, 5)  # client 1 every round: same history
        if rnd == 0:
            acc.record(2, 1.0, 0.05, 10)  # client 2 once, a smaller rate
    assert acc.histories[0] == [(1.0, 0.1, 15)]
    eps = acc.epsilons(1e-5)
    assert eps[0] == eps[1] == pytest.approx(rdp_epsilon(1.0, 0.1, 15, 1e-5))
    assert eps[2] == pytest.approx(rdp_epsilon(1.0, 0.05, 10, 1e-5))
    assert eps[2] < eps[0]
    assert acc.epsilon(1e-5) == max(eps.values())
    assert acc.client_epsilon(7, 1e-5) == 0.0  # never took part
    assert 7 not in eps
    # identical histories share one cached value
    assert len(acc._cache) == 2


def test_client_accountant_state_round_trips_through_json():
    acc = ClientAccountant()
    acc.record(3, 1.2, 0.02, 50)
    acc.record(3, 0.8, 0.02, 10)
    acc.record(11, 1.2, 0.5, 4)
    state = json.loads(json.dumps(acc.state_dict()))
    again = ClientAccountant()
    again.load_state_dict(state)
    assert again.histories == acc.histories
    assert again.epsilon(1e-5) == acc.epsilon(1e-5)
    again.record(3, 0.8, 0.02, 5)  # continues where it stopped
    assert again.histories[3][-1] == (0.8, 0.02, 15)


def test_bad_entries_are_refused():
    acc = ClientAccountant()
    with pytest.raises(ValueError):
        acc.record(0, 1.0, 1.5, 1)
    with pytest.raises(ValueError):
        acc.record(0, -1.0, 0.1, 1)
    acc.record(0, 1.0, 0.1, 0)  # no steps: nothing recorded
    assert acc.histories == {}
