"""MkDocs hook: the tables that come from the code, written into the pages at build time.

A page holds a marker ``<!-- fedretain:NAME -->`` and gets the table NAME in its place, made
from the one place that defines it: the config keys from :class:`fedretain.recipe.config.Config`
(each field's help) and the registries (:func:`fedretain.registry.kind`), the algorithms from
their registry and their modules' docstrings, the data sets from their registry's
``how_to_get``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

MARKER = re.compile(r"<!-- fedretain:([a-z-]+) -->")


def _cell(text: Any) -> str:
    """One table cell: one line, rST roles and literals as Markdown code, pipes escaped."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", " ".join(str(text).split()))
    return text.replace("``", "`").replace("|", "\\|")


def settings() -> str:
    from fedretain.recipe.config import COMPONENTS, describe_settings, option_defaults, param_help
    from fedretain.registry import kind

    rows = ["| key | default | meaning |", "|---|---|---|"]
    rows += [f"| `{s.key}` | `{s.default}` | {_cell(s.help)} |" for s in describe_settings()]
    out = ["\n".join(rows), ""]
    for prefix, comp in COMPONENTS.items():
        out += [
            f"### `{prefix}.<option>`",
            "",
            f"{param_help(prefix)} (`{comp.name_field}=NAME`).",
            "",
        ]
        out += ["| name | what it is | options (defaults) |", "|---|---|---|"]
        registry = kind(comp.kind)
        for name, entry in registry.items():
            opts = ", ".join(f"`{o}`" for o in option_defaults(prefix, name))
            out.append(f"| `{name}` | {_cell(entry.description)} | {opts or '-'} |")
        out.append("")
    return "\n".join(out)


def _citation(doc: str) -> tuple[str, str, str]:
    """(paper, venue, arXiv id) from a module docstring's reference paragraph."""
    for para in doc.split("\n\n"):
        flat = " ".join(para.split())
        m = re.search(r'"([^"]+)"', flat)
        arxiv = re.search(r"arXiv:(\d{4}\.\d{4,5})", flat)
        if m and arxiv:
            authors = flat[: m.start()].strip(" ,")
            venue = flat[m.end() : arxiv.start()].strip(" ,")
            first = authors.split(",")[0].strip()
            more = " et al." if "," in authors else ""
            return f"{first}{more}, *{m.group(1).rstrip(',')}*", venue or "preprint", arxiv.group(1)
    return "", "", ""


def _payloads(doc: str) -> str:
    for para in doc.split("\n\n"):
        if para.lstrip().startswith("Payloads:"):
            return _cell(para.strip()[len("Payloads:") :])
    return ""


def algorithms() -> str:
    import torch

    from fedretain.registry import kind

    registry = kind("algorithm")
    engines = kind("engine")
    fedavg = registry.build("fedavg")

    def size(keys: tuple[str, ...]) -> int:  # parameter-sized trees, BatchNorm buffers aside
        return sum(k != "buffers" for k in keys)

    base_down, base_up = size(fedavg.downlink_keys), size(fedavg.uplink_keys)
    rows = [
        "| algorithm | paper | venue | arXiv | downlink | uplink | bytes vs FedAvg (down / up) "
        "| client state | engines |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    for name, entry in registry.items():
        algo = registry.build(name)
        doc = sys.modules[entry.factory.__module__].__doc__ or ""
        paper, venue, arxiv = _citation(doc)
        state = sorted(algo.client_init({"w": torch.zeros(1)}))
        supported = [e for e in engines if e != "vmap" or algo.vectorisable]
        arxiv_link = f"[{arxiv}](https://arxiv.org/abs/{arxiv})" if arxiv else "-"
        rows.append(
            f"| `{name}` | {paper or _cell(entry.description)} | {venue or '-'} | {arxiv_link} "
            f"| {', '.join(f'`{k}`' for k in algo.downlink_keys)} "
            f"| {', '.join(f'`{k}`' for k in algo.uplink_keys)} "
            f"| {size(algo.downlink_keys) / base_down:g}x / {size(algo.uplink_keys) / base_up:g}x "
            f"| {', '.join(f'`{k}`' for k in state) or 'none'} | {', '.join(supported)} |"
        )
        payloads = _payloads(doc)
        if payloads:
            notes.append(f"- **`{name}`** ({entry.factory.__module__}): {payloads}")
    return (
        "\n".join(rows)
        + "\n\nPayloads, as each module's docstring states them:\n\n"
        + "\n".join(dict.fromkeys(notes))
    )


def datasets() -> str:
    from fedretain.registry import kind

    registry = kind("dataset")
    rows = [
        "| dataset | what it is | default folder | how to get it | options |",
        "|---|---|---|---|---|",
    ]
    for name, entry in registry.items():
        folder = entry.meta.get("default_dir") or (
            "no files" if not entry.meta.get("needs_files", True) else "`data_dir=`"
        )
        if folder.startswith("/"):
            folder = f"`{folder}`"
        opts = ", ".join(f"`dataset.{k}`" for k in registry.params(name)) or "-"
        rows.append(
            f"| `{name}` | {_cell(entry.description)} | {folder} "
            f"| {_cell(entry.meta.get('how_to_get', ''))} | {opts} |"
        )
    return "\n".join(rows)


def kinds() -> str:
    from fedretain.registry import kind, kinds

    rows = ["| kind | entries |", "|---|---|"]
    for k in kinds():
        rows.append(f"| {k} | {', '.join(f'`{n}`' for n in kind(k))} |")
    return "\n".join(rows)


TABLES: dict[str, Callable[[], str]] = {
    "settings": settings,
    "algorithms": algorithms,
    "datasets": datasets,
    "kinds": kinds,
}


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    def table(m: re.Match[str]) -> str:
        if m.group(1) not in TABLES:
            raise ValueError(f"{page.file.src_path}: unknown table marker {m.group(0)}")
        return TABLES[m.group(1)]()

    return MARKER.sub(table, markdown)
