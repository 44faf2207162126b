"""The layout's import rules (README, "Layout"): data flows one way and imports follow it.
Read from the source with ``ast`` (every ``import`` and ``from … import``, also inside
functions), so a lazy import cannot hide an edge."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import ROOT

PACKAGES = ("lang", "compiler", "targets", "emulator", "runtime", "nfc")
# package -> project packages it must not import
FORBIDDEN = {
    "lang": {"compiler", "targets", "emulator", "runtime", "nfc"},
    "compiler": {"targets", "emulator", "runtime", "nfc"},
    "targets": {"lang", "emulator", "runtime", "nfc"},
    "emulator": {"lang", "nfc"},
    "runtime": {"lang", "targets", "emulator", "nfc"},
}


def _imports(path: Path) -> set[str]:
    """Fully qualified project modules ``path`` imports."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in out if m.split(".")[0] in PACKAGES}


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_after_it(package):
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in _modules(package) for m in sorted(_imports(p))
           if m.split(".")[0] in FORBIDDEN[package]]
    assert not bad, "\n".join(bad)


def test_runtime_reads_the_plan_not_the_compiler():
    """The runtime knows a build by its manifest (compiler/manifest.py), nothing else of the
    compiler but the content cache (compiler/content_cache.py, a leaf) it keeps server programs in."""
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in _modules("runtime") for m in sorted(_imports(p))
           if m.startswith("compiler") and not m.startswith(("compiler.manifest", "compiler.content_cache"))]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("leaf", ["compiler/manifest.py", "compiler/content_cache.py", "targets/generator.py"])
def test_leaf_modules(leaf):
    """The plan's typed form is a leaf (the standard library only); the generator interface
    names only the placed program and the plan."""
    allowed = {"compiler/manifest.py": set(), "compiler/content_cache.py": set(),
               "targets/generator.py": {"compiler.manifest", "compiler.placed"}}[leaf]
    bad = {m for m in _imports(ROOT / leaf)
           if not any(m == a or m.startswith(a + ".") or a.startswith(m + ".") for a in allowed)}
    assert not bad


def test_the_rules_see_an_import():
    """The checker itself: a lazy import inside a function is found."""
    src = ROOT / "compiler" / "passes" / "validity.py"  # imports walk_expr only inside functions
    assert "compiler.analysis.walk_expr" in _imports(src)


def _test_imports(path: Path) -> set[str]:
    """The test modules (``tests.test_*``) that ``path`` imports, whichever way it spells it."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("tests.test_")}
        elif isinstance(node, ast.ImportFrom) and node.module == "tests":
            out |= {f"tests.{a.name}" for a in node.names if a.name.startswith("test_")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tests.test_"):
            out.add(node.module)
    return out


def test_no_test_module_imports_another():
    """What two tests share lives in tests/support (STYLE.md, "Tests"), not in a test module."""
    modules = sorted((ROOT / "tests").rglob("*.py")) + sorted((ROOT / "bench").rglob("*.py"))
    bad = [f"{p.relative_to(ROOT)} imports {m}" for p in modules for m in sorted(_test_imports(p))]
    assert not bad, "\n".join(bad)


def test_the_test_rule_sees_each_spelling(tmp_path):
    src = tmp_path / "t.py"
    src.write_text("import tests.test_a\nfrom tests import test_b as b\nfrom tests.test_c import x\n"
                   "def f():\n    from tests.support import y\n")
    assert _test_imports(src) == {"tests.test_a", "tests.test_b", "tests.test_c"}
