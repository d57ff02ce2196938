"""The documentation's generated tables come from the code (the MkDocs hook), and every page of
the navigation exists; `mkdocs build --strict` itself runs in scripts/test.sh."""

import importlib.util
import json
import re
from pathlib import Path

import pytest

from fedretain.recipe.config import COMPONENTS, describe_settings
from fedretain.registry import kind

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _load_hook(name: str):
    """One of docs/hooks/, as MkDocs loads it (a file, not a package module)."""
    spec = importlib.util.spec_from_file_location(f"docs_{name}", DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def hook():
    return _load_hook("generate")


def test_every_page_of_the_navigation_exists_and_every_marker_is_known(hook):
    nav = re.findall(r":\s*([\w/-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert "algorithms.md" in nav and "api/flower.md" in nav
    for page in nav:
        text = (DOCS / page).read_text()
        for marker in hook.MARKER.findall(text):
            assert marker in hook.TABLES, (page, marker)


def test_algorithm_table_has_every_algorithm_with_its_paper(hook):
    table = hook.algorithms()
    for name in kind("algorithm"):
        assert f"| `{name}` |" in table, name
    assert "[1910.06378](https://arxiv.org/abs/1910.06378)" in table  # SCAFFOLD
    row = next(line for line in table.splitlines() if line.startswith("| `scaffold` |"))
    assert "ICML 2020" in row and "2x / 2x" in row and "`c_i`" in row


def test_settings_and_datasets_tables_come_from_config_and_registries(hook):
    settings = hook.settings()
    for s in describe_settings():
        assert f"| `{s.key}` | `{s.default}` |" in settings, s.key
    for prefix in COMPONENTS:
        assert f"### `{prefix}.<option>`" in settings
    datasets = hook.datasets()
    for name, entry in kind("dataset").items():
        assert f"| `{name}` |" in datasets
        assert hook._cell(entry.meta["how_to_get"]) in datasets


def test_committed_pages_carry_the_tables_of_the_code(hook):
    stale = [str(p.relative_to(ROOT)) for p in hook.stale_pages()]
    assert not stale, f"{stale} out of date: run python docs/hooks/generate.py --write"


def test_fill_puts_a_table_between_its_markers_and_refreshes_it(hook):
    once = hook.fill("a\n\n<!-- fedretain:kinds -->\n\nb\n")
    assert once.startswith("a\n\n<!-- fedretain:kinds -->\n\n| kind | entries |")
    assert once.endswith("<!-- /fedretain:kinds -->\n\nb\n")
    stale = once.replace("| kind | entries |", "| old |")
    assert hook.fill(stale) == once == hook.fill(once)
    with pytest.raises(ValueError, match="unknown table marker"):
        hook.fill("<!-- fedretain:nosuch -->")


def test_every_file_the_docs_and_experiments_point_to_exists():
    pointers = re.compile(r"(?<![\w/.])((?:scripts|benchmarks|experiments|docs)/[\w./-]*\w)")
    texts = [*DOCS.glob("*.md"), *(ROOT / "experiments").glob("*.toml"), ROOT / "README.md"]
    missing = [
        f"{text.relative_to(ROOT)}: {path}"
        for text in texts
        for path in pointers.findall(text.read_text())
        if not (ROOT / path).exists()
    ]
    assert not missing, missing


def test_layout_page_lists_every_package_and_module_of_the_tree(hook):
    page = (DOCS / "layout.md").read_text()
    assert "<!-- fedretain:layout -->" in page  # so a stale page fails the test above
    table = hook.layout()
    package = ROOT / "fedretain"
    for module in package.rglob("*.py"):
        section = f"### `{module.parent.relative_to(ROOT).as_posix()}/`"
        assert section in table, module
        if module.name != "__init__.py":
            rows = table.split(section, 1)[1].split("\n### ", 1)[0]
            assert f"| `{module.name}` | " in rows, module


def test_layout_walks_nested_packages_and_marks_missing_docstrings(hook, tmp_path):
    root = tmp_path / "pkg"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "__init__.py").write_text('"""The package. More about it."""\n')
    (root / "plain.py").write_text("x = 1\n")  # no docstring
    (root / "sub" / "__init__.py").write_text('"""sub."""\n')  # a docstring naming only itself
    (root / "sub" / "long.py").write_text(
        '"""Uses :class:`~a.b.Thing`, e.g. Alpha, and ``x | y`` with '
        + "many words " * 20
        + '. A second sentence."""\n'
    )
    (root / "sub" / "deeper" / "leaf.py").write_text('"""A leaf, found by walking."""\n')
    table = hook.layout(root)
    sections = [line for line in table.splitlines() if line.startswith("### ")]
    assert sections == ["### `pkg/`", "### `pkg/sub/`", "### `pkg/sub/deeper/`"]
    assert "### `pkg/`\n\nThe package.\n" in table
    assert f"| `plain.py` | {hook.NO_DOCSTRING} |" in table
    assert f"| [`sub/`](#pkgsub) | {hook.NO_DOCSTRING} |" in table
    assert "| `leaf.py` | A leaf, found by walking. |" in table
    long_row = next(line for line in table.splitlines() if line.startswith("| `long.py` |"))
    assert long_row.startswith("| `long.py` | Uses `Thing`, e.g. Alpha, and `x \\| y` with many")
    assert long_row.endswith("… |") and len(long_row) < 20 + hook.SUMMARY_CHARS
    assert "second sentence" not in table


@pytest.fixture(scope="module")
def results_hook():
    return _load_hook("results")


def test_every_committed_report_is_a_page_with_its_plots(results_hook):
    reports = results_hook.reports()
    assert Path("results/demo/report.md") in reports and len(reports) >= 10
    files = results_hook.report_files()
    for report in reports:
        text = (ROOT / report).read_text()
        for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text):
            assert report.parent / image in files and (ROOT / report.parent / image).is_file()
    nav = [{"Home": "index.md"}, {"Reproducing the papers": "reproduce.md"}, {"Layout": "x.md"}]
    results_hook.on_config({"nav": nav})
    assert list(nav[2]) == ["Reports"] and list(nav[3]) == ["Layout"]
    assert [next(iter(e.values())) for e in nav[2]["Reports"]] == [r.as_posix() for r in reports]


def test_each_curve_whose_numbers_sit_beside_it_gets_an_interactive_plot(results_hook, tmp_path):
    curves = [
        {"method": "FedAvg", "round": [0, 1, 2], "mean": [0.1, 0.4, 0.5], "std": [0, 0.02, 0.03]},
        {"method": "FedReg", "round": [0, 1, 2], "mean": [0.1, 0.5, 0.6], "std": [0, 0, 0]},
    ]
    stopped = [{"label": "SCAFFOLD seed 1: diverged", "round": [0, 1], "accuracy": [0.1, 0.2]}]
    data = {"title": "two classes", "x": "round", "curves": curves, "stopped": stopped}
    (tmp_path / "accuracy-two.json").write_text(json.dumps(data))
    markdown = "![a](accuracy-two.png)\n\n![b](accuracy-panels-two.png)\n\n![c](accuracy-one.png)\n"
    page = results_hook.with_interactive(markdown, tmp_path, 3)
    assert page.count('<script src="../../../assets/plotly.min.js"></script>') == 1
    assert page.count("Plotly.newPlot") == 1 and 'id="plot-accuracy-two"' in page
    for name in ("FedAvg", "FedReg", "SCAFFOLD seed 1: diverged"):
        assert f'"name":"{name}"' in page
    assert page.count('"fill":"toself"') == 1  # a band only where the seeds spread
    assert "\n\n\n" not in page.split("Plotly.newPlot")[0]  # one raw HTML block
    assert page.endswith("![c](accuracy-one.png)\n")  # no numbers beside it: the PNG alone
    committed = [p for p in (ROOT / "results").glob("*/accuracy-*.json")]
    assert committed  # the committed reports ship their curves' numbers


def test_the_home_page_and_the_ledger_link_to_the_report_pages():
    home = (DOCS / "index.md").read_text()
    assert "](results/demo/report.md)" in home and "](claims.md)" in home
    for image in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", home):
        assert (ROOT / image).is_file(), image
    ledger = (DOCS / "claims.md").read_text()
    for report in re.findall(r"`(results/[a-z0-9-]+/report\.md)`", ledger):
        assert f"[`{report}`]({report})" in ledger
    nav = re.findall(r":\s*([\w/-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), re.M)
    for page in nav:
        if not page.startswith(("api/", "index")):
            assert f"]({page})" in home, page  # the home page lists every page


def test_the_presets_table_has_a_row_for_every_preset_of_the_registry(hook):
    from fedretain.studies.presets import PRESETS

    table = hook.presets()
    for name, entry in PRESETS.items():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{name}` |"))
        assert entry.meta["estimate"] in row and entry.meta["paper"] in row
    assert "`fedretain data get cifar10`" in table  # the command for data not here
    assert "<!-- fedretain:presets -->" in (DOCS / "reproduce.md").read_text()
