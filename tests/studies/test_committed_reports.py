"""The committed reports are auditable: each written under the current rule (a ``claims.json``,
or a tuning's ``choices.json``, beside it) ships its runs' compact results (config.toml,
summary.json, metrics.jsonl, status.json and the diagnostics, no checkpoints), rewrites
byte-identically from them with its own command and ``--report-only``, and the claims ledger
(docs/claims.md) agrees with them; no committed verdict rests on one seed. A report written
before the rule is named by the ledger as not counted."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from fedretain.cli import main
from fedretain.studies.reproduce.ledger import ledger

ROOT = Path(__file__).parents[2]
RESULTS = ROOT / "results"
FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists()
REPORTS = sorted(
    p.parent.name
    for p in RESULTS.glob("*/report.md")
    if (p.parent / "claims.json").is_file() or (p.parent / "choices.json").is_file()
)
FAST = ("demo", "demo-tune", "fedreg-table2")  # the default suite rewrites these


def command_of(report: Path) -> list[str]:
    """The ``fedretain reproduce`` command a report names ("Reproduce it with")."""
    text = report.read_text()
    line = text.split("Reproduce it with", 1)[1].split("```bash\n", 1)[1].split("\n", 1)[0]
    words = shlex.split(line)
    assert words[:2] == ["fedretain", "reproduce"], line
    return words[2:]


def rewrite(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The committed report ``name`` rewritten from a copy of its committed results, in a
    folder where its own command's relative ``--out`` points at the copy."""
    shutil.copytree(RESULTS / name, tmp_path / "results" / name)
    for numbers in (tmp_path / "results" / name).glob("accuracy-*.json"):
        numbers.unlink()  # the rewrite must write them again
    monkeypatch.chdir(tmp_path)
    args = command_of(RESULTS / name / "report.md")
    status = main(["reproduce", *args, "--report-only"])
    assert status in (0, 1)  # 1: the report lists runs that failed or diverged
    return tmp_path / "results" / name


def same_files(name: str, out: Path) -> None:
    curves = sorted(p.name for p in (RESULTS / name).glob("accuracy-*.json"))
    assert sorted(p.name for p in out.glob("accuracy-*.json")) == curves
    for file in ("report.md", "claims.json", "choices.json", *curves):
        if (RESULTS / name / file).is_file():
            assert (out / file).read_text() == (RESULTS / name / file).read_text(), file


def report_params(names: tuple[str, ...], fast: bool) -> list:
    return [
        pytest.param(n, marks=[] if fast else [pytest.mark.slow])
        for n in REPORTS
        if (n in names) == fast
    ]


@pytest.mark.skipif(not FMNIST, reason="apt-get install dataset-fashion-mnist")
@pytest.mark.parametrize("name", report_params(FAST, True) + report_params(FAST, False))
def test_a_committed_report_rewrites_byte_identically_from_its_committed_results(
    name, tmp_path, monkeypatch
):
    same_files(name, rewrite(name, tmp_path, monkeypatch))


def shipped(folder: Path) -> list[Path] | None:
    """The files of ``folder`` that git tracks (what a clone gets; a run in progress here keeps
    its checkpoints, which git ignores), or None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", str(folder)], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [ROOT / p for p in out.decode().split("\0") if p]


@pytest.mark.parametrize("name", REPORTS)
def test_a_committed_report_ships_its_runs_results_and_no_checkpoint(name):
    folder = RESULTS / name
    files = shipped(folder)
    if files is None:  # not a git checkout: what is on disk is what shipped
        files = [p for p in folder.rglob("*") if p.is_file()]
    if "not run (data missing)" in (folder / "report.md").read_text():
        return
    summaries = [p for p in files if p.name == "summary.json"]
    if "Runs: 0 of " not in (folder / "report.md").read_text():
        assert summaries, f"results/{name} ships no run"
    for summary in summaries:
        run = summary.parent
        assert (run / "metrics.jsonl").is_file() and (run / "config.toml").is_file()
    assert not [p for p in files if "checkpoint" in p.relative_to(folder).parts]


def test_the_claims_ledger_agrees_with_the_committed_reports():
    page = ROOT / "docs" / "claims.md"
    assert page.read_text() == ledger(RESULTS), (
        "docs/claims.md is stale: fedretain ledger results --out docs/claims.md"
    )
    for name in REPORTS:  # every report with claims is in it
        if (RESULTS / name / "claims.json").is_file():
            assert f"`results/{name}/report.md`" in page.read_text()


@pytest.mark.parametrize("name", REPORTS)
def test_no_committed_verdict_rests_on_one_seed(name):
    path = RESULTS / name / "claims.json"
    if not path.is_file():
        return
    record = json.loads(path.read_text())
    for claim in record["claims"]:
        if claim["verdict"] in ("held", "did not hold"):
            assert record["seeds"] >= 2, claim["claim"]
            assert claim["p"] is not None and claim["why"]
        if claim["verdict"] == "undecided":
            assert claim["why"] and claim["decide"], claim["claim"]
