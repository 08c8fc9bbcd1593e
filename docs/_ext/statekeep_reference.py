"""Reference pages generated from the code when the docs are built (a Sphinx extension).

At ``builder-inited`` it writes Markdown into ``docs/_generated/`` (not kept in git), which the reference
pages include:

- ``rest.md`` and ``openapi.json``: the REST API from the OpenAPI document of the FastAPI app
  (:func:`statekeep.server.app.create_app`, on a ``memory://`` store, with a token so the spec shows auth);
- ``backends.md``: each metadata store URL scheme, its class, extra and options (the keyword arguments of its
  class, with their defaults), from :data:`statekeep.metadata.registry.BUILTIN_BACKENDS`;
- ``function-config.md``: every FunctionConfig field from the pydantic model's JSON schema, and the fields
  refused or fixed (:data:`REFUSED`, :data:`FIXED` of :mod:`statekeep.functions.config.model`).

The CLI reference is rendered by sphinx-argparse from :func:`cli_parser`: the command's own parser, its texts
escaped for reST (sphinx-argparse reads help texts as reST, where ``local[*,4]`` would start an emphasis).
"""

from __future__ import annotations

import argparse
import inspect
import json
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

METHODS = ("get", "post", "put", "delete", "patch")
#: the OpenAPI tags of the app's routers, as the page's section titles
TAG_TITLES = {"functions": "Functions", "state": "Function state", "followers": "Followers",
              "ops": "Metrics and health"}


def _cell(text: object) -> str:
    """Text fit for one cell of a Markdown table."""
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _type(schema: dict[str, Any]) -> str:
    """A JSON schema in a few words: its type, the referenced schema's name, or the alternatives."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(dict.fromkeys(_type(s) for s in schema[key]))
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if "enum" in schema:
        return " / ".join(json.dumps(v) for v in schema["enum"])
    return str(kind)


def rest_markdown(spec: dict[str, Any]) -> str:
    """The REST reference page's body: every operation, then every schema, from an OpenAPI document (headings
    from level 1: the page includes it with a heading offset)."""
    lines = [f"Generated from the server's OpenAPI {spec['openapi']} document; a running server serves it at "
             "`/openapi.json`, and an interactive form of it at `/docs`.", ""]
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, operations in spec["paths"].items():
        for method in METHODS:
            if method in operations:
                op = operations[method]
                by_tag.setdefault((op.get("tags") or ["other"])[0], []).append((method, path, op))
    for tag, ops in by_tag.items():
        lines += [f"# {TAG_TITLES.get(tag, tag.capitalize())}", ""]
        for method, path, op in ops:
            lines += [f"## {method.upper()} {path}", "", op.get("summary", ""), ""]
            if op.get("description"):
                lines += [op["description"].strip(), ""]
            params = op.get("parameters", [])
            if params:
                lines += ["| parameter | in | required | type | description |", "|---|---|---|---|---|"]
                for p in params:
                    lines.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                                 f"{_cell(_type(p.get('schema', {})))} | "
                                 f"{_cell(p.get('description') or p.get('schema', {}).get('description', ''))} |")
                lines.append("")
            body = op.get("requestBody")
            if body:
                kinds = ", ".join(f"`{ct}` ({_cell(_type(c.get('schema', {})))})"
                                  for ct, c in body.get("content", {}).items())
                lines += [f"Request body{' (required)' if body.get('required') else ''}: {kinds}", ""]
            lines += ["| response | description |", "|---|---|"]
            for code, response in op.get("responses", {}).items():
                kinds = ", ".join(f"`{ct}`" + (f" ({_cell(_type(c['schema']))})" if c.get("schema") else "")
                                  for ct, c in response.get("content", {}).items())
                lines.append(f"| {code} | {_cell(response.get('description', ''))}{'; ' + kinds if kinds else ''} |")
            lines.append("")
    lines += ["# Schemas", ""]
    for name, schema in spec.get("components", {}).get("schemas", {}).items():
        lines += [f"## {name}", ""]
        if schema.get("description"):
            lines += [_cell(schema["description"]), ""]
        props = schema.get("properties", {})
        if props:
            required = set(schema.get("required", []))
            lines += ["| field | type | required | description |", "|---|---|---|---|"]
            for field, sub in props.items():
                lines.append(f"| `{field}` | {_cell(_type(sub))} | {'yes' if field in required else 'no'} | "
                             f"{_cell(sub.get('description', ''))} |")
            lines.append("")
    return "\n".join(lines) + "\n"


#: what each backend option means; an option a backend class takes that is missing here fails the build
OPTION_MEANINGS = {
    "max_value_size": "largest value in bytes (never above the backend's own limit)",
    "map_size": "address space reserved for the LMDB file, in bytes (it grows only as data does)",
    "poll_interval": "seconds between checks for other processes' notifications",
    "reap_interval": "seconds between checks for sessions of dead processes",
    "session_timeout": "seconds a session (ZooKeeper), lease (etcd) or Lease (Kubernetes) outlives its last "
                       "contact; its ephemeral keys (locks, leadership) go then",
    "context": "the kubeconfig context to use (default: its current one; also `k8s://CONTEXT@NAMESPACE`)",
    "kubeconfig": "the kubeconfig file (default: `$KUBECONFIG`, else `~/.kube/config`)",
    "in_cluster": "use the pod's service account (the default inside a pod without a kubeconfig)",
    "timeout": "seconds after which an unreachable server gives `StoreUnavailableError`",
    "sweep_after": "seconds an aborted transaction's commit record is kept before the sweep deletes it (Kubernetes, "
                   "its operations page: abandoned transactions)",
}


def backends_markdown() -> str:
    """The metadata store backends (URL scheme, class, extra), then every option their classes take (the keyword
    arguments with defaults of the class and its bases), with its default per backend and its meaning."""
    from sphinx.errors import ExtensionError

    from statekeep.metadata.registry import BUILTIN_BACKENDS, backend_class

    lines = ["| scheme | class | install |", "|---|---|---|"]
    options: dict[str, dict[str, object]] = {}  # option -> scheme -> default
    for scheme, (target, extra) in BUILTIN_BACKENDS.items():
        cls = backend_class(scheme)
        for klass in (cls, *cls.__mro__[1:]):
            if "__init__" not in vars(klass):
                continue
            for param in inspect.signature(klass.__init__).parameters.values():  # type: ignore[misc]
                if param.kind is param.KEYWORD_ONLY and param.default is not param.empty:
                    options.setdefault(param.name, {}).setdefault(scheme, param.default)
        install = f"`pip install '{extra.split()[0]}'`" if extra else "core"
        lines.append(f"| `{scheme}://` | `{target.replace(':', '.')}` | {install} |")
    unknown = sorted(set(options) - set(OPTION_MEANINGS))
    if unknown:
        raise ExtensionError(f"backend options without a meaning in OPTION_MEANINGS: {', '.join(unknown)}")
    lines += ["", "| option | default | meaning |", "|---|---|---|"]
    for name, defaults in options.items():
        values = {repr(value) for value in defaults.values()}
        if len(values) == 1:  # one default on every backend that takes it
            default = f"{values.pop()} ({', '.join(f'`{scheme}://`' for scheme in defaults)})"
        else:
            default = ", ".join(f"{value!r} (`{scheme}://`)" for scheme, value in defaults.items())
        lines.append(f"| `{name}` | {_cell(default)} | {_cell(OPTION_MEANINGS[name])} |")
    return "\n".join(lines) + "\n"


def function_config_markdown() -> str:
    """Every FunctionConfig field (JSON schema type, default, description), then the refused and fixed ones."""
    from statekeep.functions.config.model import FIXED, REFUSED, FunctionConfig

    schema = FunctionConfig.model_json_schema()
    lines = ["| field | type | default | description |", "|---|---|---|---|"]
    for field, sub in schema["properties"].items():
        default = json.dumps(sub["default"]) if "default" in sub else ""
        lines.append(f"| `{field}` | {_cell(_type(sub))} | {_cell(default)} | {_cell(sub.get('description', ''))} |")
    lines += ["", "Accepted only with this value (statekeep always behaves so), and not stored:", "",
              "| field | the one value |", "|---|---|"]
    lines += [f"| `{field}` | `{json.dumps(value)}` |" for field, value in FIXED.items()]
    lines += ["", "Refused whenever given (a 400 over REST, an error on the CLI), with the reason:", "",
              "| field | why |", "|---|---|"]
    lines += [f"| `{field}` | {_cell(why)} |" for field, why in REFUSED.items()]
    return "\n".join(lines) + "\n"


def _escape(text: str | None) -> str | None:
    return None if text is None else text.replace("\\", "\\\\").replace("*", "\\*").replace("`", "\\`")


def cli_parser() -> argparse.ArgumentParser:
    """:func:`statekeep.cli.build_parser`'s parser, with every help text, description and epilog escaped for
    reST (their default values expanded first, as ``--help`` shows them)."""
    from statekeep.cli import build_parser

    def escape(parser: argparse.ArgumentParser) -> None:
        parser.description, parser.epilog = _escape(parser.description), _escape(parser.epilog)
        for group in parser._action_groups:
            group.description = _escape(group.description)
        for action in parser._actions:
            if action.help and action.help is not argparse.SUPPRESS:
                help_text = action.help
                if "%(default)" in help_text:
                    help_text = help_text % {"default": action.default}
                action.help = _escape(help_text.replace("%", "%%"))
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    choice.help = _escape(choice.help)
                for sub in action.choices.values():
                    escape(sub)

    parser = build_parser()
    escape(parser)
    return parser


def generate(app: Sphinx) -> None:
    """Write the generated pages into ``docs/_generated`` (only when their text changed, so an incremental
    build does not reread every page)."""
    from statekeep.server.app import create_app

    out = Path(app.srcdir) / "_generated"
    out.mkdir(exist_ok=True)
    spec = create_app({"metadata_url": "memory://statekeep-docs", "tokens": {"docs": {"superuser": True}}}).openapi()
    pages = {"openapi.json": json.dumps(spec, indent=2) + "\n", "rest.md": rest_markdown(spec),
             "backends.md": backends_markdown(), "function-config.md": function_config_markdown()}
    for name, text in pages.items():
        path = out / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
