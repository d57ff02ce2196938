"""`fedretain reproduce` at scale=ci: FedReg's presets, and what their reports show."""

from __future__ import annotations

import json

import pytest

from fedretain.studies.privacy import table_rows
from tests.studies.presets_at_ci import check_at_ci, ci, presets_of

__all__ = ["ci"]  # the module's fixture


@pytest.mark.parametrize("name", presets_of("FedReg"))
def test_every_fedreg_preset_runs_at_ci_and_reports_every_claim(ci, name):
    check_at_ci(ci, name)


def test_fedreg_report_relates_accuracy_swings_to_the_classes_each_round_held(ci):
    text = (ci("fedreg-table1") / "report.md").read_text().splitlines()
    title = "### one class, 5,000 clients: accuracy change against the classes"
    at = next(i for i, line in enumerate(text) if line.startswith(title))
    head = text[at + 4]
    # scale=ci: 2 one-class clients a round, evaluated every round: 1 or 2 classes held
    counts = [int(c.split()[0]) for c in head.strip("|").split("|")[1:-1]]
    assert counts and set(counts) <= {1, 2}, head
    rows = [line for line in text[at + 6 : at + 12] if line.startswith("| ")]
    assert {r.split("|")[1].strip() for r in rows} >= {"SGD", "FedAvg", "FedReg"}


def test_privacy_preset_fills_table4_from_each_seeds_study(ci):
    out = ci("fedreg-table4")
    text = (out / "report.md").read_text()
    study = out / "table-4" / "privacy-study" / "seed0"
    result = json.loads((study / "privacy.json").read_text())
    head = next(line for line in text.splitlines() if line.startswith("| method |"))
    names = [c.strip() for c in head.strip("|").split("|")]
    for row, (run, attack) in table_rows(result).items():
        line = next(line for line in text.splitlines() if line.startswith(f"| {row} |"))
        cells = dict(zip(names, (c.strip() for c in line.strip("|").split("|")), strict=True))
        assert cells["attack PSNR (dB)"] == f"{result['attacks'][attack]['psnr']:.2f}"
        assert cells["random-image PSNR (dB)"] == f"{result['baselines']['random']:.2f}"
        assert cells["mean-image PSNR (dB)"] == f"{result['baselines']['mean_image']:.2f}"
        assert cells["σ*"] == (f"{result['sigma_matched']:.3g}" if "dpsgd" in run else "-")
        assert cells["last acc"] == f"{result['runs'][run]['final_accuracy']:.4f}"
    assert "fedretain privacy dataset=" in text and f"--out {study}" in text
