"""The documentation's generated tables come from the code (the MkDocs hook), and every page of
the navigation exists; `mkdocs build --strict` itself runs in scripts/test.sh."""

import importlib.util
import re
from pathlib import Path

import pytest

from fedretain.recipe.config import COMPONENTS, describe_settings
from fedretain.registry import kind

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


@pytest.fixture(scope="module")
def hook():
    spec = importlib.util.spec_from_file_location("docs_hook", DOCS / "hooks" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
