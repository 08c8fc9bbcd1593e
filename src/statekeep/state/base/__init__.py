"""The function state contract, one file each: the store (:mod:`.store`), what a Spark task sees of it
(:mod:`.task`), the provider (:mod:`.provider`), what a provider declares it can do
(:mod:`.capabilities`), and the checks of a write's arguments (:mod:`.checks`). :mod:`.entry_store`
is the write path of the stores that keep stored entries (embedded, partitioned)."""

from statekeep.state.base.capabilities import PER_KEY, Capability
from statekeep.state.base.checks import (check_expected_version, validate_amount, validate_amounts, validate_batch,
                                         validate_value)
from statekeep.state.base.entry_store import EntryStateStore
from statekeep.state.base.provider import StateStoreProvider, StoreBackedProvider
from statekeep.state.base.store import (BatchLimits, ChangelogPosition, CompactionResult, ReadableStateStore,
                                        StateEntry, StateStore, StateView, check_partition, merge_entries)
from statekeep.state.base.task import TaskState

__all__ = [
    "PER_KEY", "BatchLimits", "Capability", "ChangelogPosition", "CompactionResult", "EntryStateStore",
    "ReadableStateStore", "StateEntry", "StateStore", "StateStoreProvider", "StateView", "StoreBackedProvider",
    "TaskState", "check_expected_version", "check_partition", "merge_entries", "validate_amount", "validate_amounts",
    "validate_batch", "validate_value",
]
