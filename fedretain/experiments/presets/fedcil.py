"""FedCIL (Qi, Zhao & Li, ICLR 2023) Table 1: class-incremental FL over 5 clients x 5 tasks
of 2 classes, FedCIL against FedAvg/FedProx, FedLwF-2T, ACGAN replay and DGR; each client's
classes drawn per client (the paper's) and one class order for every client."""

from __future__ import annotations

from fedretain.experiments.presets.plan import (
    PRESETS,
    Claim,
    Data,
    Plan,
    data_keys,
    every,
    higher,
    highest,
    lt,
    pick,
    runs_over,
    standin_reason,
)


def fedcil_table1(scale: str, seeds: list[int], data: Data) -> Plan:
    """FedCIL (Qi, Zhao & Li, ICLR 2023) Table 1: class-incremental FL, 5 clients (all every
    round) x 5 tasks of 2 classes; FedAvg and FedProx on the classifier, FedLwF-2T, FedAvg and
    FedProx with ACGAN replay, FedAvg with DGR, and FedCIL; final average accuracy on the
    classes seen and average forgetting.

    Two settings: the paper's, every client drawing its own classes (App. A; with
    Fashion-MNIST's 10 classes every client learns all ten, each in its own order), and one
    class order for every client (``scenario.order``: 0-1, 2-3, 4-5, 6-7, 8-9), the classic
    class-incremental benchmark. Only the second has disjoint tasks: with per-client draws a
    later task retrains old classes on other clients, so forgetting is understated there and
    can be negative, and the forgetting claim is checked on the fixed order alone.

    The text conversion lost Table 1's numbers: the report states the paper's ordering
    (FedCIL above the replay baselines, which are above FedAvg/FedProx/FedLwF-2T) as claims.
    ``paper``: 40 rounds per task, 400 local iterations of batch 32, Adam lr 1e-4, the ACGAN at
    width 64 (a GPU's work). ``small``: 3 rounds per task, 30 iterations, Adam lr 1e-3, width
    16, FedCIL's consolidation 10 steps of 16 (experiments/fedcil_fmnist_cpu.toml); measured
    about 30 s (FedAvg), 3 min (ACGAN replay) and 3.5 min (FedCIL) per seed and setting on 2
    loaded cores: about 30 minutes for 3 seeds and both settings with ``--jobs 2``. ``medium``:
    the claim at CPU scale, FedAvg, the replay baselines (FedAvg+ACGAN, FedProx+ACGAN,
    FedAvg+DGR) and FedCIL, 5 rounds of 80 iterations per task (4.4x small's training),
    consolidation 20 steps of 16, the generators' Fréchet distance recorded
    (``diagnostics=generator_quality``); measured about 1.7 min (FedAvg), 9.5 min
    (FedAvg+ACGAN) and 18 min (FedCIL) per run, two at a time on 2 cores (2026-11-26): about
    3 hours for 3 seeds and both settings with the two replay baselines added (estimated).
    """
    base = {
        **data_keys(data),
        "clients": 5,
        "clients_per_round": 5,
        "scenario": "class_incremental",
        "scenario.tasks": 5,
        "scenario.classes_per_task": 2,
        "batch_size": 32,
        "optimizer": "adam",
        "model": "acgan",
        # on a CPU the sequential engine (convolutions); on CUDA the vectorised one trains
        # the round's 5 clients (classifiers, generators, discriminators) together
        "engine": "auto",
        **pick(
            scale,
            paper={
                "scenario.rounds_per_task": 40,
                "rounds": 200,
                "local_steps": 400,
                "lr": 1e-4,
                "eval_every": 10,
                "checkpoint_every": 10,
            },
            small={
                "scenario.rounds_per_task": 3,
                "rounds": 15,
                "local_steps": 30,
                "lr": 1e-3,
                "model.width": 16,
                "eval_every": 3,
                "checkpoint_every": 3,
            },
            medium={
                "scenario.rounds_per_task": 5,
                "rounds": 25,
                "local_steps": 80,
                "lr": 1e-3,
                "model.width": 16,
                "eval_every": 5,
                "checkpoint_every": 5,
            },
            ci={
                "scenario.rounds_per_task": 1,
                "rounds": 5,
                "local_steps": 2,
                "lr": 1e-3,
                "model.width": 4,
                "eval_every": 1,
                "checkpoint_every": 1,
            },
        ),
    }
    consolidation = pick(
        scale,
        paper={},
        small={"algo.consolidation_steps": 10, "algo.consolidation_batch": 16},
        medium={"algo.consolidation_steps": 20, "algo.consolidation_batch": 16},
        ci={"algo.consolidation_steps": 1, "algo.consolidation_batch": 4},
    )
    methods = {
        "FedAvg": {"algorithm": "fedavg"},
        "FedProx": {"algorithm": "fedprox"},
        "FedLwF-2T": {"algorithm": "fedlwf2t"},
        "FedAvg+ACGAN": {"algorithm": "fedavg", "replay": "acgan"},
        "FedProx+ACGAN": {"algorithm": "fedprox", "replay": "acgan"},
        "FedAvg+DGR": {"algorithm": "fedavg", "replay": "dgr", "replay.width": 16},
        "FedCIL": {"algorithm": "fedcil", **consolidation},
    }
    if scale == "ci":
        methods["FedAvg+DGR"]["replay.width"] = 4
    if scale == "medium":  # the claims' methods and the replay baselines; the ACGANs' FID
        quality = {"diagnostics": ["generator_quality"]}
        methods = {
            "FedAvg": methods["FedAvg"],
            "FedAvg+ACGAN": {**methods["FedAvg+ACGAN"], **quality},
            "FedProx+ACGAN": {**methods["FedProx+ACGAN"], **quality},
            "FedAvg+DGR": methods["FedAvg+DGR"],
            "FedCIL": {**methods["FedCIL"], **quality},
        }
    drawn = f"{data.name}, 5 clients x 5 tasks of 2 classes, drawn per client"
    fixed = f"{data.name}, 5 clients x 5 tasks of 2 classes, one class order"
    settings = {drawn: {}, fixed: {"scenario.order": [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]}}
    scale_reason = pick(
        scale,
        paper="",
        small="3 rounds of 30 local iterations per task where the paper runs 40 of 400, and an "
        "ACGAN of width 16: the generators are still poor (see FID in experiments/fedcil_fmnist"
        "_cpu.toml's runs with diagnostics=generator_quality), so replay and consolidation "
        "carry little of the old classes",
        medium="5 rounds of 80 local iterations per task where the paper runs 40 of 400, and an "
        "ACGAN of width 16: see the generators' Fréchet distance below",
        ci="1 round of 2 local steps per task, a width-4 ACGAN",
    )
    claims = [
        claim
        for setting, name in ((drawn, "classes drawn per client"), (fixed, "one class order"))
        for claim in (
            Claim(
                f"FedCIL ends above FedAvg+ACGAN (final average accuracy), {name}",
                higher(setting, "FedCIL", "FedAvg+ACGAN", "avg_acc"),
                scale_reason,
            ),
            Claim(
                f"FedAvg+ACGAN ends above FedAvg, {name}",
                higher(setting, "FedAvg+ACGAN", "FedAvg", "avg_acc"),
                scale_reason,
            ),
            Claim(
                f"FedCIL ends above every baseline, {name}",
                highest(setting, "FedCIL", [m for m in methods if m != "FedCIL"], "avg_acc"),
                scale_reason,
            ),
        )
    ]
    claims.append(
        Claim(
            "FedAvg forgets most of FedAvg, FedAvg+ACGAN and FedCIL (average forgetting), one "
            "class order",
            lambda v: every(
                lt(
                    v.get(fixed, m, "forgetting"),
                    v.get(fixed, "FedAvg", "forgetting"),
                    "forgetting",
                    f"{m} < FedAvg",
                )
                for m in ("FedAvg+ACGAN", "FedCIL")
            ),
            scale_reason,
        )
    )
    forgetting_note = (
        "Which forgetting each setting measures. One class order: every client learns classes "
        "0-1, then 2-3, 4-5, 6-7, 8-9, so the tasks are disjoint and average forgetting is "
        "classic class-incremental forgetting. Classes drawn per client (the paper's App. A): "
        f"each client takes {data.name}'s classes in its own random order, so the tasks pooled "
        "over clients overlap and a later task retrains old classes on other clients; "
        "forgetting there is understated and can be negative, and says little about which "
        "method forgets most (no claim is made on it)."
    )
    reasons = [f"scale={scale}: {scale_reason}"] if scale_reason else []
    reasons += standin_reason(data)
    return Plan(
        title="FedCIL (Qi, Zhao & Li, ICLR 2023), Table 1: class-incremental FL",
        source="FedCIL Table 1 (its numbers were lost in the text conversion: claims only)",
        base=base,
        runs=runs_over(settings, methods, seeds),
        metrics=["avg_acc", "forgetting", "bwt", "final", "MB_up"],
        claims=claims,
        reasons=reasons,
        plots=("round", "continual"),
        notes=[forgetting_note],
        tuning_note=(
            "Not tuned here: every method trains with Adam at one learning rate (1e-3 at "
            "small and medium; the paper's 1e-4 for every method at paper scale, where 400 "
            "local iterations afford it)."
        ),
        left_out=(
            "FedProx and FedLwF-2T (run at small): the medium scale's CPU time goes to the "
            "replay baselines and FedCIL."
            if scale == "medium"
            else ""
        ),
    )


PRESETS.add(
    "fedcil-table1",
    fedcil_table1,
    "FedCIL Table 1: FedCIL against FedAvg/FedProx, FedLwF-2T, ACGAN replay and DGR",
    dataset="mnist",
    standin="fashion-mnist",
    seeds={"ci": 1, "small": 3, "medium": 3, "paper": 3},
    estimate="about 30 min (3 seeds, --jobs 2)",
    paper="FedCIL (Qi, Zhao & Li, ICLR 2023)",
)
