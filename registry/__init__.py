"""Name-keyed registries that find their bundled entries themselves.

Task kinds (``judge.kinds``), agent CLIs (``agents.clis``), vendor APIs (``agents.apis``),
agent backends (``isolation``) and the judge's sandbox backends (``judge.sandbox``) are each a
:class:`Registry`: a module registers an entry by calling the registry's marker
(``@task_kind("name")``, ``register_cli(...)``, ``@vendor_api("name")``,
``@agent_backend("name")``, ``@sandbox_backend("name")``), and the registry finds the modules
that do so by reading the package's source, without importing it. A bundled entry's module is
imported the first time its name is asked for, so its heavy imports cost nothing until then;
adding an entry is adding its module (a flat module or a subpackage alike), with no list to
edit.
Installed distributions may add entries too, through an entry point group
(``[project.entry-points."swarmlab.task_kinds"] mykind = "mypackage.mykind"``): loading the entry
point must register the name.

This package imports nothing of swarmlab: every layer may use it.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

__all__ = ["Registry", "registrations"]

T = TypeVar("T")


def _package_files(package: str) -> Iterator[tuple[str, Path]]:
    """Every module of ``package`` and of its regular subpackages, as (dotted name, file), in
    path order; ``package`` itself is imported (it holds the registry, so it already is)."""
    for folder in importlib.import_module(package).__path__:
        root = Path(folder)
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            # Only what is importable as a module of the package (every folder a package).
            if not all((root.joinpath(*parts[:i]) / "__init__.py").is_file()
                       for i in range(1, len(parts))):  # fmt: skip
                continue
            dotted = parts[:-1] if parts[-1] == "__init__" else parts
            yield ".".join((package, *dotted)), path


def registrations(source: str, marker: str) -> list[str | None]:
    """The names ``source`` registers through calls of ``marker`` (a plain name or an
    attribute's), one per call: its first argument when that is a string literal, else None
    (the registered object names itself; the caller falls back on the module's name).

    Calls only: a docstring or comment that shows ``@marker("name")`` registers nothing.
    """
    out: list[str | None] = []
    try:
        tree = ast.parse(source)
    except SyntaxError:  # a template or data file under the package: registers nothing
        return out
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if called != marker:
            continue
        first = node.args[0] if node.args else None
        literal = isinstance(first, ast.Constant) and isinstance(first.value, str)
        out.append(first.value if literal else None)  # type: ignore[union-attr]
    return out


@dataclass
class Registry(Generic[T]):
    """Entries of one sort by name: those registered so far, and the bundled ones found in
    ``package`` (or through the entry point ``group``), imported when first asked for.

    Attributes:
        what: what an entry is, for messages ("agent CLI").
        package: the dotted package whose modules (and subpackages') hold the bundled entries.
        marker: the name of the call that registers an entry (a decorator or a function).
        group: the entry point group of entries from installed distributions, if any.
        bundled_first: :meth:`names` lists the found and installed entries first, then those
            only registered at run time (each sorted); otherwise all sorted together.
    """

    what: str
    package: str
    marker: str
    group: str | None = None
    bundled_first: bool = False
    entries: dict[str, T] = field(default_factory=dict)
    _found: dict[str, str] | None = field(default=None, repr=False)
    _entry_points: dict[str, importlib.metadata.EntryPoint] | None = field(default=None, repr=False)

    def register(self, name: str, value: T, *, unique: bool = False) -> T:
        """Register ``value`` as ``name``; returns it.

        Raises:
            ValueError: ``unique`` and another value already has that name.
        """
        old = self.entries.get(name)
        if unique and old is not None and old != value:
            raise ValueError(f"{self.what} {name!r} is already registered")
        self.entries[name] = value
        return value

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a test's entry); nothing if it is not registered."""
        self.entries.pop(name, None)

    def found(self) -> dict[str, str]:
        """The bundled entries: name -> the module that registers it, read from the package's
        source once (nothing is imported). A call without a literal name registers its
        module's own name (``agents/clis/codex.py`` registers ``codex``)."""
        if self._found is None:
            found: dict[str, str] = {}
            for module, path in _package_files(self.package):
                source = path.read_text()
                if self.marker not in source:  # most modules: no parse needed
                    continue
                for name in registrations(source, self.marker):
                    found.setdefault(name or module.rpartition(".")[2], module)
            self._found = found
        return self._found

    def _installed(self) -> dict[str, importlib.metadata.EntryPoint]:
        """The entry points of :attr:`group` by name (read once), none without a group."""
        if self._entry_points is None:
            points = importlib.metadata.entry_points(group=self.group) if self.group else ()
            self._entry_points = {point.name: point for point in points}
        return self._entry_points

    def names(self) -> list[str]:
        """Every name that can be asked for: found, installed or registered."""
        known = sorted({*self.found(), *self._installed()})
        if self.bundled_first:
            return [*known, *sorted(set(self.entries) - set(known))]
        return sorted({*known, *self.entries})

    def find(self, name: str) -> T | None:
        """The entry registered as ``name``, its module imported first if it is a bundled or
        installed one not yet loaded; None if there is no such entry."""
        if name not in self.entries:
            if name in self.found():
                importlib.import_module(self.found()[name])
            elif name in self._installed():
                self._installed()[name].load()
        return self.entries.get(name)

    def get(self, name: str) -> T:
        """The entry registered as ``name`` (:meth:`find`).

        Raises:
            ValueError: no such entry (the message lists the known ones).
        """
        value = self.find(name)
        if value is None:
            raise ValueError(f"no {self.what} named {name!r}; known: {', '.join(self.names())}")
        return value
