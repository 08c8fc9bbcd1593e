"""The typed state schemas a function file opens, found WITHOUT running it, and their check at ``functions update``.

A function's state schemas are recorded by its runs (:mod:`statekeep.state.schemas`); each open is checked against
them at run time (:meth:`statekeep.functions.executor.context.Context.value_state`). This module moves the check
of what can be seen in the code to the update, so an incompatible new version is refused before it is stored:

- :func:`static_variables` reads the file's syntax tree for calls ``<anything>.value_state("name", T, ...)``,
  ``.list_state("name", T, ...)`` and ``.map_state("name", K, V, ...)`` whose name is a literal and whose types
  resolve without running anything: ``int``, ``float``, ``str``, ``bytes``, ``bool``, ``X | None``,
  ``Optional[X]``, ``list[X]``, ``dict[K, V]`` and dataclasses or ``msgspec.Struct`` subclasses defined at the
  top level of the same file (their fields from their annotations, with or without a default). Each such class
  is rebuilt from its fields (:func:`dataclasses.make_dataclass`, :func:`msgspec.defstruct`) and its schema made
  by :func:`statekeep.state.typed.variable`, the run's own code, so the two cannot differ.
- :func:`check_code_update` compares each with the schema recorded for the function
  (:func:`statekeep.state.typed.check_evolution`).

Not seen here, so checked only when a run first opens the variable (the run fails then, its state untouched): a
name or type computed at run time or held in a variable, a class imported from another module, a class with a
base, decorator or annotation not listed above, an annotation written as a string. A variable
opened with two different schemas in one file is not checked here either (which one a run opens depends on the
run). Every matching call in the file counts, whether or not it runs.
"""

from __future__ import annotations

import ast
import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import msgspec

from statekeep.errors import InvalidArgumentError
from statekeep.metadata import Check, MetadataStore
from statekeep.state.schemas import schemas_path
from statekeep.state.typed import StateSchemaError, check_evolution, variable

_KINDS = {"value_state": "value", "list_state": "list", "map_state": "map"}
_BUILTINS: dict[str, Any] = {"int": int, "float": float, "str": str, "bytes": bytes, "bool": bool, "list": list,
                             "dict": dict}
_TYPING = {"typing.Optional", "typing.Union", "typing.List", "typing.Dict"}


class _Unresolved(Exception):
    """A type expression this module cannot resolve without running the file: the run-time check covers it."""


@dataclasses.dataclass(frozen=True)
class StaticVariable:
    """A state variable a file opens: its ``name``, its schema (as :meth:`statekeep.state.typed.Variable.schema`)
    and the ``line`` of its first open."""

    name: str
    schema: dict[str, Any]
    line: int


class _Module:
    """What a file's top level binds: classes, imports (local name -> dotted name), and names bound more than once
    or from within functions (``global``), which resolve to nothing here."""

    def __init__(self, tree: ast.Module) -> None:
        self.classes: dict[str, ast.ClassDef] = {}
        self.imports: dict[str, str] = {}
        bound: dict[str, int] = {}
        self.star = False
        for node in tree.body:
            for name in _bound_names(node):
                bound[name] = bound.get(name, 0) + 1
            if isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    self.imports[alias.asname or alias.name.partition(".")[0]] = \
                        alias.name if alias.asname else alias.name.partition(".")[0]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                for alias in node.names:
                    self.star |= alias.name == "*"
                    self.imports[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for each in ast.walk(tree):
            if isinstance(each, ast.Global):
                for name in each.names:
                    bound[name] = bound.get(name, 0) + 2
        self.ambiguous = {name for name, count in bound.items() if count > 1}
        self.bound = set(bound)
        self._built: dict[str, Any] = {}
        self._building: set[str] = set()

    def qualified(self, node: ast.expr, local: set[str]) -> str:
        """The dotted name ``node`` refers to (``builtins.int``, ``typing.Optional``, ``<module>.Bid``)."""
        if isinstance(node, ast.Attribute):
            return f"{self.qualified(node.value, local)}.{node.attr}"
        if not isinstance(node, ast.Name) or node.id in local or node.id in self.ambiguous or self.star:
            raise _Unresolved
        if node.id in self.imports:
            return self.imports[node.id]
        if node.id in self.classes:
            return f"<module>.{node.id}"
        if node.id not in self.bound:
            return f"builtins.{node.id}"
        raise _Unresolved

    def type_of(self, node: ast.expr, local: set[str]) -> Any:
        """The Python type ``node`` names, rebuilt from the source; :class:`_Unresolved` if it cannot be."""
        if isinstance(node, ast.Constant) and node.value is None:
            return type(None)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            left, right = self.type_of(node.left, local), self.type_of(node.right, local)
            return left | right
        if isinstance(node, ast.Subscript):
            origin = self.qualified(node.value, local)
            args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            types = tuple(self.type_of(a, local) for a in args)
            if origin == "typing.Optional" and len(types) == 1:
                return types[0] | None
            if origin == "typing.Union" and len(types) == 2:
                return types[0] | types[1]
            if origin in ("builtins.list", "typing.List") and len(types) == 1:
                return list[types[0]]  # type: ignore[valid-type]
            if origin in ("builtins.dict", "typing.Dict") and len(types) == 2:
                return dict[types[0], types[1]]  # type: ignore[valid-type]
            raise _Unresolved
        name = self.qualified(node, local)
        if name.startswith("builtins.") and name[9:] in _BUILTINS:
            return _BUILTINS[name[9:]]
        if name.startswith("<module>."):
            return self._class(name[9:])
        raise _Unresolved

    def _class(self, name: str) -> Any:
        if name not in self._built:
            if name in self._building:  # a class that refers to itself: left to the run
                raise _Unresolved
            self._building.add(name)
            try:
                self._built[name] = self._build(self.classes[name])
            finally:
                self._building.discard(name)
        return self._built[name]

    def _build(self, node: ast.ClassDef) -> Any:
        """A dataclass or Struct with ``node``'s name and fields (each default None: only its presence matters)."""
        bases = [self.qualified(b, set()) for b in node.bases]
        struct = "msgspec.Struct" in bases
        if struct:
            if len(node.decorator_list) or len(bases) != 1:
                raise _Unresolved
            kw_only = [k.value for k in node.keywords if k.arg == "kw_only"]  # the one option that orders fields
            if kw_only and not (isinstance(kw_only[0], ast.Constant) and isinstance(kw_only[0].value, bool)):
                raise _Unresolved
            keyword_only = bool(kw_only and kw_only[0].value)  # type: ignore[attr-defined]  # a Constant: checked
        else:
            if len(node.decorator_list) != 1 or node.keywords:
                raise _Unresolved
            decorator = node.decorator_list[0]
            if self.qualified(decorator.func if isinstance(decorator, ast.Call) else decorator,
                              set()) != "dataclasses.dataclass":
                raise _Unresolved
            parents = [self._class(b[9:]) for b in bases if b.startswith("<module>.")]
            if len(parents) != len(bases) or not all(dataclasses.is_dataclass(p) for p in parents):
                raise _Unresolved
        fields: list[Any] = []
        for statement in node.body:
            if not isinstance(statement, ast.AnnAssign):
                continue
            if not isinstance(statement.target, ast.Name):
                raise _Unresolved
            annotation = statement.annotation
            head = annotation.value if isinstance(annotation, ast.Subscript) else annotation
            try:
                if self.qualified(head, set()) in ("typing.ClassVar", "dataclasses.InitVar", "dataclasses.KW_ONLY"):
                    continue  # not a field
            except _Unresolved:
                pass
            tp = self.type_of(annotation, set())
            if not self._has_default(statement.value):
                fields.append((statement.target.id, tp))
            elif struct:
                fields.append((statement.target.id, tp, None))
            else:
                fields.append((statement.target.id, tp, dataclasses.field(default=None)))
        try:
            if struct:
                return msgspec.defstruct(node.name, fields, kw_only=keyword_only)
            return dataclasses.make_dataclass(node.name, fields, bases=tuple(parents), kw_only=True)
        except (TypeError, ValueError):  # the class itself does not build: its file fails when it is run
            raise _Unresolved from None

    def _has_default(self, value: ast.expr | None) -> bool:
        if value is None:
            return False
        if isinstance(value, ast.Call):
            try:
                function = self.qualified(value.func, set())
            except _Unresolved:
                return True
            if function in ("dataclasses.field", "msgspec.field"):
                return any(k.arg in ("default", "default_factory") for k in value.keywords)
        return True


def _bound_names(node: ast.AST) -> Iterator[str]:
    """The names a top-level statement binds (anywhere within it, outside nested functions and classes)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        yield node.name
        return
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            yield alias.asname or alias.name.partition(".")[0]
        return
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        yield node.id
    if isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
        yield node.name
    for child in ast.iter_child_nodes(node):
        yield from _bound_names(child)


def _local_names(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """Every name a function binds itself (its arguments, assignments, imports, nested defs): such a name in a
    type expression is not the module's."""
    arguments = function.args
    names = {a.arg for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]}
    names |= {a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None}
    body = function.body if isinstance(function.body, list) else [function.body]
    for statement in body:
        names |= set(_bound_names(statement))
    return names


def _opens(tree: ast.Module) -> Iterator[tuple[ast.Call, set[str]]]:
    """Each ``X.value_state(...)``, ``X.list_state(...)`` or ``X.map_state(...)`` call, with the names bound by
    the functions around it."""
    def visit(node: ast.AST, local: set[str]) -> Iterator[tuple[ast.Call, set[str]]]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            local = local | _local_names(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _KINDS:
            yield node, local
        for child in ast.iter_child_nodes(node):
            yield from visit(child, local)
    yield from visit(tree, set())


def _schema(module: _Module, call: ast.Call, local: set[str]) -> tuple[str, dict[str, Any]]:
    """``(name, schema)`` of one open; :class:`_Unresolved` unless its name and types are known here."""
    kind = _KINDS[call.func.attr]  # type: ignore[attr-defined]  # _opens gives attribute calls only
    parameters = ["name", "key_type", "value_type"] if kind == "map" else ["name", "type"]
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords) \
            or len(call.args) > len(parameters):
        raise _Unresolved
    given = dict(zip(parameters, call.args)) | {k.arg: k.value for k in call.keywords if k.arg in parameters}
    name = given.get("name")
    if not isinstance(name, ast.Constant) or not isinstance(name.value, str) or len(given) != len(parameters):
        raise _Unresolved
    types = {p: module.type_of(given[p], local) for p in parameters[1:]}
    try:
        return name.value, variable(name.value, kind, types.get("type", types.get("value_type")),
                                    types.get("key_type")).schema()
    except InvalidArgumentError:  # a bad name or type: the run refuses it, saying so
        raise _Unresolved from None


def static_variables(source: str, filename: str = "<function>") -> dict[str, StaticVariable]:
    """The state variables ``source`` opens whose name and schema are known without running it (see the module
    docstring), by name. A variable opened with two different schemas is left out. Raises nothing for any
    source that parses; :class:`SyntaxError` otherwise."""
    tree = ast.parse(source, filename)
    module = _Module(tree)
    found: dict[str, StaticVariable] = {}
    mixed: set[str] = set()
    for call, local in _opens(tree):
        try:
            name, schema = _schema(module, call, local)
        except (_Unresolved, RecursionError):
            continue
        if name in found and found[name].schema != schema:
            mixed.add(name)
        found.setdefault(name, StaticVariable(name, schema, call.lineno))
    return {name: v for name, v in found.items() if name not in mixed}


def check_code_update(store: MetadataStore, tenant: str, namespace: str, name: str, code: bytes,
                      filename: str) -> Check:
    """Check the new ``code`` of an existing function against its recorded state schemas: nothing is written.
    Returns a :class:`~statekeep.metadata.Check` of the schemas as read, for the update's ``multi``: a run
    recording schemas meanwhile fails the update's write with a ``BadVersionError`` (the caller reads and checks
    again). Raises :class:`StateSchemaError` naming the function, the file's line, the variable and the field
    (``variable``, ``field``) for the first variable whose recorded schema cannot evolve into the one the code
    opens. ``code`` must be valid (``validate_function_source``)."""
    path = schemas_path(store, tenant, namespace, name)
    result = store.get(path)  # read once: the Check is of what was checked
    recorded: dict[str, Any] = {} if result is None else json.loads(result.value)
    if recorded:
        for var in static_variables(bytes(code).decode("utf-8"), filename).values():
            if var.name in recorded:
                try:
                    check_evolution(var.name, recorded[var.name], var.schema)
                except StateSchemaError as e:
                    raise StateSchemaError(f"cannot update {tenant}/{namespace}/{name}: {filename}:{var.line}: {e}",
                                           e.variable, e.field) from None
    return Check(path, -1 if result is None else result.stat.version)
