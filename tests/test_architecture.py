"""The package's boundaries, read from its imports (every import, module-level or lazy).

- ``report`` reads run directories: it imports nothing from theory, synthetic, empirical, pipeline;
- ``measure`` is the shared core: it imports no other pillar;
- ``theory`` derives predictions: it imports neither synthetic nor empirical;
- there is no import cycle anywhere in the package.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

import tangentlab

ROOT = Path(tangentlab.__file__).parent
PILLARS = ("measure", "theory", "synthetic", "empirical", "report", "pipeline", "validate")


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The tangentlab modules ``name`` imports anywhere in its source (``from pkg import mod``
    counts as importing ``pkg.mod`` when that is a module)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):  # imports only for type checkers never run
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            node.body = []
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("tangentlab"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if not mod.startswith("tangentlab"):
                continue
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                out.add(sub if sub in known else mod)
    return {m for m in out if m != name}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(name, path, set(mods)) for name, path in mods.items()}


def _pillar(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in PILLARS else None


def _crossings(graph, source: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f"{m} -> {t}" for m, targets in graph.items() if _pillar(m) == source
                  for t in targets if _pillar(t) in forbidden)


def test_report_reads_run_directories_only(graph):
    assert _crossings(graph, "report", ("theory", "synthetic", "empirical", "pipeline", "validate")) == []


def test_measure_imports_no_other_pillar(graph):
    assert _crossings(graph, "measure", tuple(p for p in PILLARS if p != "measure")) == []


def test_theory_imports_neither_synthetic_nor_empirical(graph):
    assert _crossings(graph, "theory", ("synthetic", "empirical")) == []


def test_no_import_cycle_anywhere(graph):
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        pytest.fail(f"import cycle: {' -> '.join(exc.args[1])}")


def test_the_checker_sees_lazy_imports_and_cycles(tmp_path):
    """The checks above can fail: a lazy import inside a function is seen, and a cycle is found."""
    src = tmp_path / "mod.py"
    src.write_text("def f():\n    from tangentlab.empirical import train\n")
    assert _imports("tangentlab.report.mod", src, {"tangentlab.empirical.train"}) == {"tangentlab.empirical.train"}
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter({"a": {"b"}, "b": {"a"}}).prepare()
