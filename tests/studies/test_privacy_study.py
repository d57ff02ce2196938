"""``fedretain privacy``: the Table-4-style study on a tiny digits setting; its σ* rule, its
generated sentences and its resumability."""

import json

import numpy as np
import pytest

from fedretain.errors import ConfigError
from fedretain.recipe.config import make_config
from fedretain.studies.privacy import PrivacyStudy, Study, report, run_privacy

TINY = [
    "dataset=digits",
    "model=mlp",
    "model.hidden=[16]",
    "clients=6",
    "clients_per_round=3",
    "rounds=2",
    "local_steps=2",
    "batch_size=10",
    "lr=0.1",
    "threads=1",
    "checkpoint_every=0",
]
STUDY = Study(targets=2, iterations=15, sigmas=(0.01, 3.0))


def test_study_writes_the_report_and_skips_what_is_done(tmp_path):
    result = run_privacy(None, TINY, tmp_path, STUDY)
    attacks = result["attacks"]
    assert set(attacks) == {"fedavg", "fedreg-mg", "fedavg+dpsgd-0.01", "fedavg+dpsgd-3"}
    # σ* is the smallest σ whose PSNR is at most FedReg-MG's, else the largest
    mg = attacks["fedreg-mg"]["psnr"]
    below = [s for s in STUDY.sigmas if attacks[f"fedavg+dpsgd-{s:g}"]["psnr"] <= mg]
    assert result["sigma_matched"] == (below[0] if below else STUDY.sigmas[-1])
    assert result["matched"] == bool(below)
    sigma = result["sigma_matched"]
    assert set(result["runs"]) == {
        "fedavg",
        "fedreg-mg",
        f"fedavg+dpsgd-{sigma:g}",
        f"fedprox+dpsgd-{sigma:g}",
    }
    assert result["runs"][f"fedavg+dpsgd-{sigma:g}"]["epsilon"] > 0
    text = (tmp_path / "report.md").read_text()
    assert f"σ* = {sigma:g}" in text
    assert (tmp_path / "psnr_vs_sigma.png").stat().st_size > 0
    assert (tmp_path / "grids" / "fedreg-mg.png").stat().st_size > 0
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / "attacks").iterdir()}
    stamps[tmp_path / "runs/fedavg/summary.json"] = (
        (tmp_path / "runs/fedavg/summary.json").stat().st_mtime_ns
    )
    again = run_privacy(None, TINY, tmp_path, STUDY)
    assert again["attacks"] == result["attacks"] and again["runs"] == result["runs"]
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())


def _result(fedavg, mg, dp, acc_mg, acc_dp):
    attacks = {
        "fedavg": {"psnr": fedavg, "psnr_std": 1.0, "ssim": 0.9, "ssim_std": 0.0},
        "fedreg-mg": {"psnr": mg, "psnr_std": 1.0, "ssim": 0.1, "ssim_std": 0.0},
    }
    for s, p in dp.items():
        attacks[f"fedavg+dpsgd-{s:g}"] = {"psnr": p, "psnr_std": 1.0, "ssim": 0.5, "ssim_std": 0}
    for a in attacks.values():
        a["label_accuracy"] = 1.0
    attacks["fedavg"]["per_target_psnr"] = [fedavg - 5, fedavg + 5]
    run = {"top_accuracy": 0.9, "rounds": 3, "epsilon": None}
    return {
        "config": "t",
        "study": {"attack": "ig", "iterations": 1, "restarts": 1, "max_grad_norm": 1.0}
        | {"sigmas": list(dp)},
        "targets": [0, 1],
        "baselines": {
            "random": 5.0,
            "mean_image": 10.0,
            "per_target": {"random": [5.0, 5.0], "mean_image": [9.0, 25.0]},
        },
        "attacks": attacks,
        "sigma_matched": 0.1,
        "matched": True,
        "runs": {
            "fedavg": {**run, "final_accuracy": 0.9},
            "fedreg-mg": {**run, "final_accuracy": acc_mg},
            "fedavg+dpsgd-0.1": {**run, "final_accuracy": acc_dp, "epsilon": 3.0},
        },
    }


@pytest.mark.parametrize("kept", [True, False])
def test_report_sentences_follow_the_numbers(tmp_path, kept):
    acc_mg, acc_dp = (0.8, 0.4) if kept else (0.3, 0.4)
    text = report(_result(20.0, 8.0, {0.01: 15.0, 0.1: 7.0, 1.0: 9.0}, acc_mg, acc_dp), tmp_path)
    assert "above the better baseline (10.00 dB)" in text
    assert "above both baselines of the same image on 1 of 2 targets" in text  # 15 < 25
    assert "FedReg with MG lowers it to 8.00 dB" in text
    assert "does not fall monotonically" in text  # 7.0 then 9.0
    assert ("kept more accuracy" in text) is kept
    assert ("did not keep more accuracy" in text) is (not kept)


def test_bad_study_settings_are_one_line_errors():
    with pytest.raises(ConfigError, match="increasing"):
        Study(sigmas=(1.0, 0.1))
    with pytest.raises(ConfigError, match="targets"):
        Study(targets=0)
    with pytest.raises(ConfigError, match="noise multipliers"):
        Study(sigmas=(0.0,))


def test_targets_are_seeded_training_images(tmp_path):
    cfg = make_config({"dataset": "digits", "model": "mlp", "clients": 4, "clients_per_round": 2})
    a = PrivacyStudy(cfg, tmp_path, Study(targets=5, seed=3)).indices
    b = PrivacyStudy(cfg, tmp_path, Study(targets=5, seed=3)).indices
    c = PrivacyStudy(cfg, tmp_path, Study(targets=5, seed=4)).indices
    assert a == b != c and len(set(a)) == 5
    assert json.dumps(a)  # plain ints, written to privacy.json


def test_privacy_command_writes_the_report_and_refuses_bad_options(tmp_path, capsys):
    from fedretain.cli import main

    args = ["privacy", "--out", str(tmp_path), "--targets", "1", "--iterations", "5"]
    assert main([*args, "--sigmas", "0.1", "--no-train", *TINY]) == 0
    assert "sigma* 0.1" in capsys.readouterr().out
    assert "## Accuracy" not in (tmp_path / "report.md").read_text()  # --no-train
    assert main([*args, "--sigmas", "1,0.1", *TINY]) == 2
    assert "increasing" in capsys.readouterr().err


def test_chosen_images_are_attacked_and_their_reconstructions_saved(tmp_path, capsys):
    from PIL import Image

    from fedretain.cli import main

    args = ["privacy", "--out", str(tmp_path), "--iterations", "5", "--sigmas", "0.1"]
    assert main([*args, "--images", "7,3", "--no-train", *TINY]) == 0
    printed = capsys.readouterr().out
    assert str(tmp_path / "grids" / "fedavg.png") in printed
    result = json.loads((tmp_path / "privacy.json").read_text())
    assert result["targets"] == [7, 3]  # the chosen images, in the order given
    saved = np.load(tmp_path / "reconstructions" / "fedavg.npy")
    attack = json.loads((tmp_path / "attacks" / "fedavg.json").read_text())
    assert saved.shape == (2, 1, 8, 8) and saved.min() >= 0 and saved.max() <= 1
    assert [t["index"] for t in attack["targets"]] == [7, 3]
    with Image.open(tmp_path / "grids" / "fedavg.png") as img:
        assert img.format == "PNG" and img.size[0] > 0
    text = (tmp_path / "report.md").read_text()
    assert "training images 7, 3" in text
    for name in ("privacy.json", "attacks/fedavg.json", "reconstructions/fedavg.npy"):
        assert f"- `{name}`" in text
    assert "- `grids/fedavg+dpsgd-0.1.png`" in text


@pytest.mark.parametrize(
    ("images", "message"),
    [
        ("3,1437", "out of range: digits has 1437 training images; pass indices 0 to 1436"),
        ("1,x", "comma-separated"),
    ],
)
def test_bad_chosen_images_are_one_line_errors(tmp_path, capsys, images, message):
    from fedretain.cli import main

    args = ["privacy", "--out", str(tmp_path), "--images", images, "--no-train", *TINY]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    with pytest.raises(ConfigError, match="twice"):
        Study(images=(2, 2))
    with pytest.raises(ConfigError, match=">= 0"):
        Study(images=(-1,))


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--sigmas", "abc"], "--sigmas must be comma-separated numbers"),
        (["--sigmas", ","], "--sigmas ',' lists none"),
        (["--sigmas", "0.1,inf"], "finite noise multipliers"),
        (["--images", ","], "--images ',' lists none"),
        (
            ["--targets", "1000000000"],
            "more than the 1437 training images of digits; pass --targets 1437 or fewer",
        ),
        (["--iterations", "0"], "--iterations must be >= 1"),
    ],
)
def test_bad_privacy_options_are_one_line_errors_with_nothing_written(
    tmp_path, capsys, option, message
):
    from fedretain.cli import main

    out = tmp_path / "study"
    assert main(["privacy", "--out", str(out), *option, "--no-train", *TINY]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("error: ")
    assert not out.exists()
