# lmdb's own annotations allow memoryview results everywhere (for buffers=True, which statekeep never
# uses): statekeep type-checks against this untyped stand-in instead of narrowing every hot-path read.
from typing import Any

def __getattr__(name: str) -> Any: ...
