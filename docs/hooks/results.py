"""The committed reports as pages of the site, rendered from the files under ``results/``.

Every ``results/<preset>/report.md`` becomes the page ``results/<preset>/report/`` with the
PNGs it shows, read from where they are committed (no copy in ``docs/`` that could drift), and
the navigation gets a "Reports" section listing them after "Reproducing the papers". Links to
them from the pages (the home page, the claims ledger, docs/reproduce.md) are written as
``results/<preset>/report.md``, which the strict build checks like any other link.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")
AFTER = "Reproducing the papers"  # the navigation entry the reports follow


def reports(root: Path = ROOT) -> list[Path]:
    """The committed reports' files, relative to ``root``: ``results/<preset>/report.md``."""
    return sorted(p.relative_to(root) for p in (root / "results").glob("*/report.md"))


def report_files(root: Path = ROOT) -> list[Path]:
    """Every report and every PNG a report shows, relative to ``root``."""
    out = []
    for report in reports(root):
        out.append(report)
        for image in dict.fromkeys(IMAGE.findall((root / report).read_text())):
            out.append(report.parent / image)
    return out


def title(report: Path, root: Path = ROOT) -> str:
    """The navigation title of a report: its preset folder's name."""
    return report.parent.name


def on_config(config: Any) -> Any:
    nav = config["nav"]
    entries = [{title(r): r.as_posix()} for r in reports()]
    at = next((i for i, e in enumerate(nav) if isinstance(e, dict) and AFTER in e), len(nav) - 1)
    nav.insert(at + 1, {"Reports": entries})
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path in report_files():
        files.append(
            File(
                path.as_posix(),
                src_dir=str(ROOT),
                dest_dir=config["site_dir"],
                use_directory_urls=config["use_directory_urls"],
            )
        )
    return files
