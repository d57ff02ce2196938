"""Image-folder datasets (Tiny ImageNet, imagefolder) and scikit-learn's digits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from fedretain.data.datasets import load_dataset
from fedretain.errors import ConfigError, DataError

RED, GREEN, BLUE = (220, 20, 30), (20, 200, 40), (10, 30, 210)


def solid(path: Path, color: tuple[int, int, int], size: int = 64, mode: str = "RGB") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    img = Image.new("RGB", (size, size), color)
    img.convert(mode).save(path)
    return path


def make_tiny_imagenet(root: Path) -> Path:
    top = root / "tiny-imagenet-200"
    top.mkdir(parents=True)
    (top / "wnids.txt").write_text("n02\nn01\n")
    (top / "words.txt").write_text("n01\tgoldfish, Carassius auratus\nn02\ttabby, tabby cat\n")
    for i in range(3):
        solid(top / "train/n02/images" / f"n02_{i}.JPEG", RED)
        (top / "train/n02" / "n02_boxes.txt").write_text("")
    for i in range(2):
        solid(top / "train/n01/images" / f"n01_{i}.JPEG", BLUE)
    solid(top / "train/n01/images/n01_gray.JPEG", (128, 128, 128), mode="L")
    solid(top / "val/images/val_0.JPEG", BLUE)
    solid(top / "val/images/val_1.JPEG", RED, size=70)
    (top / "val/val_annotations.txt").write_text(
        "val_0.JPEG\tn01\t0\t0\t10\t10\nval_1.JPEG\tn02\t1\t2\t30\t40\n"
    )
    return top


def test_tiny_imagenet(tmp_path: Path) -> None:
    top = make_tiny_imagenet(tmp_path)
    data = load_dataset("tiny-imagenet", tmp_path)
    assert data.name == "tiny-imagenet" and data.num_classes == 2
    assert data.class_names == ["tabby", "goldfish"]  # wnids.txt order, words.txt names
    assert data.x_train.shape == (6, 3, 64, 64) and data.x_train.dtype == torch.uint8
    assert data.x_test.shape == (2, 3, 64, 64)
    assert data.y_train.tolist() == [0, 0, 0, 1, 1, 1] and data.y_test.tolist() == [1, 0]
    mean = data.x_train.float().mean(dim=(2, 3))
    assert torch.allclose(mean[0], torch.tensor(RED, dtype=torch.float32), atol=6)
    assert torch.allclose(mean[5], torch.tensor([128.0] * 3), atol=3)  # gray -> RGB
    assert torch.allclose(
        data.x_test.float().mean(dim=(2, 3))[1], torch.tensor(RED, dtype=torch.float32), atol=6
    )
    again = load_dataset("tiny-imagenet", top)
    assert torch.equal(again.x_train, data.x_train)


def test_tiny_imagenet_bad_annotation(tmp_path: Path) -> None:
    top = make_tiny_imagenet(tmp_path)
    (top / "val/val_annotations.txt").write_text("val_0.JPEG\tn99\t0\t0\t1\t1\n")
    with pytest.raises(DataError, match=r"line 1"):
        load_dataset("tiny-imagenet", top)
    (top / "val/val_annotations.txt").write_text("missing.JPEG\tn01\t0\t0\t1\t1\n")
    with pytest.raises(DataError, match=r"missing.JPEG"):
        load_dataset("tiny-imagenet", top)


def test_tiny_imagenet_not_there(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"holds wnids.txt") as err:
        load_dataset("tiny-imagenet", tmp_path)
    assert "tiny-imagenet-200.zip" in str(err.value)


def make_folder(root: Path, with_test: bool = False) -> None:
    for i in range(5):
        solid(root / "train/cat" / f"c{i}.png", (RED[0] - i, *RED[1:]), size=20)
        solid(root / "train/dog" / f"d{i}.jpg", (GREEN[0] + i, *GREEN[1:]), size=24)
    (root / "train/dog/notes.txt").write_text("not an image")
    if with_test:
        solid(root / "test/dog/t0.bmp", GREEN, size=8)
        solid(root / "test/cat/t1.jpeg", RED, size=8)


def test_imagefolder_split(tmp_path: Path) -> None:
    make_folder(tmp_path)
    data = load_dataset("imagefolder", tmp_path, size=16)
    assert data.class_names == ["cat", "dog"] and data.num_classes == 2
    assert data.x_train.shape == (8, 3, 16, 16) and data.x_test.shape == (2, 3, 16, 16)
    assert data.x_train.dtype == torch.uint8
    assert sorted(data.y_test.tolist()) == [0, 1]  # stratified: one of each
    for x, y in zip(data.x_train, data.y_train):
        want = RED if y == 0 else GREEN
        assert torch.allclose(x.float().mean(dim=(1, 2)), torch.tensor(want).float(), atol=6)
    assert data.groups is None
    again = load_dataset("imagefolder", tmp_path, size=16)
    assert torch.equal(again.x_test, data.x_test) and torch.equal(again.y_train, data.y_train)
    other = [load_dataset("imagefolder", tmp_path, size=4, seed=s).x_test for s in range(6)]
    assert any(not torch.equal(other[0], o) for o in other[1:])


def test_imagefolder_test_folder_and_grayscale(tmp_path: Path) -> None:
    make_folder(tmp_path, with_test=True)
    data = load_dataset("imagefolder", tmp_path, size=8, grayscale=True)
    assert data.x_train.shape == (10, 1, 8, 8) and data.x_test.shape == (2, 1, 8, 8)
    assert data.y_test.tolist() == [0, 1]  # cat/t1.jpeg, dog/t0.bmp
    solid(tmp_path / "test/bird/b.png", BLUE)
    with pytest.raises(DataError, match=r"bird"):
        load_dataset("imagefolder", tmp_path)


def test_imagefolder_groups_file(tmp_path: Path) -> None:
    make_folder(tmp_path, with_test=True)
    rows = ["path,group"]
    rows += [f"cat/c{i}.png,writer{i % 2}" for i in range(5)]
    rows += [f"dog/d{i}.jpg,writer{2 if i < 4 else 0}" for i in range(5)]
    (tmp_path / "groups.csv").write_text("\n".join(rows) + "\n")
    data = load_dataset("imagefolder", tmp_path, size=4, groups_file="groups.csv")
    assert data.groups is not None and data.groups.dtype == np.int64
    assert data.groups.tolist() == [0, 1, 0, 1, 0, 2, 2, 2, 2, 0]
    assert data.test_groups is None
    # without test/, the held-out images keep their groups too
    import shutil

    shutil.rmtree(tmp_path / "test")
    split = load_dataset("imagefolder", tmp_path, size=4, groups_file=str(tmp_path / "groups.csv"))
    assert split.groups is not None and split.test_groups is not None
    assert len(split.groups) == 8 and len(split.test_groups) == 2
    assert set(split.groups.tolist()) == set(range(split.groups.max() + 1))


def test_imagefolder_groups_file_must_cover_every_image(tmp_path: Path) -> None:
    make_folder(tmp_path)
    (tmp_path / "g.csv").write_text("path,group\ncat/c0.png,a\n")
    with pytest.raises(DataError, match=r"no group for training image cat/c1.png and 8 more"):
        load_dataset("imagefolder", tmp_path, groups_file="g.csv")
    (tmp_path / "g.csv").write_text("file,who\ncat/c0.png,a\n")
    with pytest.raises(DataError, match=r"no 'path,group' header"):
        load_dataset("imagefolder", tmp_path, groups_file="g.csv")
    with pytest.raises(DataError, match=r"does not exist"):
        load_dataset("imagefolder", tmp_path, groups_file="nope.csv")


def test_imagefolder_corrupt_image(tmp_path: Path) -> None:
    make_folder(tmp_path)
    bad = tmp_path / "train/cat/c2.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    with pytest.raises(DataError, match=r"not a readable image") as err:
        load_dataset("imagefolder", tmp_path)
    assert str(bad) in str(err.value)


def test_imagefolder_bad_params_and_empty(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"test_fraction"):
        load_dataset("imagefolder", tmp_path, test_fraction=1.0)
    (tmp_path / "train/empty").mkdir(parents=True)
    with pytest.raises(DataError, match=r"holds no images"):
        load_dataset("imagefolder", tmp_path)


def test_digits() -> None:
    data = load_dataset("digits")
    assert data.name == "digits" and data.num_classes == 10
    assert data.x_train.shape == (1437, 1, 8, 8) and data.x_test.shape == (360, 1, 8, 8)
    assert data.x_train.dtype == torch.float32 and data.y_train.dtype == torch.int64
    assert float(data.x_train.min()) == 0.0 and float(data.x_train.max()) == 1.0
    counts = torch.bincount(data.y_test, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37  # stratified
    again = load_dataset("digits", seed=0)
    other = load_dataset("digits", seed=1)
    assert torch.equal(again.x_test, data.x_test)
    assert not torch.equal(other.y_test, data.y_test)
