"""The committed reports as pages of the site, rendered from the files under ``results/``.

Every ``results/<preset>/report.md`` becomes the page ``results/<preset>/report/`` with the
PNGs it shows, read from where they are committed (no copy in ``docs/`` that could drift), and
the navigation gets a "Reports" section listing them after "Reproducing the papers". Links to
them from the pages (the home page, the claims ledger, docs/reproduce.md) are written as
``results/<preset>/report.md``, which the strict build checks like any other link.

Under each accuracy-over-rounds PNG whose numbers the report wrote beside it
(``accuracy-<setting>.json``), the page also shows them as an interactive plot (Plotly: hover
for the round and the value, click a method in the legend to hide or show it), drawn from that
file; the PNG stays, for the markdown report. Plotly's script is served from the site itself
(``assets/plotly.min.js``, from the plotly package), so the pages need no network.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]+\.png)\)")
AFTER = "Reproducing the papers"  # the navigation entry the reports follow
PLOTLY_JS = "assets/plotly.min.js"
CURVES = re.compile(r"^!\[[^\]]*\]\((accuracy-[^)\s/]+)\.png\)[ \t]*$", re.MULTILINE)
# told apart without colour: a dash pattern and a marker per method, as the PNGs do
DASHES = ("solid", "dash", "dashdot", "dot")
SYMBOLS = ("circle", "square", "triangle-up", "triangle-down", "diamond", "cross", "x", "star")


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


def interactive(data: dict[str, Any], div_id: str) -> str:
    """The HTML of one interactive curve plot from a report's ``accuracy-<setting>.json``:
    each method's mean accuracy over rounds with its ± one-standard-deviation band (hidden
    and shown with it), each diverged seed as a thin line ending in a cross."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    palette = qualitative.D3
    fig = go.Figure()
    for i, curve in enumerate(data["curves"]):
        name, xs, mean, std = curve["method"], curve["round"], curve["mean"], curve["std"]
        colour = palette[i % len(palette)]
        if any(std):
            fig.add_trace(
                go.Scatter(
                    x=xs + xs[::-1],
                    y=[m + s for m, s in zip(mean, std, strict=True)]
                    + [m - s for m, s in zip(mean[::-1], std[::-1], strict=True)],
                    fill="toself",
                    fillcolor=colour,
                    opacity=0.15,
                    line={"width": 0},
                    hoverinfo="skip",
                    showlegend=False,
                    legendgroup=name,
                )
            )
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=mean,
                customdata=std,
                name=name,
                legendgroup=name,
                mode="lines+markers",
                line={"color": colour, "dash": DASHES[i % len(DASHES)], "width": 2},
                marker={"symbol": SYMBOLS[i % len(SYMBOLS)], "size": 6},
                hovertemplate=f"{name}<br>round %{{x}}<br>accuracy %{{y:.4f}} ± "
                "%{customdata:.4f}<extra></extra>",
            )
        )
    for seed in data["stopped"]:
        fig.add_trace(
            go.Scatter(
                x=seed["round"],
                y=seed["accuracy"],
                name=seed["label"],
                mode="lines",
                line={"color": "grey", "width": 1},
                hovertemplate="round %{x}<br>accuracy %{y:.4f}<extra></extra>",
            )
        )
    fig.update_layout(
        title=data["title"],
        xaxis_title="round",
        yaxis_title="test accuracy",
        hovermode="closest",
        template="plotly_white",
        margin={"l": 60, "r": 20, "t": 50, "b": 50},
        height=460,
    )
    html = fig.to_html(
        full_html=False,
        include_plotlyjs=False,
        div_id=div_id,
        config={"displaylogo": False, "responsive": True},
    )
    return "\n".join(line for line in html.splitlines() if line.strip())


def with_interactive(markdown: str, folder: Path, depth: int) -> str:
    """``markdown`` of a report in ``folder`` with an interactive plot under each accuracy
    PNG whose numbers sit beside it, and Plotly's script (``depth`` folders below the site's
    root) before the first."""
    script = f'<script src="{"../" * depth}{PLOTLY_JS}"></script>'
    shown = []

    def add(m: re.Match[str]) -> str:
        numbers = folder / f"{m.group(1)}.json"
        if not numbers.is_file():
            return m.group(0)
        html = interactive(json.loads(numbers.read_text()), f"plot-{m.group(1)}")
        head = "" if shown else script + "\n"
        shown.append(m.group(1))
        return (
            f"{m.group(0)}\n\n{head}{html}\n\n"
            "Interactive: hover for the round and the value; click a method in the legend to "
            "hide or show it."
        )

    return CURVES.sub(add, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    src = Path(page.file.src_uri)
    if src not in reports():
        return markdown
    return with_interactive(markdown, ROOT / src.parent, page.url.count("/"))


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File
    from plotly.offline import get_plotlyjs

    files.append(File.generated(config, PLOTLY_JS, content=get_plotlyjs()))

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
