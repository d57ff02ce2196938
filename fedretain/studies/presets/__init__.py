"""The presets of ``fedretain reproduce``: the papers' tables, and the README's demo.

A preset is a function ``(scale, seeds, data) -> Plan`` registered in :data:`PRESETS`. Its
:class:`Plan` lists the runs (setting x method x seed, each a config built from overrides over
a base config), the paper's numbers to show beside ours, and the paper's claims as predicates
over the results. :mod:`fedretain.studies.reproduce` runs the plan and writes the report.

Scales: ``paper`` is the paper's clients, rounds, epochs and model (a GPU's work); ``small``
fits 2 CPU cores in about an hour per preset (the estimate is in each preset's docstring,
measured by timing a few rounds of each method with ``threads=1``, two runs at a time);
``ci`` is a smoke test of seconds per run (2 rounds, tiny models, 1 seed) whose claims are
still evaluated, mostly to "did not hold" at that scale.

Modules: :mod:`~fedretain.studies.presets.plan` (the plan, the registry, the claims'
checks and the run builders every preset uses), then one per paper, each registering its
presets: :mod:`~fedretain.studies.presets.fedreg` (with ``fedreg_table3`` and
``fedreg_emnist``),
:mod:`~fedretain.studies.presets.fedcurv`, :mod:`~fedretain.studies.presets.fedcil`,
:mod:`~fedretain.studies.presets.gradma` (with ``gradma_columns`` and
``gradma_figures``), :mod:`~fedretain.studies.presets.tce` and
:mod:`~fedretain.studies.presets.demo` (``demo`` and ``demo-tune``), and
:mod:`~fedretain.studies.presets.bench` (``forgetting-bench``, the head-to-head no paper
ran, and its tuning ``forgetting-bench-tune``). This package names
their public parts; the demo's preset function is ``presets.demo.demo`` (``presets.demo`` is
its module).
"""

from __future__ import annotations

# isort: off
# the modules register their presets as they are imported: this order is the registry's
# (`fedretain reproduce --list`, and the order `all` runs in)
from fedretain.studies.presets.plan import (
    CI,
    CI_MLP,
    CI_REASON,
    INF,
    NO_GUARANTEE,
    PRESETS,
    SCALES,
    UNDERTRAINED,
    Check,
    Claim,
    Compared,
    Data,
    MethodKeys,
    Plan,
    Ranking,
    RunSpec,
    Sweep,
    Tuned,
    Values,
    at_most,
    comparisons,
    data_keys,
    every,
    fewer,
    fewest,
    ge,
    higher,
    highest,
    lt,
    paper_floor,
    paper_numbers,
    pick,
    ranking,
    replayed,
    runs,
    runs_over,
    scale_reasons,
    seed_values,
    shipped_choices,
    slug,
    standin_reason,
    tuning_plan,
    tuning_runs,
)
from fedretain.studies.presets.fedreg import (
    CNN_SETTING,
    fedreg_table1,
    fedreg_table2,
    fedreg_table4,
)
from fedretain.studies.presets import fedreg_table3  # noqa: F401 (registers Table 3)
from fedretain.studies.presets.fedreg_emnist import fedreg_table1_emnist
from fedretain.studies.presets.fedcurv import fedcurv_table1
from fedretain.studies.presets.fedcil import fedcil_table1
from fedretain.studies.presets.gradma import gradma_table1, gradma_table2
from fedretain.studies.presets.gradma_columns import (
    gradma_cifar10,
    gradma_cifar100,
    gradma_tinyimagenet,
)
from fedretain.studies.presets.gradma_figures import gradma_fig5, gradma_fig6
from fedretain.studies.presets.tce import TCE_VARIANTS, tce_method, tce_table1
from fedretain.studies.presets.tce_columns import tce_cifar100, tce_femnist
from fedretain.studies.presets.demo import (
    DEMO_CHANCE,
    DEMO_GRIDS,
    DEMO_METHODS,
    DEMO_SETTING,
    DEMO_TUNE_COMMAND,
    DEMO_LRS,
    demo_base,
    demo_grids,
    demo_method,
    demo_paragraph,
    demo_tune,
    demo_tuned,
)
from fedretain.studies.presets.bench import forgetting_bench, forgetting_bench_tune

# isort: on

__all__ = [
    "CI",
    "CI_MLP",
    "CI_REASON",
    "CNN_SETTING",
    "DEMO_CHANCE",
    "DEMO_GRIDS",
    "DEMO_LRS",
    "DEMO_METHODS",
    "DEMO_SETTING",
    "DEMO_TUNE_COMMAND",
    "INF",
    "NO_GUARANTEE",
    "PRESETS",
    "SCALES",
    "TCE_VARIANTS",
    "UNDERTRAINED",
    "Check",
    "Claim",
    "Compared",
    "Data",
    "MethodKeys",
    "Plan",
    "Ranking",
    "RunSpec",
    "Sweep",
    "Tuned",
    "Values",
    "at_most",
    "comparisons",
    "data_keys",
    "demo_base",
    "demo_grids",
    "demo_method",
    "demo_paragraph",
    "demo_tune",
    "demo_tuned",
    "every",
    "fedcil_table1",
    "fedcurv_table1",
    "fedreg_table1",
    "fedreg_table1_emnist",
    "fedreg_table2",
    "fedreg_table4",
    "fewer",
    "fewest",
    "forgetting_bench",
    "forgetting_bench_tune",
    "ge",
    "gradma_cifar10",
    "gradma_cifar100",
    "gradma_fig5",
    "gradma_fig6",
    "gradma_table1",
    "gradma_table2",
    "gradma_tinyimagenet",
    "higher",
    "highest",
    "lt",
    "paper_floor",
    "paper_numbers",
    "pick",
    "ranking",
    "replayed",
    "runs",
    "runs_over",
    "scale_reasons",
    "seed_values",
    "shipped_choices",
    "slug",
    "standin_reason",
    "tce_cifar100",
    "tce_femnist",
    "tce_method",
    "tce_table1",
    "tuning_plan",
    "tuning_runs",
]
