"""The environment of gpu_check's rehearsal (``bash scripts/gpu_check.sh --rehearse``): a new
virtual environment whose packages are those of the lent GPU machine's image
(``scripts/gpu_image.txt``) that the project's environment has, linked from it, and nothing
else: no flwr, Ray, Opacus, tomli-w or quadprog unless the wheels gpu_check is given bring them.
No network is needed; torch stays the project's CPU wheel.

Run it with the project's interpreter (the one whose packages are linked):

    .venv/bin/python scripts/rehearse_env.py FOLDER    # prints FOLDER's python, then the gaps

The first line printed is the new interpreter; the others say where the rehearsal differs from
the image (Python, package versions, packages the image has and this machine does not).
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import re
import subprocess
import sys
import venv
from collections import defaultdict
from pathlib import Path, PurePosixPath

IMAGE = Path(__file__).with_name("gpu_image.txt")


def normalized(name: str) -> str:
    """A distribution's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def image_packages(path: Path = IMAGE) -> dict[str, str]:
    """The image's packages: normalised name -> version ('' where none was read there)."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.strip().partition(" ")
            out[normalized(name)] = version
    return out


def owned_files(wanted: set[str]) -> tuple[dict[str, list[PurePosixPath]], dict[str, set[str]]]:
    """The files of this interpreter's distributions, by top-level entry of site-packages,
    for the ``wanted`` ones; and every distribution owning something under each entry."""
    files: dict[str, list[PurePosixPath]] = defaultdict(list)
    owners: dict[str, set[str]] = defaultdict(set)
    for dist in md.distributions():
        name = normalized(dist.metadata["Name"] or "")
        for f in dist.files or []:
            parts = PurePosixPath(f).parts
            if not parts or parts[0] in ("..", "__pycache__"):  # scripts in bin/, stray pyc
                continue
            owners[parts[0]].add(name)
            if name in wanted:
                files[parts[0]].append(PurePosixPath(f))
    return files, owners


def build(folder: Path) -> tuple[Path, list[str]]:
    """Create the environment in ``folder`` (replacing one there); its interpreter and the
    differences from the image."""
    venv.EnvBuilder(with_pip=False, clear=True, symlinks=True).create(folder)
    python = folder / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(subprocess.check_output([python, "-c", purelib], text=True).strip())
    source = Path(md.distribution("pip").locate_file(""))  # this interpreter's site-packages
    image = image_packages()
    files, owners = owned_files(set(image))
    for top, paths in files.items():
        if owners[top] <= set(image):  # the whole entry belongs to the image's packages
            (site / top).symlink_to(source / top)
            continue
        for p in paths:  # shared with a package the image lacks: only the image's files
            target = site / p
            if (source / p).exists() and not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                target.symlink_to(source / p)
    return python, differences(image)


def differences(image: dict[str, str]) -> list[str]:
    """Where the rehearsal differs from the image: Python, versions, packages missing here."""
    here = {normalized(d.metadata["Name"] or ""): d.version for d in md.distributions()}
    py = ".".join(map(str, sys.version_info[:3]))
    notes = [f"python {py} here, {image.get('python', '?')} on the image"]
    for name, version in sorted(image.items()):
        if name != "python" and version and name in here and here[name] != version:
            notes.append(f"{name} {here[name]} here, {version} on the image")
    missing = sorted(n for n in image if n != "python" and n not in here)
    if missing:
        notes.append(
            f"{len(missing)} of the image's packages are not installed here: " + ", ".join(missing)
        )
    return notes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path, help="where to build it (replaced)")
    args = ap.parse_args(argv)
    python, notes = build(args.folder.resolve())
    print(python)
    for note in notes:
        print(f"rehearsal differs from the image: {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
