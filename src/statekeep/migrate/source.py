"""Reading a whole store as migration records (:mod:`statekeep.migrate.records`). Reads only.

What is read, and how the tree copy and the state copy divide the work:

- the metadata tree, every persistent key (ephemeral keys become :class:`Skipped`), except the
  migration journal of an unfinished copy into this store and the state subtrees of functions whose
  state is copied through their provider (``/statekeep/state/T/N/F`` when the source's default
  provider is ``metadata``), so no key is copied twice;
- a :class:`Sequence` for every parent that has children and whose counter (or the largest
  10-digit suffix of a child's name) is above 0;
- every registered function (the registry's own keys are tree nodes), with its state read through
  the source's default provider (``embedded`` on ``local://``, ``metadata`` elsewhere) when the
  function names no provider of its own; one that does keeps its state where it is ("external").
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from statekeep.metadata.base import Closing, MetadataStore
from statekeep.metadata.types import join
from statekeep.migrate.records import Entry, Function, Node, Record, Sequence, Skipped
from statekeep.state.base import StateStoreProvider
from statekeep.state.catalog import DEFAULT_ROOT as FUNCTIONS_ROOT
from statekeep.state.catalog import FunctionCatalog, function_provider
from statekeep.state.metadata.store import DEFAULT_ROOT as STATE_ROOT
from statekeep.state.registry import open_provider

JOURNAL_PATH = "/statekeep/migration"
SUFFIX = re.compile(r"(\d{10})$")
_READ_CHUNK = 500


class StoreSource(Closing):
    """The records of ``store`` (open, owned by the caller), in the order of the records module."""

    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self.catalog = FunctionCatalog(store, FUNCTIONS_ROOT)
        self.provider_name, provider_config = function_provider(None, store)
        self._provider_config = provider_config
        self._provider: StateStoreProvider | None = None

    def functions(self) -> list[Function]:
        """Every registered function, sorted by tenant, namespace and name."""
        out = []
        root = self.catalog.root
        for tenant in self.store.get_children(root):
            for namespace in self.store.get_children(f"{root}/{tenant}"):
                for name in self.store.get_children(f"{root}/{tenant}/{namespace}"):
                    try:
                        result = self.catalog.get(tenant, namespace, name)
                    except Exception:  # a key the registry cannot have written (bad name): plain tree data
                        continue
                    if result is None:
                        continue
                    config = self.catalog.decode(result.value, self.catalog.path(tenant, namespace, name))
                    storage = config.get("stateStorage")  # named: its state is elsewhere, not copied
                    out.append(Function(tenant, namespace, name, "copied" if storage is None else "external",
                                        function_provider(storage, self.store)[0]))
        return out

    def records(self) -> Iterator[Record]:
        functions = self.functions()
        excluded = {JOURNAL_PATH}
        if self.provider_name == "metadata":
            excluded.update(f"{STATE_ROOT}/{f.fqfn}" for f in functions if f.state == "copied")
        counters: list[Sequence] = []
        yield from self._walk("/", excluded, counters)
        yield from counters
        for function in functions:
            yield function
            if function.state == "copied":
                if self._provider is None:  # opened with the first function whose state is copied
                    self._provider = open_provider(self.provider_name, self._provider_config)
                state = self._provider.get_state_store(function.tenant, function.namespace, function.name)
                for entry in state.scan_entries():  # paged: one round trip per page on a server store
                    yield Entry(entry.key, entry.kind, entry.value)

    def _walk(self, path: str, excluded: set[str], counters: list[Sequence]) -> Iterator[Record]:
        names = self.store.get_children(path)
        if not names:
            return
        last = max((int(m.group(1)) for n in names if (m := SUFFIX.search(n))), default=0)
        if "sequence_counters" in self.store.capabilities:
            last = max(last, self.store.last_sequence(path))
        if last > 0:
            counters.append(Sequence(path, last))
        for i in range(0, len(names), _READ_CHUNK):
            chunk = [join(path, name) for name in names[i:i + _READ_CHUNK]]
            for child, result in zip(chunk, self.store.get_many(chunk)):
                if result is None or child in excluded:
                    continue  # gone since listed (the source is live), or copied another way
                if result.stat.ephemeral:
                    yield Skipped(child, "ephemeral")
                    continue
                yield Node(child, result.value)
                yield from self._walk(child, excluded, counters)

    def close(self) -> None:
        """Close the state provider opened here (not the store)."""
        if self._provider is not None:
            self._provider.close()
            self._provider = None
