"""The ``privacy`` component: differential privacy for a run, chosen by name.

- ``privacy=dpsgd``: sample-level DP-SGD in every client's local training (Abadi et al., CCS
  2016, arXiv:1607.00133; :mod:`fedretain.privacy.dpsgd`): per-example clipping to
  ``max_grad_norm``, Gaussian noise of ``noise_multiplier`` times it. Each client's accountant
  composes the steps of the rounds it took part in (sampling rate ``batch_size / n_i``); the run
  reports the largest ε over clients at ``delta``.
- ``privacy=client_fixed`` / ``privacy=client_adaptive``: client-level DP-FedAvg (McMahan et
  al., ICLR 2018, arXiv:1710.06963; adaptive clipping: Andrew et al., NeurIPS 2021,
  arXiv:1905.03871; :mod:`fedretain.privacy.client_dp`): each client's whole update is clipped
  and the server adds Gaussian noise, as Flower's ``DifferentialPrivacyServerSide*``
  strategies; ε for the sampling rate S/N over the rounds run.

A mechanism is built from the config (``privacy.<option>=value``), transforms the run's
algorithm (:meth:`Mechanism.apply`) and keeps the run's privacy accounting
(:meth:`Mechanism.accountant`), whose state goes into checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from torch import nn

from fedretain.core.algorithm import Algorithm, RoundInfo
from fedretain.core.client import Clients
from fedretain.errors import ConfigError
from fedretain.extras import require
from fedretain.privacy.accounting import ClientAccountant, rdp_epsilon
from fedretain.privacy.client_dp import ClientDP, with_client_dp
from fedretain.privacy.dpsgd import DPSGD, check_model, with_dpsgd
from fedretain.registry import Registry


class Accountant(Protocol):
    """A run's privacy ledger: told of every round, asked for ε."""

    def after_round(self, rnd: int, clients: list[int], lr: float) -> None: ...

    def metrics(self) -> dict[str, float]: ...

    def state(self) -> dict[str, Any]: ...

    def load_state(self, state: dict[str, Any]) -> None: ...


class SampleLevelAccountant:
    """One RDP accountant per client, composing (σ, batch_size / n_i, local steps) for every
    round the client took part in; ε is the largest over clients (clients with the same history
    share one computation). Rounds count for every sampled client, also one whose update was
    lost afterwards: it trained, so it spent its privacy."""

    def __init__(self, dp: DPSGD, delta: float, clients: Clients, algorithm: Algorithm) -> None:
        self.dp, self.delta, self.clients, self.algorithm = dp, delta, clients, algorithm
        self.ledger = ClientAccountant()

    def after_round(self, rnd: int, clients: list[int], lr: float) -> None:
        info = RoundInfo(rnd, len(self.clients), tuple(clients), lr, self.clients.seed)
        for cid in clients:
            steps = len(self.clients.plan(cid, info, self.algorithm))
            rate = min(1.0, self.dp.expected_batch_size / self.clients.size(cid))
            self.ledger.record(cid, self.dp.noise_multiplier, rate, steps)

    def metrics(self) -> dict[str, float]:
        return {"epsilon": self.ledger.epsilon(self.delta), "delta": self.delta}

    def state(self) -> dict[str, Any]:
        return self.ledger.state_dict()

    def load_state(self, state: dict[str, Any]) -> None:
        self.ledger.load_state_dict(state)


class ClientLevelAccountant:
    """One accountant for the whole federation: each round is one Gaussian mechanism on the
    clipped updates with sampling rate S/N and the configured noise multiplier (under adaptive
    clipping the model's noise and the clipped count's noise together spend what one Gaussian
    mechanism of that multiplier spends: Andrew et al. §3.1)."""

    def __init__(self, noise_multiplier: float, rate: float, delta: float) -> None:
        self.noise_multiplier, self.rate, self.delta = noise_multiplier, rate, delta
        self.rounds = 0

    def after_round(self, rnd: int, clients: list[int], lr: float) -> None:
        self.rounds = rnd + 1

    def metrics(self) -> dict[str, float]:
        eps = rdp_epsilon(self.noise_multiplier, self.rate, self.rounds, self.delta)
        return {"epsilon": eps, "delta": self.delta}

    def state(self) -> dict[str, Any]:
        return {"rounds": self.rounds}

    def load_state(self, state: dict[str, Any]) -> None:
        self.rounds = int(state["rounds"])


@dataclass(frozen=True)
class SampleLevel:
    """``privacy=dpsgd``."""

    dp: DPSGD
    delta: float

    def apply(self, algorithm: Algorithm, model: nn.Module) -> Algorithm:
        if algorithm.hints.schedule == "full_batch":
            raise ConfigError(
                f"privacy=dpsgd with {algorithm.name} (one full-batch step per round) is not "
                "supported: DP-SGD divides by the expected mini-batch size; use fedavg with "
                "batch_size and local_steps=1 for one noised step per round"
            )
        check_model(model)
        return with_dpsgd(algorithm, self.dp)

    def accountant(self, clients: Clients, algorithm: Algorithm, per_round: int) -> Accountant:
        return SampleLevelAccountant(self.dp, self.delta, clients, algorithm)


@dataclass(frozen=True)
class ClientLevel:
    """``privacy=client_fixed`` / ``client_adaptive``."""

    dp: ClientDP
    delta: float

    def apply(self, algorithm: Algorithm, model: nn.Module) -> Algorithm:
        return with_client_dp(algorithm, self.dp)

    def accountant(self, clients: Clients, algorithm: Algorithm, per_round: int) -> Accountant:
        self.dp.count_noise(per_round)  # a clipped-count noise too large is refused here
        return ClientLevelAccountant(self.dp.noise_multiplier, per_round / len(clients), self.delta)


Mechanism = SampleLevel | ClientLevel


def _delta(delta: float) -> float:
    if not 0 < delta < 1:
        raise ValueError(f"delta must be in (0, 1), got {delta} (e.g. 1e-5, below 1/N)")
    return delta


def dpsgd(
    noise_multiplier: float = 1.0,
    max_grad_norm: float = 1.0,
    delta: float = 1e-5,
    per_sample: str = "opacus",
    *,
    batch_size: int,
) -> SampleLevel:
    """Sample-level DP-SGD; the expected batch is the config's ``batch_size``.

    :param noise_multiplier: σ, the noise's standard deviation relative to max_grad_norm
    :param max_grad_norm: C, each example's gradient is clipped to this L2 norm
    :param delta: δ of the reported (ε, δ)
    :param per_sample: how per-example gradients are computed: opacus or functorch
    """
    dp = DPSGD(noise_multiplier, max_grad_norm, batch_size, per_sample)
    return SampleLevel(dp, _delta(delta))


def client_fixed(
    noise_multiplier: float = 1.0, clipping_norm: float = 1.0, delta: float = 1e-5
) -> ClientLevel:
    """Client-level DP with a fixed clipping norm (server side).

    :param noise_multiplier: σ, the noise's standard deviation relative to clipping_norm
    :param clipping_norm: each client's update is clipped to this L2 norm
    :param delta: δ of the reported (ε, δ)
    """
    return ClientLevel(ClientDP(noise_multiplier, clipping_norm), _delta(delta))


def client_adaptive(
    noise_multiplier: float = 1.0,
    clipping_norm: float = 0.1,
    target_quantile: float = 0.5,
    clip_lr: float = 0.2,
    clipped_count_stddev: float = -1.0,
    delta: float = 1e-5,
) -> ClientLevel:
    """Client-level DP with the clipping norm adapted towards a quantile of the update norms
    (``clipped_count_stddev`` < 0: Flower's default, clients per round / 20).

    :param noise_multiplier: σ, relative to the current clipping norm
    :param clipping_norm: the initial clipping norm
    :param target_quantile: quantile of the update norms the clipping norm moves towards
    :param clip_lr: learning rate of the clipping norm's geometric update
    :param clipped_count_stddev: noise on the count of clipped updates (< 0: clients per
        round / 20, Flower's default)
    :param delta: δ of the reported (ε, δ)
    """
    stddev = None if clipped_count_stddev < 0 else clipped_count_stddev
    dp = ClientDP(
        noise_multiplier,
        clipping_norm,
        adaptive=True,
        target_quantile=target_quantile,
        clip_lr=clip_lr,
        clipped_count_stddev=stddev,
    )
    return ClientLevel(dp, _delta(delta))


def needs_opacus(cfg: Any) -> None:
    """Every mechanism accounts its ε with Opacus's RDP accountant (DP-SGD also trains with
    Opacus): the privacy extra."""
    require("opacus", f"privacy={cfg.privacy}")


PRIVACY = Registry("privacy")
PRIVACY.add(
    "dpsgd",
    dpsgd,
    "sample-level DP-SGD in local training (Abadi 2016; Opacus)",
    check=needs_opacus,
)
PRIVACY.add(
    "client_fixed",
    client_fixed,
    "client-level DP-FedAvg, fixed clipping (McMahan 2018)",
    check=needs_opacus,
)
PRIVACY.add(
    "client_adaptive",
    client_adaptive,
    "client-level DP-FedAvg, adaptive clipping (Andrew 2021)",
    check=needs_opacus,
)

__all__ = [
    "PRIVACY",
    "Accountant",
    "ClientLevel",
    "Mechanism",
    "SampleLevel",
    "client_adaptive",
    "client_fixed",
    "dpsgd",
]
