"""Finding a function's entry point in its file: statekeep's and Pulsar's three kinds.

``className`` (Pulsar's ``--classname``) names it as Pulsar's Python runtime imports it:

- a name without a dot (``process``, the default, or the module itself, ``--classname wordcount``
  as Pulsar takes it), or ``module.process``: a top-level ``def process(input, context)``, or
  Pulsar's native one-argument ``def process(input)``; a file defining
  ``process_batch(records, context)`` runs that instead (vectorized, see
  :mod:`statekeep.functions.executor.runtime`).
- ``module.Class``: a top-level class with a ``process(self, input, context)`` method, as Pulsar's
  ``class WordCount(pulsar.Function)``; one instance is created (without arguments) per process.
  The module part is the function file's and is not checked.

A file that fails while it is imported (a missing module, an error at its top level) is a
:class:`FunctionLoadError` naming the file and, for an import, the module; :func:`missing_imports`
finds the top-level imports that cannot be found before the file is ever run (at ``create``).

``from pulsar import Function`` works in a function file whether or not pulsar-client is
installed (:func:`statekeep.pulsar_compat.install`).
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import sys
import threading
import types
from collections.abc import Callable
from typing import Any

from statekeep.lru import BoundedLRU, memo
from statekeep.errors import InvalidArgumentError

RECORD, NATIVE, BATCH = "record", "native", "batch"  # process(input, context), process(input), process_batch


class FunctionLoadError(InvalidArgumentError):
    """A function file that cannot run: a syntax error, an import or top-level statement that fails,
    or no entry point of the named kind. The user's to fix: a 400 over REST."""


def entry_name(class_name: str | None) -> str:
    """The entry point's name in the file: the last dotted part of ``className``; ``process`` for a
    name without a dot (the default, or a module name, as Pulsar's runtime imports it)."""
    module, _, entry = (class_name or "process").rpartition(".")
    return entry if module and entry else "process"


_modules: dict[tuple[str, str], dict[str, Any]] = memo()
_modules_lock = threading.Lock()
#: (source, filename, className) -> (entry point, kind): the one cache of loaded functions (runtime and trigger)
_entries: BoundedLRU[tuple[str, str, str | None], tuple[Callable[..., Any], str]] = BoundedLRU(64)
_entries_lock = threading.Lock()


def execute_file(source: str, filename: str = "<function>") -> dict[str, Any]:
    """Run a function file as a module and return its namespace; run once per process and (source,
    filename), as Python imports a module once, so the entry point and the serde or record classes
    the config names from the same file share their classes. Raises :class:`FunctionLoadError` for a
    syntax error, an import that fails (naming the module and the file) or any other error raised at
    its top level (a failed run is not kept)."""
    with _modules_lock:
        if (source, filename) not in _modules:
            _modules[(source, filename)] = _execute(source, filename)
            while len(_modules) > 64:
                sys.modules.pop(_modules.pop(next(iter(_modules)))["__name__"], None)
        return _modules[(source, filename)]


def _execute(source: str, filename: str) -> dict[str, Any]:
    from statekeep.pulsar_compat import install

    install()
    # a module of its own in sys.modules while cached: what dataclasses and typing look up to resolve annotations
    # written as text (a file with "from __future__ import annotations"); not this module's own future import
    digest = hashlib.sha1(filename.encode() + b"\0" + source.encode(), usedforsecurity=False).hexdigest()[:16]
    module = types.ModuleType(f"statekeep_function_{digest}")
    module.__file__ = filename
    namespace: dict[str, Any] = module.__dict__
    sys.modules[module.__name__] = module
    try:
        _run(source, filename, namespace)
    except BaseException:
        sys.modules.pop(module.__name__, None)
        raise
    return namespace


def _run(source: str, filename: str, namespace: dict[str, Any]) -> None:
    try:
        exec(compile(source, filename, "exec", dont_inherit=True), namespace)  # noqa: S102 - user code is the point
    except SyntaxError as e:
        raise FunctionLoadError(f"{filename}:{e.lineno}: syntax error: {e.msg}") from e
    except ImportError as e:
        raise FunctionLoadError(f"{filename}{_line_of(e, filename)}: cannot import module {e.name or str(e)!r}: "
                                f"{e} (install it where the function runs)") from e
    except Exception as e:  # noqa: BLE001 - user code: its error is the answer
        raise FunctionLoadError(f"{filename}{_line_of(e, filename)}: importing it raised "
                                f"{type(e).__name__}: {e}") from e


def _line_of(error: BaseException, filename: str) -> str:
    """``:LINE`` of the innermost frame of ``error`` in ``filename`` ('' if none)."""
    line = ""
    tb = error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            line = f":{tb.tb_lineno}"
        tb = tb.tb_next
    return line


def missing_imports(tree: ast.Module) -> list[tuple[str, int]]:
    """``(module, line)`` of each top-level import of ``tree`` (outside ``try``/``if``) whose
    top-level package cannot be found here, without importing anything. ``pulsar`` is always found
    (statekeep provides it when pulsar-client is absent); relative imports are not checked."""
    import importlib.util

    missing = []
    for node in tree.body:
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        for name in names:
            top = name.partition(".")[0]
            if top == "pulsar" or top in sys.modules:
                continue
            try:
                found = importlib.util.find_spec(top) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                missing.append((name, node.lineno))
    return missing


def load_function(source: str, filename: str = "<function>",
                  class_name: str | None = None) -> tuple[Callable[..., Any], str]:
    """Run the function file and return ``(callable, kind)``: kind :data:`RECORD` (called as
    ``f(input, context)``), :data:`NATIVE` (``f(input)``) or :data:`BATCH` (``f(records, context)``).
    Raises :class:`FunctionLoadError` (a clear message, not a stack trace) when the file has a
    syntax error, fails at import, or lacks the entry point."""
    namespace = execute_file(source, filename)
    name = entry_name(class_name)
    if name != "process":
        cls = namespace.get(name)
        if not isinstance(cls, type) or not callable(getattr(cls, "process", None)):
            raise FunctionLoadError(f"{filename} defines no class {name!r} with a method "
                                    "process(self, input, context) (className names it)")
        try:
            instance = cls()
        except Exception as e:  # noqa: BLE001 - user code
            raise FunctionLoadError(f"{filename}: creating {name}() failed: {type(e).__name__}: {e}") from e
        return instance.process, RECORD
    process_batch = namespace.get("process_batch")
    if callable(process_batch):
        return process_batch, BATCH
    process = namespace.get("process")
    if not callable(process):
        raise FunctionLoadError(f"{filename} defines no function 'process(input, context)' "
                                "nor 'process_batch(records, context)'")
    return process, (NATIVE if _one_argument(process) else RECORD)


def cached_function(source: str, filename: str = "<function>",
                    class_name: str | None = None) -> tuple[Callable[..., Any], str]:
    """:func:`load_function` once per process and (file, className): a ``pulsar.Function`` class is
    instantiated once and kept, as Pulsar keeps one instance per function instance (the 64 most recently
    used entry points are kept). Raises as :func:`load_function` does."""
    key = (source, filename, class_name)
    with _entries_lock:
        found = _entries.get(key)
        if found is None:
            found = _entries.put(key, load_function(source, filename, class_name))
        return found


def entry_point(function: Any, vectorized: bool | None = None) -> tuple[Callable[..., Any], str]:
    """``(callable, kind)`` of a function given as a Python object, as :func:`load_function` finds one in a file:
    a class with ``process(self, input, context)`` (a ``pulsar.Function``; instantiated here, without arguments)
    or an instance of one is :data:`RECORD`; a callable is :data:`BATCH` if ``vectorized`` (None: if it is named
    ``process_batch``), else :data:`NATIVE` with one argument, else :data:`RECORD`. Raises
    :class:`FunctionLoadError` for anything else, or a class that cannot be created."""
    if isinstance(function, type):
        if not callable(getattr(function, "process", None)):
            raise FunctionLoadError(f"class {function.__name__} has no method process(self, input, context)")
        try:
            function = function()
        except Exception as e:  # noqa: BLE001 - user code
            raise FunctionLoadError(f"creating {function.__name__}() failed: {type(e).__name__}: {e}") from e
    if not callable(function) and callable(getattr(function, "process", None)):
        return function.process, RECORD
    if not callable(function):
        raise FunctionLoadError(f"a function must be a callable, a class with process(self, input, context) or a "
                                f"file; not {type(function).__name__}")
    if vectorized is None:
        vectorized = getattr(function, "__name__", "") == "process_batch"
    if vectorized:
        return function, BATCH
    return function, (NATIVE if _one_argument(function) else RECORD)


def _one_argument(function: Callable[..., Any]) -> bool:
    """Whether ``function`` takes exactly one positional argument (Pulsar's native function)."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) == 1 and not any(p.kind is p.VAR_POSITIONAL for p in parameters)


def validate_function_source(code: bytes, filename: str = "function.py", class_name: str | None = None) -> str:
    """Check a function file WITHOUT running it: UTF-8, compiles, its top-level imports can be found
    (:func:`missing_imports`), and defines the entry point ``className`` names (see the module
    docstring) with the right arguments. Returns the source. Raises :class:`InvalidArgumentError`
    (:class:`FunctionLoadError` for an import) naming ``file:line`` and what is wrong."""
    if not isinstance(code, (bytes, bytearray)):
        raise InvalidArgumentError("the function file must be bytes")
    try:
        source = bytes(code).decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArgumentError(f"{filename} is not UTF-8 text (byte {e.start})") from e
    try:
        tree = ast.parse(source, filename)
        compile(tree, filename, "exec", dont_inherit=True)
    except SyntaxError as e:
        where = filename + (f":{e.lineno}" if e.lineno else "") + (f":{e.offset}" if e.lineno and e.offset else "")
        raise InvalidArgumentError(f"{where}: syntax error: {e.msg}") from None
    except (ValueError, RecursionError, MemoryError) as e:  # NUL bytes; absurdly deep nesting
        raise InvalidArgumentError(f"{filename} cannot be compiled: {type(e).__name__}: {e}") from None
    for module, line in missing_imports(tree)[:1]:
        raise FunctionLoadError(f"{filename}:{line}: cannot import module {module!r}: no module named "
                                f"{module.partition('.')[0]!r} is installed (install it where the function runs)")
    name = entry_name(class_name)
    if name != "process":
        classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
        if name not in classes:
            raise InvalidArgumentError(f"{filename} must define a top-level class {name!r} (className "
                                       f"{class_name!r}) with a method process(self, input, context)")
        methods = {n.name: n for n in classes[name].body if isinstance(n, ast.FunctionDef)}
        inherits = bool(classes[name].bases)  # process may come from a base class: checked at load
        if "process" in methods:
            _check_arguments(methods["process"], filename, 3, "process(self, input, context)")
        elif not inherits:
            raise InvalidArgumentError(f"{filename}:{classes[name].lineno}: class {name} has no method "
                                       "process(self, input, context)")
        return source
    defined = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "process_batch" in defined:
        _check_arguments(defined["process_batch"], filename, 2, "process_batch(records, context)")
        return source
    if "process" not in defined:
        raise InvalidArgumentError(f"{filename} must define a top-level function 'def process(input, context)' "
                                   "(or Pulsar's 'def process(input)', or 'def process_batch(records, context)', "
                                   "or name a class with className)")
    _check_arguments(defined["process"], filename, (1, 2), "process(input, context) or process(input)")
    return source


def _check_arguments(node: ast.FunctionDef | ast.AsyncFunctionDef, filename: str, count: int | tuple[int, ...],
                     shape: str) -> None:
    if isinstance(node, ast.AsyncFunctionDef):
        raise InvalidArgumentError(f"{filename}:{node.lineno}: {node.name} must be a plain def, not async def")
    counts = (count,) if isinstance(count, int) else count
    args = node.args
    positional = [*args.posonlyargs, *args.args]
    required = len(positional) - len(args.defaults)
    kw_required = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    accepts = any((len(positional) >= n or args.vararg is not None) and required <= n for n in counts)
    if not accepts or kw_required:
        raise InvalidArgumentError(f"{filename}:{node.lineno}: {node.name} must be {shape}")


#: the classes of Pulsar's ``serde`` module (``serde.X`` in a serde class name)
PULSAR_SERDES = ("SerDe", "IdentitySerDe", "PickleSerDe")


def check_named_classes(code: bytes, filename: str, names: dict[str, str]) -> None:
    """Check, WITHOUT running anything, that each class a config names (``names``: what names it ->
    ``module.Class``) can be found as :mod:`statekeep.functions.messaging.messages` will look for it: a class
    of Pulsar's ``serde`` module, a top-level class of the function's own file when the module is the
    file's, or an installed module. Raises :class:`InvalidArgumentError` naming the field and the class."""
    own = filename.rsplit("/", 1)[-1].removesuffix(".py")
    tree: ast.Module | None = None
    for field, class_name in names.items():
        module, _, name = class_name.rpartition(".")
        if module == "serde":
            if name not in PULSAR_SERDES:
                raise InvalidArgumentError(f"{field}: Pulsar's serde module has no class {name!r} "
                                           f"(it has {', '.join(PULSAR_SERDES)})")
        elif module == own:
            tree = tree or ast.parse(bytes(code).decode("utf-8"), filename)
            if not any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body):
                raise InvalidArgumentError(f"{field}: {filename} defines no top-level class {name!r}")
        elif not missing_imports(ast.parse(f"import {module}")) == []:
            raise InvalidArgumentError(f"{field}: cannot import module {module!r} for {class_name!r} "
                                       "(install it where the function runs)")
