"""``forgetting-bench``: the head-to-head none of the five papers ran. Nine methods over a
heterogeneity ladder (Dirichlet α = 1, 0.1, 0.01; two and one label shards per client), with
full and 10 % participation, every method tuned alike on a validation split
(``forgetting-bench-tune``), measuring accuracy, rounds to a target, bytes and the loss
increase on the previous round's clients; the report is a leaderboard per setting whose ties
are named as ties."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from fedretain.errors import ConfigError
from fedretain.studies.presets.plan import (
    CI,
    CI_MLP,
    PRESETS,
    Claim,
    Data,
    Plan,
    Tuned,
    Values,
    data_keys,
    every,
    higher,
    joined,
    lt,
    pick,
    ranking,
    runs_over,
    scale_reasons,
    seed_values,
    shipped_choices,
    tuning_plan,
    tuning_runs,
)
from fedretain.studies.tuning import (
    TUNING_SEED,
    VAL_FRACTION,
    Criterion,
    Grid,
    method_grids,
)

# each method's own keys (MOON's projection head is its paper's 256)
BENCH_METHODS: dict[str, dict[str, Any]] = {
    "FedAvg": {"algorithm": "fedavg"},
    "FedProx": {"algorithm": "fedprox"},
    "SCAFFOLD": {"algorithm": "scaffold"},
    "FedCurv": {"algorithm": "fedcurv"},
    "FedReg": {"algorithm": "fedreg"},
    "GradMA": {"algorithm": "gradma"},
    "FedAvg+TCE": {"algorithm": "fedavg", "loss": "tce"},
    "FedAdam": {"algorithm": "fedavg", "server_opt": "adam"},
    "MOON": {"algorithm": "moon", "model.projection": 256},
}
# the heterogeneity ladder, mildest first: how the clients' labels are drawn
BENCH_LADDER: dict[str, dict[str, Any]] = {
    "Dir(1)": {"partition": "dirichlet", "partition.alpha": 1.0},
    "Dir(0.1)": {"partition": "dirichlet", "partition.alpha": 0.1},
    "Dir(0.01)": {"partition": "dirichlet", "partition.alpha": 0.01},
    "2 shards": {"partition": "shards", "partition.classes_per_client": 2},
    "1 shard": {"partition": "shards", "partition.classes_per_client": 1},
}
BENCH_PARTICIPATION = {"10 %": 0.1, "full": 1.0}
# the rungs where every client holds one class: TCE's loss is 0 there (its softmax runs over
# the client's own classes), so FedAvg+TCE would not train at all and is not run
BENCH_ONE_CLASS = ("1 shard",)
BENCH_ONE_CLASS_NOTE = (
    "FedAvg+TCE is not run on the 1-shard rungs: every client there holds a single class, where "
    "TCE's loss is 0 whatever the model (its softmax runs over the client's own classes), so no "
    "client would train and the model would stay at its initialisation "
    "(`tests/losses/test_tce.py` pins the zero loss and gradient). At Dir(0.01) some clients "
    "hold one class too (`fedretain partition` counts them); those do not train either."
)
# the rung every method is tuned on (one tuning study for the whole ladder: tuning each of the
# ten settings would cost ten of them)
BENCH_TUNED_ON = "Dir(0.1), 10 %"
# the tuning grids: every method the same learning rates, and five values of its own key
# (key, values, the key's allowed range, whose ends are no grid edge); FedProx's mu and
# GradMA's beta1 were chosen at the top of a four-value grid (mu 0.1, beta1 0.97), so every
# grid gained a fifth value (mu 1, beta1 0.99; the others one below their lowest)
BENCH_LRS = (0.01, 0.03, 0.1, 0.3, 1.0)
BENCH_GRIDS: dict[str, tuple[str, tuple[float, ...], tuple[float, float]]] = {
    "FedProx": ("algo.mu", (0.0, 0.001, 0.01, 0.1, 1.0), (0.0, math.inf)),
    "FedCurv": ("algo.lambda", (1e-3, 1e-2, 1e-1, 1.0, 10.0), (0.0, math.inf)),
    "FedReg": ("algo.gamma", (0.1, 0.25, 0.5, 0.75, 1.0), (0.0, 1.0)),
    "GradMA": ("algo.beta1", (0.3, 0.6, 0.9, 0.97, 0.99), (0.0, 1.0)),
    "FedAdam": ("server_opt.lr", (0.001, 0.003, 0.01, 0.03, 0.1), (0.0, math.inf)),
    "MOON": ("algo.mu", (0.01, 0.1, 1.0, 5.0, 10.0), (0.0, math.inf)),
}
BENCH_TARGET = 0.7  # the accuracy whose rounds the leaderboard counts
BENCH_TUNE_COMMAND = (
    "fedretain reproduce forgetting-bench-tune --out results/forgetting-bench-tune --scale small "
    "--jobs 2"
)


BENCH_CI_SETTINGS = ("Dir(0.1), 10 %",)


def bench_settings(clients: int) -> dict[str, dict[str, Any]]:
    """Every rung of the ladder at every participation, over ``clients`` clients: name -> its
    config keys (a round samples that fraction of the clients, at least one)."""
    return {
        f"{rung}, {share}": {**keys, "clients_per_round": max(1, round(fraction * clients))}
        for share, fraction in BENCH_PARTICIPATION.items()
        for rung, keys in BENCH_LADDER.items()
    }


def bench_base(scale: str, data: Data) -> dict[str, Any]:
    """The bench's budget, shared by its tuning: Fashion-MNIST, the MLP, a fixed number of
    local steps (every method the same local work), the forgetting diagnostic."""
    return {
        **data_keys(data),
        "model": "mlp",
        "batch_size": 20,
        "eval_every": 1,
        "checkpoint_every": 10,
        "targets": [BENCH_TARGET],
        "diagnostics": ["forgetting"],
        **pick(
            scale,
            paper={
                "clients": 100,
                "rounds": 100,
                "local_epochs": 1,
                "diagnostics.samples": 100,
            },
            small={
                "clients": 20,
                "rounds": 20,
                "local_steps": 10,
                "diagnostics.samples": 50,
            },
            ci={**CI, **CI_MLP, "clients": 10, "diagnostics.samples": 20},
        ),
    }


def bench_grids(scale: str) -> list[Grid]:
    """Every method's tuning grid: the learning rates, and its own key's values (at ``ci``,
    one learning rate and the own key's first value: a smoke test of the study)."""
    if scale != "ci":
        return method_grids(BENCH_METHODS, BENCH_LRS, BENCH_GRIDS)
    firsts = {m: (key, values[:1], bounds) for m, (key, values, bounds) in BENCH_GRIDS.items()}
    return method_grids(BENCH_METHODS, BENCH_LRS[2:3], firsts)


def bench_tuned(path: Path | None = None) -> list[Tuned]:
    """The choices the package ships (``tuned.json``'s ``forgetting-bench``: the committed
    ``results/forgetting-bench-tune/choices.json``); none before that study is committed."""
    try:
        return shipped_choices("forgetting-bench", BENCH_TUNED_ON, path)
    except ConfigError:  # no committed study yet: the report says so
        return []


def forgetting_bench(scale: str, seeds: list[int], data: Data) -> Plan:
    """FedAvg, FedProx, SCAFFOLD, FedCurv, FedReg, GradMA, FedAvg+TCE, FedAdam and MOON on
    Fashion-MNIST over the heterogeneity ladder (:data:`BENCH_LADDER`) at 10 % and full
    participation (:data:`BENCH_PARTICIPATION`), every run measuring its forgetting. Each
    method's learning rate and own hyper-parameter come from ``forgetting-bench-tune`` (the
    same grid and budget for every method, on a validation split, on the tuning seed), chosen
    on the ladder's middle rung (:data:`BENCH_TUNED_ON`) and used on every rung.

    ``paper`` (no paper ran it; the papers' usual setting): 100 clients, 100 rounds of one
    local epoch at batch 20. ``small``: 20 clients (10 % is 2 a round, full is 20), 20 rounds
    of 10 local steps at batch 20, the forgetting losses on 50 samples per client. ``ci``: the
    digits, one setting, 2 rounds.

    Cost at ``small``, measured (AMD EPYC, 2 cores, ``--jobs 2``, 2026-11-29/30): 7,340 s of
    training for the 255 runs that finished (9 diverged), about an hour of wall time. A run
    takes 1.6-6 s at 10 % participation (FedReg 23-40 s) and 5-32 s at full participation,
    except FedReg's, 294-383 s: its pseudo data make up about 65 % of the bench's time.
    """
    choices = bench_tuned()
    methods = {m: {**keys, **_chosen(m, choices)} for m, keys in BENCH_METHODS.items()}
    base = bench_base(scale, data)
    settings = bench_settings(base["clients"])
    if scale == "ci":  # one setting keeps the smoke test to seconds
        settings = {s: settings[s] for s in BENCH_CI_SETTINGS}

    def forgets_less(v: Values) -> bool | None:
        return every(
            lt(
                v.get(s, "FedReg", "loss_increase"),
                v.get(s, "FedAvg", "loss_increase"),
                "loss_increase",
                f"FedReg < FedAvg ({s})",
            )
            for s in settings
        )

    def gain(v: Values, setting: str) -> float | None:
        a, b = v.get(setting, "GradMA", "final"), v.get(setting, "FedAvg", "final")
        return None if a is None or b is None else a - b

    claims = [
        Claim(
            "FedReg forgets less than FedAvg on every setting of the ladder: a lower loss "
            "increase on the previous round's clients (FedReg §4.3)",
            forgets_less,
            "the learning rate and γ are chosen for validation accuracy, not for forgetting",
            paper="FedReg (Xu et al., ICLR 2022)",
        ),
        Claim(
            "GradMA's lead over FedAvg is larger at Dir(0.01) than at Dir(1), 10 % "
            "participation (GradMA §6: 'the higher data heterogeneity, the more superior "
            "performance for GradMA')",
            lambda v: lt(
                gain(v, "Dir(1), 10 %"), gain(v, "Dir(0.01), 10 %"), "final", "gain grows"
            ),
            f"GradMA's memory builds up over rounds, and these runs have {base['rounds']}",
            paper="GradMA (Luo et al., CVPR 2023)",
        ),
        Claim(
            "FedAvg+TCE ends above FedAvg at Dir(0.1), 10 % participation (TCE §3.2)",
            higher("Dir(0.1), 10 %", "FedAvg+TCE", "FedAvg"),
            "TCE's gain in the paper comes after 4,000 rounds",
            paper="TCE (Legate et al., 2023)",
        ),
    ]
    tuning_note = (
        f"Each method's learning rate and own hyper-parameter were chosen on a validation split "
        f"at {BENCH_TUNED_ON}, on tuning seed {TUNING_SEED}, which is no evaluation seed, and "
        f"used on every setting (`{BENCH_TUNE_COMMAND}` re-derives them)."
    )
    notes = [BENCH_ONE_CLASS_NOTE] if any(s.startswith(BENCH_ONE_CLASS) for s in settings) else []
    if not choices:
        tuning_note = (
            "Not tuned yet: no choices of `forgetting-bench-tune` are committed, so every "
            "method runs at its defaults (lr 0.05 and the registry's values), which favours "
            f"none of them by design but is no tuning; run `{BENCH_TUNE_COMMAND}` and copy "
            "its choices.json into presets/tuned.json under `forgetting-bench`."
        )
        notes.append(tuning_note)
    return Plan(
        title="forgetting-bench: nine methods over a heterogeneity ladder, tuned alike",
        source="none: no paper ran this comparison; its claims are the papers' own",
        base=base,
        runs=runs_over(settings, lambda setting: bench_methods(setting, methods), seeds),
        metrics=["final", "top", f"to:{BENCH_TARGET:.0%}", "MB_up", "MB_down", "loss_increase"],
        claims=claims,
        reasons=scale_reasons(
            scale,
            small="scale=small: 20 clients, 20 rounds of 10 local steps (the paper scale: 100 "
            "clients, 100 rounds of one epoch)",
        ),
        targets={f"{BENCH_TARGET:.0%}": BENCH_TARGET},
        plots=("round", "bytes", "forgetting"),
        paragraph=bench_paragraph,
        tuning=choices,
        tuning_note=tuning_note,
        notes=notes,
    )


def bench_methods(setting: str, methods: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The methods run on ``setting``: all but FedAvg+TCE on the one-class rungs
    (:data:`BENCH_ONE_CLASS_NOTE`)."""
    if setting.startswith(BENCH_ONE_CLASS):
        return {m: keys for m, keys in methods.items() if keys.get("loss") != "tce"}
    return methods


def _chosen(method: str, choices: list[Tuned]) -> dict[str, Any]:
    return next((dict(t.chosen) for t in choices if t.method == method), {})


def bench_paragraph(v: Values, plan: Plan) -> str:
    """The leaderboard of every setting, a table: the methods by final accuracy (the mean over
    the last 10 % of the evaluations) in places (:meth:`Ranking.places`: one more than the
    number of methods whose paired gap over it exceeds both the seeds' spread and the
    practical threshold), whom each ranks above and is indistinguishable from, and its loss
    increase on earlier clients with whom it forgot less than by the same rule. A method
    without a mean (a seed with no result) is named with why; a setting where no method
    learned beyond chance ranks nothing."""
    from fedretain.metrics.spread import threshold_of
    from fedretain.studies.reproduce.markdown import fmt, table

    blocks = []
    for setting in plan.settings():
        methods = plan.methods(setting)
        means = {m: x for m in methods if (x := v.get(setting, m, "final")) is not None}
        if not means:
            blocks.append(f"**{setting}**: no run finished.")
            continue
        if max(means.values()) < 2 * plan.chance:
            blocks.append(f"**{setting}**: no method learned beyond chance; nothing is ranked.")
            continue
        order = ranking(v, setting, means, "final", thresholds=plan.thresholds)
        forgot = ranking(
            v, setting, methods, "loss_increase", lower=True, thresholds=plan.thresholds
        )
        places = order.places()
        shared = Counter(places.values())

        def names(ms: list[str]) -> str:
            return joined(ms) if ms else "-"

        rows = []
        for m in sorted(order.order, key=lambda m: places[m]):  # stable: by mean within a place
            loss = forgot.means.get(m)
            rows.append(
                [
                    f"{places[m]}{'=' if shared[places[m]] > 1 else ''}",
                    m,
                    fmt(order.means[m], "final"),
                    names(order.beats(m)),
                    names(order.tied_with(m)),
                    fmt(loss, "loss_increase"),
                    names(forgot.beats(m) if loss is not None else []),
                ]
            )
        for m in (m for m in methods if m not in means):
            seeds = seed_values(v, setting, m, "final")
            missing = sum(x is None for x in seeds)
            why = f"no mean: {missing} of {len(seeds)} seeds without a result (see above)"
            rows.append(["-", m, why, "-", "-", "-", "-"])
        head = f"**{setting}**: leading: {joined(order.top())}."
        if forgot.means:
            head += f" Forgot least: {joined(forgot.top())}."
        columns = [
            "place",
            "method",
            "final acc",
            "ranks above",
            "indistinguishable from",
            "loss increase",
            "forgot less than",
        ]
        blocks.append("\n".join([head, "", *table(columns, rows)]))
    return (
        "Leaderboards, one per setting (means over the seeds; a method ranks above another "
        "only where their paired gap exceeds both the seeds' spread and a practical threshold: "
        f"{threshold_of('final', plan.thresholds).describe()} of final accuracy, "
        f"{threshold_of('loss_increase', plan.thresholds).describe()} of the loss increase; "
        "every other pair is indistinguishable. A method's place is one more than the number of "
        'methods that rank above it, "2=" where it is shared; it follows that rule, not the '
        "means, so a method with a lower mean but a wider spread can stand above one with a "
        "higher mean):\n\n" + "\n\n".join(blocks)
    )


PRESETS.add(
    "forgetting-bench",
    forgetting_bench,
    "nine methods over a heterogeneity ladder (Dirichlet, shards; 10 % and full participation)",
    dataset="fashion-mnist",
    seeds={"ci": 1, "small": 3, "paper": 3},
    estimate="about 1 h (264 runs, 3 seeds, --jobs 2; 7,340 s of training, measured 2026-11-30)",
    paper="none (a head-to-head)",
)


def forgetting_bench_tune(scale: str, seeds: list[int], data: Data) -> Plan:
    """The bench's tuning study: every method's grid (:func:`bench_grids`) on the ladder's
    middle rung (:data:`BENCH_TUNED_ON`), trained on the clients' data less a held-out
    validation split with the bench's budget, on the tuning seed; the point of the best
    validation accuracy chosen. No forgetting diagnostic; the test set is evaluated only at
    the end."""
    base = {k: x for k, x in bench_base(scale, data).items() if not k.startswith("diagnostics")}
    base.update(bench_settings(base["clients"])[BENCH_TUNED_ON])
    base.update(val_fraction=VAL_FRACTION, eval_every=1, checkpoint_every=base["rounds"])
    base.pop("targets", None)
    grids = bench_grids(scale)
    return tuning_plan(
        "Tuning forgetting-bench's methods alike on a validation split",
        "none: the choices forgetting-bench ships",
        base,
        tuning_runs(BENCH_TUNED_ON, grids, seeds),
        grids,
        Criterion(),
        scale_reasons(scale),
    )


PRESETS.add(
    "forgetting-bench-tune",
    forgetting_bench_tune,
    "forgetting-bench's learning rates and hyper-parameters, chosen alike on a validation split",
    dataset="fashion-mnist",
    seeds={"ci": 1, "small": 1, "paper": 1},
    estimate="about 15 min (165 runs, --jobs 2; 971 s of training, measured 2026-11-30)",
    paper="none (a head-to-head)",
)
