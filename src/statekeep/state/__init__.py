"""Function state (after Pulsar PIP-312): :class:`StateStore` (read and write; it extends
:class:`ReadableStateStore`, what read-only followers implement), :class:`StateStoreProvider`, the
provider registry, and the changelog record each mutation writes (KIP-813).

    provider = statekeep.state.open_provider("metadata", {"metadata_url": "local:///var/lib/statekeep"})
    state = provider.get_state_store("public", "default", "wordcount")
    state.incr("hello")                    # 1
    state.put("last", b"hello")
    provider.cleanup("public", "default", "wordcount")
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
