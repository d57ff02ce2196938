"""Privacy accounting of sample-level DP-SGD, per client, with Opacus's RDP accountant.

Each client's training is a composition of sampled Gaussian mechanisms, one per local step of
every round it took part in, with noise multiplier σ and sampling rate ``q = B / n_i``
(expected batch size over the client's training-set size). Its (ε, δ) comes from Rényi DP
(Mironov, Talwar, Zhang 2019, arXiv:1908.10530; Opacus's ``RDPAccountant``, converted with
Balle et al. 2020's bound over Opacus's default orders); the federation reports the largest ε
over clients. A client that never trained has spent nothing: ε = 0.

The RDP analysis assumes Poisson sampling (each example in each step independently with
probability q). Our local batches are fixed-size slices of seeded shuffles, and the noised sum
is divided by the expected batch size; as Opacus's documentation notes for shuffled
fixed-size batches, using the Poisson analysis for them is the standard approximation, not a
proof.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

History = tuple[tuple[float, float, int], ...]  # (noise_multiplier, sample_rate, steps), ...


def sample_rate(batch_size: int, num_samples: int) -> float:
    """A client's sampling rate per step, ``min(1, batch_size / num_samples)``."""
    return min(1.0, batch_size / max(num_samples, 1))


def history_epsilon(history: History, delta: float) -> float:
    """ε at ``delta`` of a composition of sampled Gaussian mechanisms (Opacus's RDP
    accountant with its default orders); 0 for no steps, inf for a step without noise."""
    history = tuple((float(s), float(q), int(n)) for s, q, n in history if n > 0 and q > 0)
    if not history:
        return 0.0
    if any(s == 0 for s, _, _ in history):
        return math.inf
    from opacus.accountants import RDPAccountant

    accountant = RDPAccountant()
    accountant.history = list(history)
    with warnings.catch_warnings():  # at large ε the optimum is the smallest order: ε is loose
        warnings.filterwarnings("ignore", "Optimal order is the (smallest|largest) alpha")
        return float(accountant.get_epsilon(delta=delta))


def rdp_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
    """ε at ``delta`` of ``steps`` sampled Gaussian mechanisms (noise multiplier σ, rate q)."""
    return history_epsilon(((noise_multiplier, sample_rate, steps),), delta)


class ClientAccountant:
    """Per-client histories of (noise multiplier, sampling rate, steps), one entry per run of
    equal settings (consecutive rounds with the same σ and q merge), and the largest ε over
    clients. Clients with the same history are computed once (cached)."""

    def __init__(self) -> None:
        self.histories: dict[int, list[tuple[float, float, int]]] = {}
        self._cache: dict[tuple[History, float], float] = {}

    def record(
        self, client_id: int, noise_multiplier: float, sample_rate: float, steps: int
    ) -> None:
        """Client ``client_id`` took ``steps`` DP-SGD steps with σ and rate q."""
        if steps < 0 or not 0 <= sample_rate <= 1 or noise_multiplier < 0:
            raise ValueError(
                f"bad accounting entry: noise_multiplier={noise_multiplier}, "
                f"sample_rate={sample_rate}, steps={steps}"
            )
        if steps == 0:
            return
        entry = (float(noise_multiplier), float(sample_rate), int(steps))
        history = self.histories.setdefault(int(client_id), [])
        if history and history[-1][:2] == entry[:2]:
            history[-1] = (*entry[:2], history[-1][2] + entry[2])
        else:
            history.append(entry)

    def client_epsilon(self, client_id: int, delta: float) -> float:
        """ε of one client (0 if it never trained)."""
        if int(client_id) not in self.histories:
            return 0.0
        history = tuple(self.histories[int(client_id)])
        key = (history, float(delta))
        if key not in self._cache:
            self._cache[key] = history_epsilon(history, delta)
        return self._cache[key]

    def epsilons(self, delta: float) -> dict[int, float]:
        """ε of every client that trained."""
        out = {cid: self.client_epsilon(cid, delta) for cid in sorted(self.histories)}
        # keep only the current histories' values: the cache does not grow round after round
        live = {(tuple(h), float(delta)) for h in self.histories.values()}
        self._cache = {k: v for k, v in self._cache.items() if k in live}
        return out

    def epsilon(self, delta: float) -> float:
        """The largest ε over clients (0 before any training)."""
        return max(self.epsilons(delta).values(), default=0.0)

    def state_dict(self) -> dict[str, Any]:
        """The histories as JSON-serialisable data (client ids as strings)."""
        return {
            "histories": {
                str(cid): [list(entry) for entry in history]
                for cid, history in sorted(self.histories.items())
            }
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the histories by those of :meth:`state_dict`."""
        self.histories = {
            int(cid): [(float(s), float(q), int(n)) for s, q, n in history]
            for cid, history in state["histories"].items()
        }
        self._cache.clear()


__all__ = ["ClientAccountant", "History", "history_epsilon", "rdp_epsilon", "sample_rate"]
