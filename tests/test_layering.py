"""docs/ARCHITECTURE.md's layering, checked on the source: each layer imports only layers below it (at module
level and inside functions alike), nothing below ``functions`` imports PySpark, nothing below
``server`` the web framework. ``errors``, ``jars`` and ``testing`` are outside the layers (every layer may
use ``errors`` and ``jars``, which import nothing else of statekeep; ``testing`` is for tests and benchmarks)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import statekeep

ROOT = Path(statekeep.__file__).parent
LAYERS = ["metadata", "coordination", "cache", "handles", "state", "changelog", "kafka", "functions", "pulsar", "spark",
          "migrate",
          "server", "cli"]
RANK = {name: i for i, name in enumerate(LAYERS)}
# package -> the lowest layer that may import it. pydantic is the one schema of the REST bodies since
# issue 15 (state/shape.py, functions/config/model.py: a core dependency), so the state layer may use it; the
# web framework stays in server.
THIRD_PARTY = {"pyspark": "functions", "fastapi": "server", "starlette": "server", "uvicorn": "server",
               "pydantic": "state", "confluent_kafka": "kafka"}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "statekeep" and parts[1] in RANK else None


def _imports(path: Path, module: str) -> list[tuple[int, str]]:
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            found += [(node.lineno, f"{base}.{alias.name}" if _layer(base) is None and base == "statekeep"
                       else base) for alias in node.names]
    return found


def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT.parent).with_suffix("")
        parts = list(relative.parts[:-1] if path.name == "__init__.py" else relative.parts)
        yield path, ".".join(parts)


MODULES = [(path, module) for path, module in _modules() if _layer(module) is not None]


@pytest.mark.parametrize("path,module", MODULES, ids=[m for _, m in MODULES])
def test_imports_only_layers_below(path, module):
    rank = RANK[_layer(module)]
    wrong = []
    for line, name in _imports(path, module):
        target = _layer(name)
        if target is not None and RANK[target] > rank:
            wrong.append(f"line {line}: {name} (layer {target})")
        lowest = THIRD_PARTY.get(name.split(".")[0])
        if lowest is not None and rank < RANK[lowest]:
            wrong.append(f"line {line}: {name} (only {lowest} and above may)")
    assert not wrong, f"{module} ({_layer(module)}) imports from above its layer: " + "; ".join(wrong)


#: the rooms of ``statekeep.functions``, lowest first (docs/ARCHITECTURE.md): each imports only rooms before it
FUNCTION_ROOMS = ["config", "messaging", "windowing", "executor", "driver", "admin"]


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["statekeep", "functions"] else None


@pytest.mark.parametrize("path,module", [(p, m) for p, m in MODULES if _room(m)],
                         ids=[m for p, m in MODULES if _room(m)])
def test_function_rooms_import_only_rooms_below(path, module):
    """A record's path reads down the rooms: what a function is, its messages, time, the executor, the
    Spark driver, the server's admin; a room never reaches up (``functions/*.py`` outside a room: none)."""
    assert _room(module) in FUNCTION_ROOMS, f"{module} is in no room of statekeep.functions"
    rank = FUNCTION_ROOMS.index(str(_room(module)))
    wrong = [f"line {line}: {name}" for line, name in _imports(path, module)
             if _room(name) in FUNCTION_ROOMS and FUNCTION_ROOMS.index(str(_room(name))) > rank]
    assert not wrong, f"{module} imports from a room above it: " + "; ".join(wrong)


def test_jars_imports_only_errors():
    """statekeep.jars is below every layer (the Kafka tests' servers and Spark's session use it): it imports
    nothing of statekeep but ``errors``, and no third-party package."""
    path = ROOT / "jars" / "__init__.py"
    names = {name for _, name in _imports(path, "statekeep.jars")}
    ours = {name for name in names if name.split(".")[0] == "statekeep"}
    assert ours == {"statekeep.errors"}
    assert {name.split(".")[0] for name in names} - {"statekeep", "__future__"} <= sys.stdlib_module_names


SCHEME_FREE = ["coordination", "cache", "handles", "state", "changelog"]


@pytest.mark.parametrize("path,module", [(p, m) for p, m in MODULES if _layer(m) in SCHEME_FREE],
                         ids=[m for p, m in MODULES if _layer(m) in SCHEME_FREE])
def test_layers_above_metadata_ask_capabilities_not_schemes(path, module):
    """A third-party backend opts in by declaring ``capabilities`` and limits; code above the metadata
    layer never compares a store's ``scheme``."""
    uses = [node.lineno for node in ast.walk(ast.parse(path.read_text(), str(path)))
            if isinstance(node, ast.Attribute) and node.attr == "scheme"]
    assert not uses, f"{module} reads a store's scheme at lines {uses}; ask store.capabilities instead"


def test_no_import_cycles():
    """No module imports, directly or through others, a module that imports it back (at module level or
    inside functions alike): shared code lives in a module both import. A package's ``__init__`` that
    imports its submodules is not counted against them (importing a submodule runs it anyway)."""
    modules = {module: path for path, module in _modules()}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        names = []
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([base] if base else []))
                # "from P import m" imports the module P.m when there is one, else names of P
                names += [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                          for alias in node.names]
        targets = set()
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                targets.add(name)
        graph[module] = targets
    cycles, index, low, stack, on_stack = [], {}, {}, [], set()

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"
