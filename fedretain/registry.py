"""One registry for every named component: algorithms, datasets, partitions, models, losses,
local optimisers, participation models, engines, client stores and diagnostics.

Each kind has one :class:`Registry`, declared in the package that owns the kind
(``ALGORITHMS`` in :mod:`fedretain.algorithms`, ``ENGINES`` in :mod:`fedretain.engines`, ...),
and each component is one line there::

    ALGORITHMS.add("fedprox", fedprox, "FedAvg with a proximal term (Li 2020)")

The factory may also be named as ``"fedretain.algorithms.fedprox:fedprox"``: it is then imported
when first used, so that listing a kind's names and descriptions (``fedretain list``) does not
import torch.
A component's parameters are its factory's keyword arguments that have defaults (positional
arguments are what fedretain supplies: the dataset's labels, the model's input shape...);
a config sets them as ``<prefix>.<param>`` (``algo.mu``, ``engine.chunk``). Lookup, "did you
mean", and checking each value against the type of its default are written once, here.
A name that is a Python keyword takes a trailing underscore in the factory (``lambda_``) and
none in configs (``algo.lambda``). Each parameter's meaning is a ``:param NAME: meaning`` line
of its factory's docstring (of a class: the class's or ``__init__``'s), shown by
``fedretain list <kind> --params`` and in the documentation (:meth:`Registry.meanings`).

:func:`kind` returns a kind's registry. A kind is declared where its :class:`Registry` is made
and its entries are registered by the modules that add them, each when it is imported: the
package that owns the kind, and upper layers extending it (``engine=flower`` is registered by
:mod:`fedretain.flower`, the continual algorithms by :mod:`fedretain.continual`). This module,
the bottom of the package, names none of them. A module that looks a kind up imports the
modules registering its entries at its own layer and below (the layer test checks it, and that
every registration in the package is reachable from the entrances): recipe's configuration
sees every algorithm, model and engine below it; the run adds Flower's engine, the diagnostics
and the trackers; the command line sees everything.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
import keyword
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from fedretain.errors import ConfigError, unknown_choice

_REGISTRIES: dict[str, Registry] = {}
# ":param name: text" up to the next field line, a blank line or the end (Sphinx style)
_PARAM = re.compile(
    r"^[ \t]*:param[ \t]+(?:[^:\s]+[ \t]+)?(\w+):(.*?)(?=^[ \t]*:(?!\w+:`)|^[ \t]*$|\Z)",
    re.M | re.S,
)


@dataclass(frozen=True)
class Entry:
    """One registered component: ``factory(*supplied, **params)`` builds it. ``target`` is the
    factory, or ``"module:name"`` where it is: imported on first use of :attr:`factory`, so
    that listing names and descriptions imports none of the modules behind them."""

    name: str
    target: Callable[..., Any] | str
    description: str  # one line for `fedretain list`
    meta: dict[str, Any] = field(default_factory=dict)  # kind-specific facts (a dataset's folder)
    module: str = ""  # the module that registered it

    @functools.cached_property
    def factory(self) -> Callable[..., Any]:
        if not isinstance(self.target, str):
            return self.target
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)


def config_key(param: str) -> str:
    """The config name of a factory keyword: ``lambda_`` (a Python keyword + "_") is ``lambda``."""
    stem = param.removesuffix("_")
    return stem if stem != param and keyword.iskeyword(stem) else param


class Registry:
    """The components of one kind, by name.

    ``internal``: factory keywords fedretain supplies itself (never config keys);
    ``common``: parameters every entry takes on top of its factory's (handled by the caller),
    with their meanings in ``common_help``.
    """

    def __init__(
        self,
        kind: str,
        *,
        internal: tuple[str, ...] = (),
        common: dict[str, Any] | None = None,
        common_help: dict[str, str] | None = None,
    ) -> None:
        self.kind = kind
        self.internal = set(internal)
        self.common = dict(common or {})
        self.common_help = dict(common_help or {})
        self.entries: dict[str, Entry] = {}
        _REGISTRIES[kind] = self

    def add(
        self, name: str, factory: Callable[..., Any] | str, description: str, **meta: Any
    ) -> Callable[..., Any] | str:
        """Register ``factory`` (or ``"module:name"``, imported on first use) as ``name``."""
        if name in self.entries:
            raise ValueError(f"{self.kind} '{name}' is registered twice")
        module = sys._getframe(1).f_globals.get("__name__", "")
        self.entries[name] = Entry(name, factory, description, meta, module)
        return factory

    def __contains__(self, name: object) -> bool:
        return name in self.entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def items(self) -> list[tuple[str, Entry]]:
        return list(self.entries.items())

    def get(self, name: str) -> Entry:
        if name not in self.entries:
            raise ConfigError(unknown_choice(self.kind, name, self.entries))
        return self.entries[name]

    def keywords(self, name: str) -> dict[str, inspect.Parameter]:
        """Config name -> the factory's parameter, for the parameters a config may set."""
        sig = inspect.signature(self.get(name).factory)
        return {
            config_key(k): p
            for k, p in sig.parameters.items()
            if k not in self.internal
            and p.default is not inspect.Parameter.empty
            and p.kind is not inspect.Parameter.VAR_KEYWORD
        }

    def takes(self, name: str, keyword: str) -> bool:
        """Whether component ``name``'s factory has the keyword argument ``keyword``."""
        return keyword in inspect.signature(self.get(name).factory).parameters

    def params(self, name: str) -> dict[str, Any]:
        """The parameters of component ``name`` with their defaults (factory's, then common)."""
        return {**{k: p.default for k, p in self.keywords(name).items()}, **self.common}

    def meanings(self, name: str) -> dict[str, str]:
        """The meaning of each parameter of component ``name`` (:meth:`params`' keys), from the
        ``:param NAME:`` lines of its factory's docstring; "" where there is none."""
        factory = self.get(name).factory
        docs = [inspect.getdoc(factory) or ""]
        if inspect.isclass(factory):
            docs.append(inspect.getdoc(factory.__init__) or "")
        found = {
            config_key(m.group(1)): " ".join(m.group(2).split())
            for doc in reversed(docs)
            for m in _PARAM.finditer(doc)
        }
        return {k: found.get(k) or self.common_help.get(k, "") for k in self.params(name)}

    def check(self, name: str, given: dict[str, Any], prefix: str | None = None) -> dict[str, Any]:
        """``given`` with every key known and every value of its default's type (one-line
        errors naming the key, the value and what is allowed)."""
        defaults = self.params(name)
        prefix = prefix or self.kind
        out = {}
        for key, value in given.items():
            if key not in defaults:
                close = difflib.get_close_matches(key, list(defaults), n=1)
                hint = f" (did you mean '{prefix}.{close[0]}'?)" if close else ""
                valid = ", ".join(f"{prefix}.{k}" for k in defaults) or "none"
                raise ConfigError(
                    f"unknown key '{prefix}.{key}' for {self.kind} {name}{hint}; valid: {valid}"
                )
            out[key] = coerce(f"{prefix}.{key}", value, defaults[key])
        return out

    def build(
        self,
        name: str,
        params: dict[str, Any] | None = None,
        *args: Any,
        prefix: str | None = None,
        **supplied: Any,
    ) -> Any:
        """``factory(*args, **supplied, **params)``: ``params`` are the config's (checked with
        :meth:`check`), ``args`` and ``supplied`` fedretain's own. A ValueError of the factory
        (a value out of range) becomes a one-line ConfigError."""
        checked = self.check(name, params or {}, prefix)
        keywords = self.keywords(name)
        try:
            return self.get(name).factory(
                *args, **supplied, **{keywords[k].name: v for k, v in checked.items()}
            )
        except ValueError as e:
            raise ConfigError(f"{self.kind} {name}: {e}") from None


def coerce(key: str, value: Any, default: Any) -> Any:
    """``value`` checked against the type of ``default`` (ints are accepted for floats; a
    comma-separated string or a single value for a list); a default of None accepts anything,
    and the string ``none`` (any case) is None there."""
    if default is None:
        return None if isinstance(value, str) and value.strip().lower() == "none" else value
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        expected = "true or false"
    elif isinstance(default, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        expected = "an integer"
    elif isinstance(default, float):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        expected = "a number"
    elif isinstance(default, str):
        if isinstance(value, str):
            return value
        expected = "a string"
    elif isinstance(default, list | tuple):
        if isinstance(value, list | tuple):
            return list(value)
        if isinstance(value, str):  # diagnostics=forgetting or a,b: one item per comma
            return [v.strip() for v in value.split(",") if v.strip()]
        if isinstance(value, int | float) and not isinstance(value, bool):
            return [value]
        expected = "a list, e.g. [1, 2]"
    else:
        return value
    raise ConfigError(f"{key}: expected {expected}, got {value!r}")


def kind(name: str) -> Registry:
    """The registry of kind ``name``, with the entries of every module imported so far."""
    if name not in _REGISTRIES:
        raise ConfigError(unknown_choice("kind of component", name, _REGISTRIES))
    return _REGISTRIES[name]


def kinds() -> list[str]:
    """The kinds declared by the modules imported so far."""
    return list(_REGISTRIES)


__all__ = ["Entry", "Registry", "coerce", "config_key", "kind", "kinds"]
