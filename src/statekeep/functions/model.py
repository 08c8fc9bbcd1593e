"""A function's configuration (the JSON shape of Pulsar's ``FunctionConfig``) and the check of its code.

JSON fields (camelCase, as pulsar-admin sends them): ``tenant``, ``namespace``, ``name``, ``className``
(``process`` or ``module.process``), ``runtime`` (``PYTHON``), ``py`` (the file's name), ``inputs``,
``output``, ``parallelism``, ``userConfig``, ``keyField`` (the input field whose value partitions
records, so one key's records reach one task), ``inputFormat``, ``outputFormat`` and ``stateStorage``
(``{"provider": NAME, "config": {...}}``; absent: the server's default provider). Other fields
pulsar-admin sends (``autoAck``, ``cleanupSubscription``, ...) are accepted and ignored; a field
of a known name with a wrong type is refused.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from statekeep.errors import InvalidArgumentError
from statekeep.state.catalog import parse_state_storage
from statekeep.state.keys import validate_name

MAX_INPUTS = 100
MAX_TEXT = 1024


@dataclass(frozen=True)
class FunctionConfig:
    """A validated function configuration. Build it with :meth:`from_json`."""

    tenant: str
    namespace: str
    name: str
    inputs: list[str]
    className: str = "process"
    runtime: str = "PYTHON"
    py: str | None = None
    output: str | None = None
    parallelism: int = 1
    userConfig: dict[str, Any] = field(default_factory=dict)
    keyField: str | None = None
    inputFormat: str | None = None
    outputFormat: str | None = None
    stateStorage: dict[str, Any] | None = None

    @property
    def fqfn(self) -> str:
        return f"{self.tenant}/{self.namespace}/{self.name}"

    def to_json(self) -> dict[str, Any]:
        """The JSON object, without unset (None) fields."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: object) -> FunctionConfig:
        """Validate ``data`` (a JSON object); :class:`InvalidArgumentError` names the first bad field."""
        if not isinstance(data, Mapping):
            raise InvalidArgumentError(f"a function config must be a JSON object, not {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known and v is not None}
        for what in ("tenant", "namespace", "name"):
            validate_name(values.get(what), what if what != "name" else "function name")
        inputs = values.get("inputs")
        if isinstance(inputs, str):
            inputs = [s.strip() for s in inputs.split(",") if s.strip()]  # pulsar-admin's --inputs a,b
        if not isinstance(inputs, list) or not inputs or len(inputs) > MAX_INPUTS:
            raise InvalidArgumentError(f"inputs must be a list of 1 to {MAX_INPUTS} sources")
        values["inputs"] = [_text(i, "each input") for i in inputs]
        for what in ("className", "runtime", "py", "output", "keyField", "inputFormat", "outputFormat"):
            if what in values:
                values[what] = _text(values[what], what)
        entry = values.get("className", "process")
        if entry.rpartition(".")[2] != "process":
            raise InvalidArgumentError(f"className must be 'process' or 'module.process' (a top-level "
                                       f"def process(input, context)), not {entry!r}")
        if values.get("runtime", "PYTHON").upper() != "PYTHON":
            raise InvalidArgumentError(f"only PYTHON functions are supported, not {values['runtime']!r}")
        values["runtime"] = "PYTHON"
        parallelism = values.get("parallelism", 1)
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or not 1 <= parallelism <= 1024:
            raise InvalidArgumentError(f"parallelism must be an int from 1 to 1024, not {parallelism!r}")
        if not isinstance(values.get("userConfig", {}), Mapping):
            raise InvalidArgumentError("userConfig must be a JSON object")
        values["userConfig"] = dict(values.get("userConfig", {}))
        storage = parse_state_storage(values.get("stateStorage"))  # the catalog's reading, for followers too
        if storage is not None:
            values["stateStorage"] = {"provider": storage[0], "config": storage[1]}
        return cls(**values)


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_TEXT:
        raise InvalidArgumentError(f"{what} must be a non-empty string of at most {MAX_TEXT} characters")
    return value


def validate_source(code: bytes, filename: str = "function.py") -> str:
    """Check a function file WITHOUT running it: UTF-8, compiles, and defines a top-level
    ``def process(input, context)`` or ``def process_batch(records, context)`` (used when both are
    defined) taking two positional arguments. Returns the source text.
    Raises :class:`InvalidArgumentError` with ``file:line`` for a syntax error."""
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
    defined = {node.name: node for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    name, first = ("process_batch", "records") if "process_batch" in defined else ("process", "input")
    process = defined.get(name)
    if process is None:
        raise InvalidArgumentError(f"{filename} must define a top-level function 'def process(input, context)' "
                                   "(or 'def process_batch(records, context)')")
    if isinstance(process, ast.AsyncFunctionDef):
        raise InvalidArgumentError(f"{filename}:{process.lineno}: {name} must be a plain def, not async def")
    args = process.args
    positional = [*args.posonlyargs, *args.args]
    required = len(positional) - len(args.defaults)
    kw_required = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    if (len(positional) < 2 and args.vararg is None) or required > 2 or kw_required:
        raise InvalidArgumentError(f"{filename}:{process.lineno}: {name} must accept exactly two positional "
                                   f"arguments ({first}, context)")
    return source
