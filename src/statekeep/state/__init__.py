"""Function state (after Pulsar PIP-312): :class:`StateStore` (read and write; it extends
:class:`ReadableStateStore`, what read-only followers implement), :class:`StateStoreProvider`, the
provider registry, and the changelog record each mutation writes (KIP-813).

    provider = statekeep.state.open_provider("metadata", {"metadata_url": "local:///var/lib/statekeep"})
    state = provider.get_state_store("public", "default", "wordcount")
    state.incr("hello")                    # 1
    state.put("last", b"hello")
    provider.cleanup("public", "default", "wordcount")

The package, from the contract out:

- :mod:`.base`: the contract, a file each: the store (:mod:`.base.store`), what a Spark task sees of it
  (:mod:`.base.task`), the provider (:mod:`.base.provider`), what a provider declares it can do
  (:mod:`.base.capabilities`), the checks of a write's arguments (:mod:`.base.checks`).
- Beside it, the rules every provider shares: :mod:`.keys` (a key's encoding), :mod:`.records` (stored
  values and changelog records), :mod:`.keygroups` (the key-group hash), :mod:`.registry` (providers by
  name) and :mod:`.catalog` (:func:`~statekeep.state.catalog.function_provider`: which provider keeps a
  function's state, decided there only).
- One folder per provider, with the same file names: :mod:`.metadata`, :mod:`.embedded`,
  :mod:`.partitioned`, each with ``provider.py``, ``store.py`` and ``changelog.py`` (and what is its own).
- Above them, what the runtime keeps in any store: :mod:`.buffer` (a batch's writes), :mod:`.timestate`
  (timers, windows, TTL), typed state (:mod:`.typed`, :mod:`.variables`, :mod:`.schemas`), and
  :mod:`.shape` (the REST bodies).
"""

from statekeep.state.base import (BatchLimits, Capability, ReadableStateStore, StateEntry, StateStore,
                                  StateStoreProvider)
from statekeep.state.keys import MAX_SEGMENT, decode_key, encode_key, validate_name
from statekeep.state.records import COUNTER_MAX, COUNTER_MIN, ChangelogRecord, decode_record
from statekeep.state.registry import (ENTRY_POINT_GROUP, ProviderPool, open_provider, provider_class,
                                      provider_names, register_provider)

__all__ = [
    "COUNTER_MAX", "COUNTER_MIN", "ENTRY_POINT_GROUP", "MAX_SEGMENT", "BatchLimits", "Capability", "ChangelogRecord",
    "ProviderPool", "ReadableStateStore", "StateEntry", "StateStore", "StateStoreProvider", "decode_key",
    "decode_record", "encode_key", "open_provider", "provider_class", "provider_names", "register_provider",
    "validate_name",
]
