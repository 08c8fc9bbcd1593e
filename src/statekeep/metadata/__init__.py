"""The metadata store contract (after Pulsar PIP-45) and its backends.

    store = statekeep.metadata.open_store("local:///var/lib/statekeep")
"""

from statekeep.metadata.base import DEFAULT_MAX_VALUE_SIZE, MetadataStore, Subscription
from statekeep.metadata.registry import open_store
from statekeep.metadata.types import (
    Check,
    Delete,
    GetResult,
    Notification,
    NotificationType,
    Op,
    Put,
    SessionEvent,
    Stat,
)

__all__ = [
    "DEFAULT_MAX_VALUE_SIZE", "Check", "Delete", "GetResult", "MetadataStore", "Notification",
    "NotificationType", "Op", "Put", "SessionEvent", "Stat", "Subscription", "open_store",
]
