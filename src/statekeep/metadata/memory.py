"""``memory://[NAME]``: an in-process store for tests and demos.

``memory://`` is private to the instance; ``memory://NAME`` is shared by every instance opened with
that name in this process (each instance is its own session, so ephemeral keys and notifications
behave as between separate clients). Nothing survives the process.
"""

from __future__ import annotations

import itertools
import threading
import time
import weakref
from typing import Any

from statekeep.metadata._tree import Changes, Record
from statekeep.metadata.base import MetadataStore
from statekeep.metadata.types import GetResult, Op, Stat, parent_of

_sessions = itertools.count(1)


class _Tree:
    """The shared data of one memory namespace (a TreeReader of it); its lock serializes writes."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.nodes: dict[str, Record] = {}
        self.names: dict[str, set[str]] = {}  # parent -> names of its children
        #: parent -> the names sorted, as last listed: a name added past the last is appended (a log's new records),
        #: any other change drops the list
        self._sorted: dict[str, list[str]] = {}
        self.sequences: dict[str, int] = {}
        self.stores: weakref.WeakSet[MemoryStore] = weakref.WeakSet()

    def read(self, path: str) -> Record | None:
        return self.nodes.get(path)

    def children(self, path: str) -> list[str]:
        """The names of ``path``'s children, sorted (under :attr:`lock`: a commit drops a changed parent's list)."""
        found = self._sorted.get(path)
        if found is None:  # a follower polling a long changelog lists it again and again, unchanged
            found = self._sorted[path] = sorted(self.names.get(path, ()))
        return list(found)

    def has_children(self, path: str) -> bool:
        return bool(self.names.get(path))

    def last_sequence(self, parent: str) -> int:
        return self.sequences.get(parent, 0)

    def commit(self, changes: Changes) -> None:
        for path, record in changes.writes.items():
            name, parent = path.rpartition("/")[2], parent_of(path)
            siblings = self.names.setdefault(parent, set())
            if record is None:
                self.nodes.pop(path, None)
                if name in siblings:
                    siblings.discard(name)
                    self._sorted.pop(parent, None)
            else:
                self.nodes[path] = record
                if name not in siblings:
                    siblings.add(name)
                    listed = self._sorted.get(parent)
                    if listed is not None and (not listed or name > listed[-1]):
                        listed.append(name)
                    else:
                        self._sorted.pop(parent, None)
        self.sequences.update(changes.sequences)
        for store in list(self.stores):
            for event in changes.events:
                store._emit_change(event.type, event.path)


_named: dict[str, _Tree] = {}
_named_lock = threading.Lock()


class MemoryStore(MetadataStore):
    scheme = "memory"
    capabilities = frozenset({"nonblocking_reads", "sequence_counters"})
    max_multi_ops, max_request_bytes = 40_000, 64 << 20

    def __init__(self, name: str = "", **options: Any) -> None:
        super().__init__(**options)
        if name:
            with _named_lock:
                self._tree = _named.setdefault(name, _Tree())
        else:
            self._tree = _Tree()
        self.session_id = next(_sessions)
        with self._tree.lock:  # commit() iterates the stores under it
            self._tree.stores.add(self)

    @classmethod
    def from_url(cls, rest: str, options: dict[str, Any]) -> MemoryStore:
        return cls(rest.strip("/"), **options)

    def _get(self, path: str) -> GetResult | None:
        record = self._tree.nodes.get(path)
        return None if record is None else GetResult(record.value, record.stat(path, self.session_id))

    def _get_children(self, path: str) -> list[str]:
        with self._tree.lock:
            return self._tree.children(path)

    def _exists(self, path: str) -> bool:
        return path in self._tree.nodes

    def _multi(self, ops: list[Op]) -> list[Stat | None]:
        with self._tree.lock:
            changes = Changes(self._tree, self.session_id, int(time.time() * 1000))
            results = [changes.apply(op) for op in ops]
            self._tree.commit(changes)
            return results

    def _last_sequence(self, parent: str) -> int:
        with self._tree.lock:
            return self._tree.last_sequence(parent)

    def _raise_sequence(self, parent: str, at_least: int) -> int:
        with self._tree.lock:
            last = max(self._tree.last_sequence(parent), at_least)
            self._tree.sequences[parent] = last
            return last

    def _close(self) -> None:
        with self._tree.lock:
            self._tree.stores.discard(self)
            mine = [p for p, r in self._tree.nodes.items() if r.owner == self.session_id]
            if mine:
                changes = Changes(self._tree, self.session_id, int(time.time() * 1000))
                for path in mine:
                    changes.remove(path)
                self._tree.commit(changes)

    def expire_session(self) -> None:
        """Test hook: end this instance's session as if its client died (ephemeral keys vanish)."""
        self.close()

