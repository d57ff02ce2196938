"""Client-level differential privacy: DP-FedAvg as a transformation of any model-averaging
algorithm.

McMahan, Ramage, Talwar, Zhang, "Learning Differentially Private Recurrent Language Models",
ICLR 2018, arXiv:1710.06963 (fixed clipping); Andrew, Thakkar, McMahan, Ramaswamy,
"Differentially Private Learning with Adaptive Clipping", NeurIPS 2021, arXiv:1905.03871
(adaptive clipping).

:func:`with_client_dp` wraps an algorithm's ``server_init`` and ``aggregate`` as Flower 1.41's
``DifferentialPrivacyServerSideFixedClipping`` / ``...AdaptiveClipping`` wrap a strategy. Each
round, with the global model ``x`` and ``m`` replies:

1. each client's update ``Δ_i = y_i − x`` is clipped to norm ``C`` as one vector over the
   whole model (Flower's ``compute_clip_model_update``: ``Δ_i · min(1, C / ‖Δ_i‖)``) and its
   ``y_i`` replaced by ``x + clipped Δ_i``;
2. the wrapped algorithm aggregates these uplinks (its aggregator and server optimizer);
3. Gaussian noise ``N(0, (σC/m)²)`` (Flower's ``compute_stdv``) is added to the new model.

The model is what Flower's wrapper clips and noises: every array of a reply, which for a
PyTorch ``state_dict`` record includes the BatchNorm statistics. Here that is ``x`` and the
floating-point ``buffers`` (one norm over both: a client's statistics are its data too);
integer buffers (``num_batches_tracked``, a step counter) are left to the wrapped algorithm,
as Flower's noise cast to an integer array is zero below one unit anyway. Noised variances
(buffers named ``*running_var``) are clamped at zero, a post-processing that costs no privacy.

Adaptive clipping keeps the norm in the server state (``client_dp/clip``). The round's
updates are clipped to the current ``C``; ``b̄`` is the fraction of *unclipped* updates
(``‖Δ_i‖ ≤ C``) plus ``N(0, σ_b²)/m`` (``σ_b = clipped_count_stddev``, default ``m/20`` as
Flower's ``compute_adaptive_noise_params``); the model's noise uses the round's ``C`` and the
multiplier ``z_Δ = (σ⁻² − (2σ_b)⁻²)^(−1/2)``, so that model and count together are as private
as one Gaussian mechanism of multiplier ``σ`` (Andrew et al. §3.1); then
``C ← C·exp(−η_C (b̄ − γ))`` with ``γ = target_quantile`` the fraction of updates to leave
unclipped.

Where Flower 1.41's server-side adaptive wrapper departs from the paper (this module follows
the paper):

- it counts the *clipped* updates (``adaptive_clip_inputs_inplace`` returns
  ``scaling_factor < 1``) in place of the unclipped ``b_i``, so its norm falls when every update
  is above it and rises when all are below, away from the quantile: Flower's new norm with
  target ``1 − γ`` is ``C² / C_ours`` (the tests check exactly this);
- it draws the model noise with the norm *after* the round's update, not the norm the round's
  updates were clipped to.

Noise comes from a ``torch.Generator`` on the CPU seeded with ``(seed, stream, round)``, never
from the global RNGs: every engine and device draws the same numbers.

Guarantee: the noise ``σC/m`` bounds the change of an unweighted mean of the ``m`` clipped
updates. With sample-count weights (FedAvg's default ``weighted=True``, Flower's
``num-examples``) a client with more than ``1/m`` of the round's samples moves the model by
more than ``C/m``, so the guarantee needs ``weighted=False`` (McMahan et al. bound the weights
instead; Flower's own accountant demands equal weights). Noise added after a server optimizer
with state (momentum, Adam) does not privatise that state; the accounting assumes the model
moves by the noised mean, i.e. no server optimizer or a stateless one.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedretain.core.algorithm import Algorithm, RoundInfo, transform
from fedretain.core.tree import Tree, leaves, tree_map
from fedretain.errors import ConfigError
from fedretain.privacy.accounting import rdp_epsilon

log = logging.getLogger("fedretain")

# stream tag of the server's DP noise (fedretain.engines.schedule uses 1 to 3, the Flower
# client 7)
NOISE_STREAM = 11
_UPLINK = ("y", "buffers")


def _finite(name: str, value: float) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ConfigError(f"client DP {name} must be a finite number, got {value!r}")


@dataclass(frozen=True)
class ClientDP:
    """Client-level DP settings, with Flower's defaults and checks.

    ``noise_multiplier`` σ (0: clipping only), ``clipping_norm`` C (the initial norm when
    ``adaptive``); adaptive clipping: ``target_quantile`` γ (the fraction of updates to leave
    unclipped), ``clip_lr`` η_C, ``clipped_count_stddev`` σ_b (None: ``m/20`` for ``m``
    clients in the round, 0 when σ = 0, as Flower).
    """

    noise_multiplier: float
    clipping_norm: float
    adaptive: bool = False
    target_quantile: float = 0.5
    clip_lr: float = 0.2
    clipped_count_stddev: float | None = None

    def __post_init__(self) -> None:
        for name in ("noise_multiplier", "clipping_norm", "target_quantile", "clip_lr"):
            _finite(name, getattr(self, name))
        if self.noise_multiplier < 0:
            raise ConfigError(
                f"client DP noise_multiplier must be >= 0, got {self.noise_multiplier}; use 0 "
                "for clipping alone, about 1 or more for a meaningful guarantee"
            )
        if self.clipping_norm <= 0:
            raise ConfigError(
                f"client DP clipping_norm must be > 0, got {self.clipping_norm}; e.g. 1.0 "
                "(0.1 to start adaptive clipping, as Andrew et al.)"
            )
        if not 0 <= self.target_quantile <= 1:
            raise ConfigError(
                f"client DP target_quantile must be in [0, 1], got {self.target_quantile}; it "
                "is the fraction of updates to leave unclipped (e.g. 0.5)"
            )
        if self.clip_lr <= 0:
            raise ConfigError(f"client DP clip_lr must be > 0, got {self.clip_lr}; e.g. 0.2")
        if self.clipped_count_stddev is not None:
            _finite("clipped_count_stddev", self.clipped_count_stddev)
            if self.clipped_count_stddev < 0:
                raise ConfigError(
                    "client DP clipped_count_stddev must be >= 0 or unset (clients per round "
                    f"/ 20), got {self.clipped_count_stddev}"
                )
            if self.adaptive:
                self.count_noise(1)  # a σ the given σ_b cannot reach: refused now

    def count_noise(self, clients: int) -> tuple[float, float]:
        """``(σ_b, z_Δ)`` for a round of ``clients`` clients: the clipped count's noise and the
        model's noise multiplier under adaptive clipping (Flower's
        ``compute_adaptive_noise_params``); ``(0, σ)`` for fixed clipping."""
        if not self.adaptive:
            return 0.0, self.noise_multiplier
        sigma, stddev = self.noise_multiplier, self.clipped_count_stddev
        if sigma == 0:
            return (0.0 if stddev is None else stddev), 0.0
        if stddev is None:
            stddev = clients / 20
        if sigma >= 2 * stddev:
            given = (
                "clipped_count_stddev"
                if self.clipped_count_stddev is not None
                else (f"the default clipped_count_stddev (clients per round / 20 = {stddev:g})")
            )
            raise ConfigError(
                f"client DP noise_multiplier {sigma:g} is not below twice {given}: the noisy "
                f"clipped count alone would spend the budget; set clipped_count_stddev above "
                f"{sigma / 2:g}, lower noise_multiplier or sample more clients per round"
            )
        z_model = (sigma**-2 - (2 * stddev) ** -2) ** -0.5
        if z_model / sigma >= 2:
            log.warning(
                "client DP: the model's noise multiplier is %.2fx noise_multiplier to pay for "
                "the noisy clipped count; raise clipped_count_stddev or clients per round",
                z_model / sigma,
            )
        return stddev, z_model

    def model_noise_multiplier(self, clients: int) -> float:
        """The multiplier of the noise added to the model: σ for fixed clipping, ``z_Δ`` (a
        little above σ) for adaptive clipping. Account with :attr:`noise_multiplier`, not
        this: σ is the multiplier of the one Gaussian mechanism that model and count
        together equal (Andrew et al. §3.1; TFF's ``gaussian_adaptive``)."""
        return self.count_noise(clients)[1]

    def hparams(self) -> dict[str, Any]:
        return {
            "dp_noise_multiplier": self.noise_multiplier,
            "dp_clipping_norm": self.clipping_norm,
            "dp_adaptive": self.adaptive,
            "dp_target_quantile": self.target_quantile,
            "dp_clip_lr": self.clip_lr,
            "dp_clipped_count_stddev": self.clipped_count_stddev,
        }


@functools.cache
def composing_algorithms() -> tuple[str, ...]:
    """The registered algorithms client DP composes with: uplink the model ``y`` alone and a
    server step that is a model update (their factory takes ``server_opt``)."""
    from fedretain.algorithms import ALGORITHMS, build_algorithm

    names = []
    for name in ALGORITHMS:
        if not ALGORITHMS.takes(name, "server_opt"):
            continue
        try:
            if set(build_algorithm(name).uplink_keys) == set(_UPLINK):
                names.append(name)
        except Exception:  # a factory that needs settings: not listed
            continue
    return tuple(names)


def _check_composes(algorithm: Algorithm) -> None:
    from fedretain.algorithms import ALGORITHMS

    keys = tuple(algorithm.uplink_keys)
    why = None
    if "y" not in keys:
        why = f"its uplink ({', '.join(keys)}) carries no model y to clip"
    elif set(keys) != set(_UPLINK):
        extra = ", ".join(k for k in keys if k not in _UPLINK)
        why = f"its uplink also carries {extra}, which client DP neither clips nor noises"
    elif algorithm.name in ALGORITHMS and not ALGORITHMS.takes(algorithm.name, "server_opt"):
        meta = ALGORITHMS.get(algorithm.name).meta
        why = meta.get("server_step", "its server step is its own")
    if why is not None:
        raise ConfigError(
            f"client DP cannot wrap {algorithm.name}: {why}; it composes with the algorithms "
            f"whose uplink is the model and whose server step is a model update "
            f"({', '.join(composing_algorithms())})"
        )


def _generator(info: RoundInfo) -> torch.Generator:
    state = np.random.SeedSequence([info.seed, NOISE_STREAM, info.round]).generate_state(1)
    return torch.Generator(device="cpu").manual_seed(int(state[0]))


def _private(leaf: Tensor) -> bool:
    """Whether a leaf is clipped and noised: the floating-point ones."""
    return leaf.dtype.is_floating_point


def _norms(stacked: list[Tensor], centre: list[Tensor]) -> Tensor:
    """Each client's ‖y_i − x‖ over all the leaves together (float64)."""
    m = stacked[0].shape[0]
    sq = torch.zeros(m, dtype=torch.float64, device=stacked[0].device)
    for s, c in zip(stacked, centre, strict=True):
        d = (s - c.unsqueeze(0)).reshape(m, -1).double()
        sq = sq + (d * d).sum(dim=1)
    return sq.sqrt()


def _clip(models: Tree, centre: Tree, scale: Tensor) -> Tree:
    """``centre + scale_i (y_i − centre)`` on the private leaves; others as sent."""

    def leaf(s: Tensor, c: Tensor) -> Tensor:
        if not _private(s):
            return s
        f = scale.to(s.dtype).reshape(-1, *([1] * c.dim()))
        return c.unsqueeze(0) + (s - c.unsqueeze(0)) * f

    return tree_map(leaf, models, centre)


def _noised(tree: Tree, std: float, gen: torch.Generator, prefix: str = "") -> Tree:
    """``tree`` plus N(0, std²) on its private leaves, drawn in insertion order from ``gen``."""
    out: Tree = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out[key] = _noised(value, std, gen, name + "/")
        elif not _private(value):
            out[key] = value
        else:
            dtype = torch.float64 if value.dtype == torch.float64 else torch.float32
            noise = torch.randn(value.shape, generator=gen, dtype=dtype) * std
            new = value + noise.to(device=value.device, dtype=value.dtype)
            out[key] = new.clamp(min=0) if name.endswith("running_var") else new
    return out


def with_client_dp(algorithm: Algorithm, dp: ClientDP) -> Algorithm:
    """``algorithm`` with client-level DP on its server step (see the module docstring).

    Its name stays; its ``hparams`` gain the ``dp_*`` settings; ``aggregate`` also returns
    ``clip`` (the norm this round's updates were clipped to) and ``clipped_fraction`` (the
    exact fraction of clipped updates: a diagnostic of the server, not a private release).
    Refuses (``ConfigError``) an algorithm whose uplink is not the model alone or whose
    server step is its own.
    """
    _check_composes(algorithm)
    if algorithm.hparams.get("weighted"):
        log.warning(
            "client DP: %s averages with sample-count weights; the noise sigma*C/m is "
            "calibrated for the unweighted mean (weighted=False gives the stated guarantee)",
            algorithm.name,
        )
    inner_init, inner_aggregate = algorithm.server_init, algorithm.aggregate

    def server_init(params: Tree, buffers: Tree) -> Tree:
        state = inner_init(params, buffers)
        if dp.adaptive:
            device = leaves(params)[0].device if leaves(params) else None
            clip = torch.tensor(dp.clipping_norm, dtype=torch.float64, device=device)
            state = {**state, "client_dp": {"clip": clip}}
        return state

    def aggregate(
        server_state: Tree, uplinks: Tree, weights: Tensor, info: RoundInfo
    ) -> tuple[Tree, dict[str, Tensor]]:
        inner = {k: v for k, v in server_state.items() if k != "client_dp"}
        x, buffers = server_state["x"], server_state["buffers"]
        models = {"y": uplinks["y"], "buffers": uplinks["buffers"]}
        centre = {"y": x, "buffers": buffers}
        pairs = [(s, c) for s, c in zip(leaves(models), leaves(centre), strict=True) if _private(s)]
        m = leaves(uplinks["y"])[0].shape[0]
        norms = _norms([s for s, _ in pairs], [c for _, c in pairs])
        if dp.adaptive:
            clip = server_state["client_dp"]["clip"].to(norms.device, torch.float64)
        else:
            clip = torch.tensor(dp.clipping_norm, dtype=torch.float64, device=norms.device)
        # Flower: scaling_factor = min(1, C / ‖Δ‖), clipped when it is below 1
        scale = torch.clamp(clip / norms, max=1.0)
        clipped = scale < 1
        clipped_models = _clip(models, centre, scale)
        new_uplinks = {**uplinks, "y": clipped_models["y"], "buffers": clipped_models["buffers"]}

        gen = _generator(info)
        count_stddev, z_model = dp.count_noise(m)
        new_dp: Tree = {}
        if dp.adaptive:
            unclipped = (~clipped).sum().double()
            if count_stddev > 0:
                draw = torch.randn((), generator=gen, dtype=torch.float64).to(norms.device)
                unclipped = unclipped + count_stddev * draw
            fraction = unclipped / m
            new_clip = clip * torch.exp(-dp.clip_lr * (fraction - dp.target_quantile))
            new_dp = {"client_dp": {"clip": new_clip}}

        new_state, metrics = inner_aggregate(inner, new_uplinks, weights, info)
        std = z_model * float(clip) / m  # Flower's compute_stdv, with the round's norm
        if std > 0 and new_state["x"] is not x:  # the wrapped step released a new model
            new_state = {
                **new_state,
                "x": _noised(new_state["x"], std, gen),
                "buffers": _noised(new_state["buffers"], std, gen),
            }
        dp_metrics = {"clip": clip.float(), "clipped_fraction": clipped.double().mean().float()}
        return {**new_state, **new_dp}, {**metrics, **dp_metrics}

    # replace: every other field (and any added later, as a local rule) stays the algorithm's
    return transform(algorithm, server_init=server_init, aggregate=aggregate, hparams=dp.hparams())


def client_dp_epsilon(
    noise_multiplier: float, sample_rate: float, rounds: int, delta: float
) -> float:
    """ε after ``rounds`` rounds of client-level DP, each a subsampled Gaussian mechanism of
    multiplier ``noise_multiplier`` with ``sample_rate`` = clients per round / all clients
    (Opacus's ``RDPAccountant``; as McMahan et al.'s moments accountant, it assumes each
    client is in a round with that probability independently).

    For adaptive clipping pass the configured σ (:attr:`ClientDP.noise_multiplier`): the
    model's larger ``z_Δ`` and the count's ``2σ_b`` together spend what one Gaussian mechanism
    of multiplier σ spends (Andrew et al. §3.1); accounting with ``z_Δ`` would understate ε.
    """
    _finite("noise_multiplier", noise_multiplier)
    if noise_multiplier < 0:
        raise ConfigError(f"noise_multiplier must be >= 0, got {noise_multiplier}")
    if not 0 < sample_rate <= 1:
        raise ConfigError(
            f"sample_rate must be in (0, 1], got {sample_rate}: clients per round / clients"
        )
    if not 0 < delta < 1:
        raise ConfigError(f"delta must be in (0, 1), got {delta} (e.g. 1e-5, below 1/N)")
    if rounds < 0:
        raise ConfigError(f"rounds must be >= 0, got {rounds}")
    return rdp_epsilon(noise_multiplier, sample_rate, rounds, delta)


__all__ = [
    "NOISE_STREAM",
    "ClientDP",
    "client_dp_epsilon",
    "composing_algorithms",
    "with_client_dp",
]
