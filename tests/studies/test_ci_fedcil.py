"""`fedretain reproduce` at scale=ci: FedCIL's presets, accuracy matrices and generator quality."""

from __future__ import annotations

import json
import re

import pytest

from tests.studies.presets_at_ci import FMNIST, check_at_ci, ci, plan_of, presets_of

__all__ = ["ci"]  # the module's fixture


@pytest.mark.parametrize("name", presets_of("FedCIL"))
def test_every_fedcil_preset_runs_at_ci_and_reports_every_claim(ci, name):
    check_at_ci(ci, name)


def test_fedcil_report_shows_each_methods_accuracy_matrix_and_generator_quality(ci):
    out = ci("fedcil-table1")
    if not FMNIST:
        pytest.skip("Fashion-MNIST is not installed")
    plan, _ = plan_of("fedcil-table1")
    fedcil = next(s for s in plan.runs if s.method == "FedCIL")
    matrix = json.loads((out / fedcil.folder / "summary.json").read_text())["accuracy_matrix"]
    text = (out / "report.md").read_text()
    at = text.index("FedCIL: accuracy on each task's classes after each task")
    # under a heading of their own, not the tuning section's
    assert text.rindex("\n## ", 0, at) == text.index("\n## More results")
    table = text[at:]
    tasks = len(matrix)
    last = next(line for line in table.splitlines() if line.startswith(f"| task {tasks} |"))
    assert last == f"| task {tasks} | " + " | ".join(f"{a:.3f}" for a in matrix[-1]) + " |"
    assert "fid-" not in text  # scale=ci records no generator quality
    rows = [{"round": 0, "task": 0, "fid": 30.0}, {"round": 2, "task": 1, "fid": 12.0}]
    quality = out / fedcil.folder / "generator_quality.jsonl"
    quality.write_text("".join(json.dumps(r) + "\n" for r in rows))
    text = (ci("fedcil-table1") / "report.md").read_text()  # the report again, no run redone
    assert "Last values: FedCIL 12.0 (round 2)." in text
    image = re.search(r"\]\((fid-[^)]+\.png)\)", text)
    assert image and (out / image.group(1)).is_file()
