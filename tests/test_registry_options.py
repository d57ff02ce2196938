"""Component options: every one has a meaning (its factory's ``:param`` line), shown by
``fedretain list <kind> --params``; ``none`` sets an option whose default is None."""

import sys

import pytest

from fedretain.cli import LISTS, main
from fedretain.errors import ConfigError
from fedretain.registry import Registry, coerce, kind, kinds

# modules whose factories still lack ``:param`` lines, and the one common option without its
# ``common_help``: drop an entry once its meanings are written (the last test checks it is due)
PENDING: set[str] = set()
PENDING_COMMON: set[tuple[str, str]] = set()


def _missing() -> list[tuple[str, str, str, str]]:
    """(kind, component, option, factory's module) of every option without a meaning."""
    return [
        (k, name, option, entry.factory.__module__)
        for k in kinds()
        for name, entry in kind(k).items()
        for option, meaning in kind(k).meanings(name).items()
        if not meaning
    ]


def test_every_option_of_every_component_has_a_meaning():
    missing = [m for m in _missing() if m[3] not in PENDING and (m[0], m[2]) not in PENDING_COMMON]
    assert not missing, f"add ':param OPTION: meaning' to these factories' docstrings: {missing}"


def test_pending_meanings_are_still_missing():
    missing = _missing()
    done = PENDING - {m[3] for m in missing}
    done_common = PENDING_COMMON - {(m[0], m[2]) for m in missing}
    assert not done and not done_common, f"remove from PENDING: {done | done_common}"


def test_meanings_come_from_param_lines_keyword_names_and_common_help():
    def factory(x, *, lambda_: float = 1.0, steps: int = 2, eta: float | None = None):
        """Summary.

        :param lambda_: strength of the
            penalty, :class:`Foo` aside
        :param int steps: local steps
        :returns: nothing documented here
        """

    reg = Registry("test-meanings", common={"extra": 0}, common_help={"extra": "every one's"})
    reg.add("f", factory, "a test factory")
    assert reg.meanings("f") == {
        "lambda": "strength of the penalty, :class:`Foo` aside",
        "steps": "local steps",
        "eta": "",
        "extra": "every one's",
    }


@pytest.mark.parametrize("text", ["none", "None", "NONE", " none "])
def test_none_sets_an_option_whose_default_is_none(text):
    assert coerce("algo.eta_p", text, None) is None
    checked = kind("algorithm").check("fedreg", {"eta_p": text}, prefix="algo")
    assert checked == {"eta_p": None}


def test_none_is_only_special_where_the_default_is_none():
    assert coerce("store.dtype", "none", "float32") == "none"  # a string option keeps it
    assert coerce("algo.eta_p", "nonesuch", None) == "nonesuch"
    assert coerce("algo.eta_p", 0.5, None) == 0.5
    with pytest.raises(ConfigError, match=r"algo\.mu: expected a number, got 'none'"):
        coerce("algo.mu", "none", 0.01)


def test_list_params_shows_each_option_with_its_default_and_meaning(capsys):
    assert main(["list", "algorithms", "--params"]) == 0
    out = capsys.readouterr().out
    assert "    algo.eta_p=none  sign-step size" in out
    assert "    algo.lambda=0.0001  strength" in out  # a keyword's config name, not lambda_
    assert main(["list", "datasets", "--params"]) == 0
    assert '    dataset.split="balanced"  the EMNIST split' in capsys.readouterr().out


def test_list_without_params_is_one_line_per_component(capsys):
    for what, k in LISTS.items():
        assert main(["list", what]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert [line.split()[0] for line in lines] == list(kind(k)), what


def test_a_factory_named_by_module_is_imported_on_first_use(tmp_path, monkeypatch):
    (tmp_path / "lazy_component.py").write_text(
        'def build(*, steps: int = 3):\n    """:param steps: local steps"""\n    return steps\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    reg = Registry("test-lazy")
    reg.add("lazy", "lazy_component:build", "a component whose module loads late")
    assert list(reg) == ["lazy"] and reg.get("lazy").description.startswith("a component")
    assert "lazy_component" not in sys.modules
    assert reg.meanings("lazy") == {"steps": "local steps"}
    assert reg.build("lazy", {"steps": 5}) == 5
    monkeypatch.delitem(sys.modules, "lazy_component")
