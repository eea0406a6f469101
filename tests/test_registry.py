"""The registry helper: bundled entries found in a package's source without importing it, a
flat module and a subpackage alike, imported on first use; entry points of installed
distributions; and the four registries of the project built on it."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from registry import Registry, registrations

REGISTER = '''
"""Shows ``@plugin("in_a_docstring")`` without registering it."""
import sys
from {pkg}.reg import REG, plugin
sys.modules[__name__].LOADED = True

@plugin({name!r})
class Thing:
    pass
'''


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package ``plugpkg`` on ``sys.path``: its registry, a flat module registering ``flat``,
    a subpackage whose inner module registers ``nested``, a module registering by its own name
    (no literal) and a module that registers nothing."""
    root = tmp_path / "plugpkg"
    files = {
        "__init__.py": "",
        "reg.py": """
            from registry import Registry
            REG = Registry("plug", "plugpkg", "plugin", "plugpkg.plugins")
            def plugin(name):
                if not isinstance(name, str):  # plugin(cls): the class names itself
                    return REG.register(name.__name__.lower(), name)
                def register(cls):
                    return REG.register(name, cls)
                return register
        """,
        "flat.py": REGISTER.format(pkg="plugpkg", name="flat"),
        "deep/__init__.py": "",
        "deep/inner.py": REGISTER.format(pkg="plugpkg", name="nested"),
        "selfnamed.py": """
            from plugpkg.reg import plugin
            class Selfnamed: pass
            plugin(Selfnamed)
        """,
        "plain.py": "raise RuntimeError('never imported')\n",
        "loose/inner.py": REGISTER.format(pkg="plugpkg", name="not_a_package"),
    }
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield root
    for name in [m for m in sys.modules if m == "plugpkg" or m.startswith("plugpkg.")]:
        del sys.modules[name]


def test_bundled_entries_are_found_without_importing_and_loaded_on_first_use(package):
    from plugpkg.reg import REG

    assert REG.found() == {
        "nested": "plugpkg.deep.inner",
        "flat": "plugpkg.flat",
        "selfnamed": "plugpkg.selfnamed",
    }
    assert REG.names() == ["flat", "nested", "selfnamed"]
    assert "plugpkg.flat" not in sys.modules and "plugpkg.deep.inner" not in sys.modules
    assert REG.get("nested").__name__ == "Thing" and sys.modules["plugpkg.deep.inner"].LOADED
    assert "plugpkg.flat" not in sys.modules  # one name asked, one module imported
    assert REG.get("selfnamed").__name__ == "Selfnamed"
    with pytest.raises(ValueError, match=r"no plug named 'plain'; known: flat, nested, selfnamed"):
        REG.get("plain")
    assert REG.find("in_a_docstring") is None


def test_a_duplicate_is_refused_only_when_asked_and_names_order(package):
    reg: Registry[int] = Registry("plug", "plugpkg", "plugin", bundled_first=True)
    reg.register("aaa", 1)
    assert reg.names() == ["flat", "nested", "selfnamed", "aaa"]
    reg.register("aaa", 1, unique=True)  # the same value again: fine
    with pytest.raises(ValueError, match="plug 'aaa' is already registered"):
        reg.register("aaa", 2, unique=True)
    reg.register("aaa", 2)
    assert reg.get("aaa") == 2
    reg.unregister("aaa")
    assert reg.find("aaa") is None and "aaa" not in reg.names()


def test_an_installed_distribution_adds_entries_through_its_entry_point(package, tmp_path):
    """A distribution on ``sys.path`` (its ``dist-info``) whose entry point names a module
    outside the package: the name is known before the module is imported."""
    (tmp_path / "extplug.py").write_text(REGISTER.format(pkg="plugpkg", name="external"))
    info = tmp_path / "extplug-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: extplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[plugpkg.plugins]\nexternal = extplug\n")
    from plugpkg.reg import REG

    assert "external" in REG.names() and "extplug" not in sys.modules
    assert REG.get("external").__name__ == "Thing"
    sys.modules.pop("extplug", None)


def test_registrations_reads_calls_only():
    source = '"""@mark("doc")"""\n@mark("a")\nclass A: ...\nx.mark(B())\nother("c")\n# mark("d")\n'
    assert registrations(source, "mark") == ["a", None]
    assert registrations('mark("a") {{ placeholder }}', "mark") == []


def test_the_projects_registries_find_their_bundled_modules():
    from agents.apis.registry import APIS
    from agents.clis.registry import CLIS
    from isolation.backends import BACKENDS
    from judge.kinds.registry import KINDS

    assert KINDS.found()["decode"].startswith("judge.kinds.decode")
    assert KINDS.found()["server"].startswith("judge.kinds.server")
    assert CLIS.found() == {
        n: f"agents.clis.{n}" for n in ("claude_code", "codex", "gemini", "mini_swe")
    }
    assert APIS.found() == {n: f"agents.apis.{n}" for n in ("anthropic", "gemini", "openai")}
    assert BACKENDS.found() == {"docker": "isolation.backends", "local": "isolation.backends"}
    assert Path(sys.modules["registry"].__file__).parent.name == "registry"
