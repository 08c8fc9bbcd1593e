"""The source a function given as a Python object is registered with (the DataFrame operator's,
:func:`statekeep.spark.apply_function`), so that ``update``'s checks see its code as they see a file's: its state
schemas against those its runs recorded (:mod:`statekeep.functions.config.schemacheck`), and the words that say it
keeps time (:func:`statekeep.functions.config.spec.time_section`).

Python keeps an object's source where it was read from a file (``inspect.getsource``): a function's, a class's (a
``pulsar.Function``; an instance's class), and the module around it. The registered file is that module with, at
their own lines (so an error names the line of the real file), its imports, its classes (fields only, methods
blanked: a dataclass or ``msgspec.Struct`` a variable holds is resolved from them) and the object's own source;
every other statement is a blank line, so another function of the module opening a variable of the same name is
not taken for this one's. A ``process`` that refuses to run is appended where the object is not itself one: the
object travels with the query's tasks, the file never runs.

Where Python has no source (a lambda, a function typed into a REPL or made at run time, a ``functools.partial``, a
built-in), :func:`object_source` gives None and the registry keeps a stub: each variable's schema is then checked
at the run's first open of it (the run fails, its state untouched), and the function is taken to keep time.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.functions.config.loader import validate_function_source


def stub(fqfn: str) -> str:
    """The ``process`` of a function registered from a Python object: it runs only in its DataFrame's query."""
    return (f"def process(input, context):\n    raise RuntimeError({fqfn!r} ' runs in a DataFrame query "
            "(statekeep.spark.apply_function): it has no inputs of its own')\n")


def _defined(obj: Any) -> Any:
    """What holds ``obj``'s source: a class, a function, an instance's class; None for what has none."""
    if isinstance(obj, type) or inspect.isfunction(obj) or inspect.ismethod(obj):
        return obj if getattr(obj, "__name__", "") != "<lambda>" else None
    if not inspect.isbuiltin(obj) and type(obj).__module__ not in ("builtins", "functools"):
        return type(obj)  # an instance of a pulsar.Function, or a callable object
    return None


def object_source(obj: Any, fqfn: str) -> tuple[str, str] | None:
    """``(source, file name)`` to register a function object with (see the module docstring), valid as a function
    file (:func:`validate_function_source`); None where Python has none."""
    held = _defined(obj)
    if held is None:
        return None
    try:
        lines, start = inspect.getsourcelines(held)
    except (OSError, TypeError):
        return None
    own = textwrap.dedent("".join(lines)).splitlines()
    module = inspect.getmodule(held)
    try:
        whole = inspect.getsource(module).splitlines() if module is not None else []
        filename = (inspect.getsourcefile(module) or "").rpartition("/")[2] if module is not None else ""
    except (OSError, TypeError):
        whole, filename = [], ""
    kept = _kept(whole) if whole else []
    if not whole or start < 1:  # no module source (a REPL's cell): the object's own lines alone
        kept, start = [""] * len(own), 1
    kept = kept + [""] * max(0, start - 1 + len(own) - len(kept))
    kept[start - 1:start - 1 + len(own)] = own
    name = getattr(held, "__name__", "")
    source = "\n".join(kept) + "\n"
    if name not in ("process", "process_batch"):
        source += "\n\n" + stub(fqfn)
    filename = filename or f"{name or 'function'}.py"
    try:
        validate_function_source(source.encode(), filename)
    except InvalidArgumentError:
        return None  # a shape the file checks do not take (a method's own process, ...): the stub
    return source, filename


def _kept(lines: list[str]) -> list[str]:
    """``lines`` (a module) with what the checks may read kept at its lines and every other line blank: imports,
    and classes with their methods blanked (a body left empty gets ``pass``)."""
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return []
    out = [""] * len(lines)

    def keep(first: int, last: int) -> None:
        out[first - 1:last] = lines[first - 1:last]

    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            keep(node.lineno, node.end_lineno or node.lineno)
        elif isinstance(node, ast.ClassDef):
            keep(_first_line(node), min(_first_line(n) for n in node.body) - 1)  # decorators and its header
            fields = [n for n in node.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
            for field in fields:
                keep(field.lineno, field.end_lineno or field.lineno)
            if not fields:
                out[_first_line(node.body[0]) - 1] = " " * node.body[0].col_offset + "pass"
    return out


def _first_line(node: ast.stmt) -> int:
    """The first line of a statement, its decorators included."""
    decorators: list[ast.expr] = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])
