"""The package's shape: no import cycles, and modules small enough to read.

The layer order itself is enforced by import-linter (``lint-imports`` in
``make test``, contracts in pyproject.toml); these tests guard what it does
not express.
"""

from __future__ import annotations

import grimp

from tests.support.servers import ROOT

PACKAGE = ROOT / "django_rivet"
MAX_LINES = 500


def _cycles(graph: grimp.ImportGraph) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(component)

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_between_modules():
    # Every import counts: function-level ones, and those only for type
    # checking too (a circle held apart by TYPE_CHECKING is still a circle
    # to whoever reads the code). cache_dir=None: a stale cache would hide
    # an import added since.
    graph = grimp.build_graph(
        "django_rivet", exclude_type_checking_imports=False, cache_dir=None
    )
    assert _cycles(graph) == []


def test_no_package_module_is_over_500_lines():
    # Over 500 lines, a module is hiding a seam (CONTRIBUTING.md); migrations
    # are generated and exempt.
    too_long = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "migrations" in path.parts:
            continue
        lines = path.read_text().count("\n")
        if lines > MAX_LINES:
            too_long[str(path.relative_to(PACKAGE))] = lines
    assert too_long == {}
