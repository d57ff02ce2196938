"""The tables of the documentation that come from the code, kept in the pages themselves.

A page holds the table NAME between ``<!-- fedretain:NAME -->`` and ``<!-- /fedretain:NAME -->``,
made from the one place that defines it: the config keys from
:class:`fedretain.recipe.config.Config` (each field's help) and the registries
(:func:`fedretain.registry.kind`; each option's meaning from its factory's ``:param:`` line),
the algorithms from their registry and their modules' docstrings, the data sets from their
registry's ``how_to_get``, the package's layout from its source tree (every package and module,
found by walking ``fedretain/``, with its docstring's first sentence; read, not imported). The
pages in the repository carry the tables (so they read on their own); after changing a registry,
a config key or a module, rewrite them with::

    python docs/hooks/generate.py --write

(``--check`` lists the pages that are out of date and exits 1). As an MkDocs hook it fills the
tables afresh at build time.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parents[1]
PACKAGE = DOCS.parent / "fedretain"
MARKER = re.compile(r"<!-- fedretain:([a-z-]+) -->")
# a marker with the table after it, up to its end marker (a bare marker: nothing yet)
_BLOCK = re.compile(
    r"<!-- fedretain:([a-z-]+) -->(?:(?:(?!<!-- fedretain:).)*?<!-- /fedretain:\1 -->)?", re.S
)


def _cell(text: Any) -> str:
    """One table cell: one line, rST roles and literals as Markdown code, pipes escaped."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", " ".join(str(text).split()))
    return text.replace("``", "`").replace("|", "\\|")


def settings() -> str:
    from fedretain.cli import components
    from fedretain.recipe.config import COMPONENTS, describe_settings, option_defaults, param_help
    from fedretain.registry import kind

    components()  # every layer's registrations: the diagnostics' kind is the run layer's
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
        out += ["| name | what it is | option (default) | meaning |", "|---|---|---|---|"]
        registry = kind(comp.kind)
        for name, entry in registry.items():
            options = zip(option_defaults(prefix, name), registry.meanings(name).values())
            first = f"| `{name}` | {_cell(entry.description)} |"
            for option, meaning in options:
                out.append(f"{first} `{option}` | {_cell(meaning)} |")
                first = "| | |"
            if first.startswith("| `"):
                out.append(f"{first} - | |")
        out.append("")
    return "\n".join(out).rstrip("\n")


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
        supported = [e for e in engines if e != "vmap" or algo.hints.vectorisable]
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
    from fedretain.recipe.config import toml_text
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
        meanings = registry.meanings(name)
        opts = "<br>".join(
            f"`dataset.{k}={toml_text(v)}`: {_cell(meanings[k])}"
            for k, v in registry.params(name).items()
        )
        rows.append(
            f"| `{name}` | {_cell(entry.description)} | {folder} "
            f"| {_cell(entry.meta.get('how_to_get', ''))} | {opts or '-'} |"
        )
    return "\n".join(rows)


def kinds() -> str:
    from fedretain.cli import components
    from fedretain.registry import kind

    rows = ["| kind | entries |", "|---|---|"]
    for k in components():
        rows.append(f"| {k} | {', '.join(f'`{n}`' for n in kind(k))} |")
    return "\n".join(rows)


NO_DOCSTRING = "**no module docstring**"
SUMMARY_CHARS = 120  # a longer first sentence is cut at a word, with an ellipsis
# words that end in a full stop without ending the sentence
_ABBREVIATIONS = ("e.g", "i.e", "al", "cf", "vs", "etc", "Fig", "Eq", "App", "No")


def first_sentence(doc: str, limit: int = SUMMARY_CHARS) -> str:
    """The first sentence of a docstring's first paragraph, one line of Markdown: roles as code
    (``:class:`~a.B``` as `` `B` ``), cut at a word after ``limit`` characters."""
    para = " ".join(doc.strip().split("\n\n")[0].split())
    end = len(para)
    for m in re.finditer(r"[.!?](?=\s+[A-Z(`*\"])", para):
        if not para[: m.start()].endswith(_ABBREVIATIONS):
            end = m.end()
            break
    text = re.sub(r":[a-z]+:`~(?:[\w.]*\.)?(\w+)`", r"`\1`", para[:end])  # ~a.b.C -> C
    text = _cell(text)
    if len(text) > limit:
        text = text[: text.rfind(" ", 0, limit)].rstrip(",;:") + "…"
        if text.count("`") % 2:  # a code span the cut left open
            text += "`"
    return text


def _summary(path: Path) -> str:
    """A module's first docstring sentence, or :data:`NO_DOCSTRING` where it has none (or one
    that only names the module: ``\"\"\"core.\"\"\"``)."""
    try:
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
    except SyntaxError as e:
        return f"**does not parse** (line {e.lineno})"
    name = path.parent.name if path.name == "__init__.py" else path.stem
    if doc.strip().rstrip(".").lower() in ("", name.lower()):
        return NO_DOCSTRING
    return first_sentence(doc)


def _packages(root: Path) -> list[Path]:
    """``root`` and every folder under it that holds Python modules, depth first, by name."""
    out = [root]
    for sub in sorted(d for d in root.iterdir() if d.is_dir()):
        if any(sub.rglob("*.py")):
            out += _packages(sub)
    return out


def layout(root: Path = PACKAGE) -> str:
    """One section per package of ``root`` (nested ones too): its ``__init__``'s first sentence,
    then a table of its modules and subpackages, each with its docstring's first sentence."""
    out = []
    for package in _packages(root):
        rel = package.relative_to(root.parent).as_posix()
        init = package / "__init__.py"
        out += [f"### `{rel}/`", ""]
        out += [_summary(init) if init.is_file() else "**no `__init__.py`**", ""]
        rows = ["| module | what it is |", "|---|---|"]
        for module in sorted(package.glob("*.py")):
            if module.name != "__init__.py":
                rows.append(f"| `{module.name}` | {_summary(module)} |")
        for sub in _packages(package)[1:]:
            if sub.parent == package:
                summary = _summary(sub / "__init__.py") if (sub / "__init__.py").is_file() else ""
                rows.append(f"| [`{sub.name}/`](#{_anchor(sub, root)}) | {summary} |")
        if len(rows) > 2:
            out += [*rows, ""]
    return "\n".join(out).rstrip("\n")


def _anchor(package: Path, root: Path) -> str:
    """The id MkDocs gives the heading ``### `fedretain/core/``` (``fedretaincore``)."""
    return re.sub(r"[^\w-]", "", package.relative_to(root.parent).as_posix()).lower()


def presets() -> str:
    """Every preset of ``fedretain reproduce`` from its registry: paper, table, data, scales
    (with their seeds), the small scale's estimate and the paper scale's on one H100
    (``paper_cost.json``, written by benchmarks/paper_cost.py)."""
    from fedretain.data.fetch import SOURCES
    from fedretain.studies.presets import PRESETS
    from fedretain.studies.reproduce.cost import read_costs

    costs = read_costs()
    rows = [
        "| preset | paper | what it runs | data | scales (seeds) | small: estimate "
        "| paper: one H100, from its FLOPs |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, entry in PRESETS.items():
        meta = entry.meta
        data = f"`{meta['dataset']}`"
        if meta["dataset"] in SOURCES:
            data += f" (`fedretain data get {meta['dataset']}`)"
        if meta.get("standin"):
            data += f", else `{meta['standin']}` standing in"
        scales = ", ".join(f"{s} ({n})" for s, n in meta["seeds"].items())
        rows.append(
            f"| `{name}` | {_cell(meta['paper'])} | {_cell(entry.description)} | {data} "
            f"| {scales} | {_cell(meta['estimate'])} "
            f"| {_cell(costs[name].text() if name in costs else 'not counted yet')} |"
        )
    return "\n".join(rows)


def claims() -> str:
    """The claims ledger's counts per paper, from the committed reports' claims.json."""
    from fedretain.studies.reproduce.ledger import ledger_counts

    return ledger_counts(DOCS.parent / "results")


TABLES: dict[str, Callable[[], str]] = {
    "claims": claims,
    "presets": presets,
    "settings": settings,
    "algorithms": algorithms,
    "datasets": datasets,
    "kinds": kinds,
    "layout": layout,
}


def fill(markdown: str, where: str = "page") -> str:
    """``markdown`` with each marked table made afresh (a bare marker gets its table)."""

    def table(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in TABLES:
            raise ValueError(f"{where}: unknown table marker <!-- fedretain:{name} -->")
        return f"<!-- fedretain:{name} -->\n\n{TABLES[name]()}\n\n<!-- /fedretain:{name} -->"

    return _BLOCK.sub(table, markdown)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return fill(markdown, page.file.src_path)


def stale_pages(write: bool = False) -> list[Path]:
    """The pages under ``docs/``, and the README, whose tables differ from the code's
    (rewritten if ``write``)."""
    from fedretain.cli import components

    components()  # every layer's registrations, which the tables read
    stale = []
    for page in [*sorted(DOCS.rglob("*.md")), DOCS.parent / "README.md"]:
        text = page.read_text(encoding="utf-8")
        if MARKER.search(text) and (new := fill(text, str(page))) != text:
            stale.append(page)
            if write:
                page.write_text(new, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write the code's tables into docs/*.md and README.md."
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", action="store_true", help="rewrite the out-of-date pages")
    action.add_argument("--check", action="store_true", help="list them; exit 1 if any")
    args = parser.parse_args(argv)
    stale = stale_pages(write=args.write)
    for page in stale:
        print(f"{'rewrote' if args.write else 'out of date'}: {page.relative_to(DOCS.parent)}")
    if args.check and stale:
        print("run: python docs/hooks/generate.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
