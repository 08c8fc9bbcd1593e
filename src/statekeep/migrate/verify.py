"""Checking a copy against its source: counts and SHA-256 checksums, per kind of record.

The source's records are read again and compared with what the target holds now: each node's value
(read in batches), each sequence counter (the target's must be at least the source's), each copied
function's state (both sides in key order). Each side gets a checksum over what it holds for the
source's keys, so two equal checksums mean an exact copy; a difference is listed (first ten; a typed
variable's entry named by its record key and variable: :func:`shown_key`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from statekeep.metadata.base import MetadataStore
from statekeep.migrate.records import Function, Node, Peekable, Record, Sequence, Skipped
from statekeep.state.catalog import function_provider
from statekeep.state.registry import open_provider
from statekeep.state import typed
from statekeep.state.base import StateStoreProvider, merge_entries
from statekeep.state.timestate import is_internal

_CHUNK = 500


@dataclass
class Check:
    """One kind of record: how many the source has, how many match, and both sides' checksums."""

    source: int = 0
    matched: int = 0
    source_sha256: str = ""
    target_sha256: str = ""
    mismatches: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.source == self.matched and self.source_sha256 == self.target_sha256


class _Digest:
    def __init__(self) -> None:
        self.source, self.target = hashlib.sha256(), hashlib.sha256()

    def add(self, name: str, source: bytes, target: bytes | None) -> None:
        head = name.encode() + b"\0"
        self.source.update(head + len(source).to_bytes(8, "big") + source)
        self.target.update(head + (b"\xff" * 8 if target is None else len(target).to_bytes(8, "big") + target))


def verify(records: Iterator[Record], store: MetadataStore) -> dict[str, Check]:
    """Compare ``records`` (read again from the source) with ``store``; keys ``nodes``, ``sequences``,
    ``state`` (every function's entries) and ``skipped`` (ephemeral keys: counted, never compared)."""
    checks = {name: Check() for name in ("nodes", "sequences", "state", "skipped")}
    digests = {name: _Digest() for name in ("nodes", "sequences", "state")}
    provider_name, config = function_provider(None, store)
    pending: list[Node] = []

    def mismatch(check: Check, what: str) -> None:
        if len(check.mismatches) < 10:
            check.mismatches.append(what)

    def flush_nodes() -> None:
        check = checks["nodes"]
        for node, result in zip(pending, store.get_many([n.path for n in pending])):
            target = None if result is None else result.value
            digests["nodes"].add(node.path, node.value, target)
            check.source += 1
            if target == node.value:
                check.matched += 1
            else:
                mismatch(check, node.path)
        pending.clear()

    with open_provider(provider_name, config) as provider:
        it = Peekable(records)
        while (record := it.next()) is not None:
            if isinstance(record, Node):
                pending.append(record)
                if len(pending) >= _CHUNK:
                    flush_nodes()
            elif isinstance(record, Skipped):
                checks["skipped"].source += 1
                checks["skipped"].matched += 1
            elif isinstance(record, Sequence):
                check = checks["sequences"]
                have = store.last_sequence(record.parent)
                ok = have >= record.last
                last = str(record.last).encode()
                digests["sequences"].add(record.parent, last, last if ok else str(have).encode())
                check.source += 1
                check.matched += ok
                if not ok:
                    mismatch(check, f"{record.parent} (source {record.last}, target {have})")
            elif isinstance(record, Function) and record.state == "copied":
                _compare_state(provider, record, it, checks["state"], digests["state"], mismatch)
        flush_nodes()
    for name, digest in digests.items():
        checks[name].source_sha256 = digest.source.hexdigest()
        checks[name].target_sha256 = digest.target.hexdigest()
    return checks


def _compare_state(provider: StateStoreProvider, function: Function, it: Peekable, check: Check, digest: _Digest,
                   mismatch: Callable[[Check, str], None]) -> None:
    """Compare the entries that follow ``function`` in ``it`` with its state on the target, both in key order."""
    state = provider.get_state_store(function.tenant, function.namespace, function.name)
    for key, want, have in merge_entries(it.entries(), state.scan_entries()):
        name = f"{function.fqfn}:{shown_key(key)}"
        if want is None:  # a key the source does not have: the copy is not exact
            mismatch(check, f"{name} (only on the target)")
            digest.target.update(b"extra:" + name.encode())
            continue
        target = None if have is None else have.kind.encode() + b":" + have.value
        source = want.kind.encode() + b":" + want.value
        digest.add(name, source, target)
        check.source += 1
        if target == source:
            check.matched += 1
        else:
            mismatch(check, name)


def shown_key(key: str) -> str:
    """A state key as a report names it: a typed variable's entry by its record key and variable (its list
    element or map key), another internal key quoted (it starts with NUL), a user's key as it is."""
    entry = typed.decoded_entry(key, None, 0)
    if entry is None:
        return repr(key) if is_internal(key) else key
    part = f"[{entry['element']}]" if "element" in entry else f"[{entry['mapKey']!r}]" if "mapKey" in entry else ""
    return f"{entry['key']} (variable {entry['variable']}{part})"
