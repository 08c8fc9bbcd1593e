"""Key groups: how partition-owned state splits a function's keys (after Flink's key groups).

Every state key belongs to one of ``groups`` key groups, ``crc32(UTF-8 key) mod groups``, for the
life of the function: :func:`key_group`, the one place this rule is written (statekeep's internal
keys are in the group of the user key they embed). The number is fixed when the function's state is
first written (:data:`KEY_GROUPS` unless configured). With ``parallelism`` partitions, partition ``p``
owns the contiguous range of groups ``g`` with ``g * parallelism // groups == p``. Rescaling moves
whole groups between partitions, so a partition's state is always the union of whole groups, and a
new partition finds its keys by filtering its predecessors' state by group.

The Spark plan routes each record to its owner with the same function (``crc32`` is a Spark SQL
function; :func:`statekeep.functions.driver.plan.route_column` writes it as a column expression):
:func:`spark_routes` gives, per partition, an integer whose Spark hash partitioning lands exactly in
that partition, so ``repartition(P, route)`` puts partition ``p``'s key groups in Spark partition ``p``.
"""

from __future__ import annotations

import zlib

from statekeep.errors import InvalidArgumentError
from statekeep.state.timestate import RESERVED, internal_owner
from statekeep.validate import check_int

#: The number of key groups of a function's state: partition-owned state's unless configured, and
#: always that of the time state on other providers (stored entries name their groups: never changed).
#: 128 (Flink's default maximum parallelism): parallelism up to 128, and at 2-32 partitions the groups
#: split evenly enough (at most one group more in a partition than in another).
KEY_GROUPS = 128
MAX_KEY_GROUPS = 32768


def validate_layout(groups: object, parallelism: object) -> tuple[int, int]:
    """``(groups, parallelism)`` checked: 1 <= parallelism <= groups <= MAX_KEY_GROUPS."""
    groups = check_int(groups, "key groups", minimum=1, maximum=MAX_KEY_GROUPS)
    parallelism = check_int(parallelism, "parallelism", minimum=1, maximum=MAX_KEY_GROUPS)
    if parallelism > groups:
        raise InvalidArgumentError(f"parallelism {parallelism} exceeds the function's {groups} key groups")
    return groups, parallelism


def key_group(key: str, groups: int) -> int:
    """The key group of a state key, ``crc32(UTF-8 key) mod groups`` (the same for the life of the
    function). An internal key of statekeep's time state (:mod:`statekeep.state.timestate`) is in the
    group of the user key it embeds, or in the group it names."""
    if key[:1] == RESERVED:
        owner = internal_owner(key)
        if isinstance(owner, int):
            return owner % groups
        key = owner
    return zlib.crc32(key.encode()) % groups


def owner(group: int, parallelism: int, groups: int) -> int:
    """The partition that owns ``group`` at ``parallelism``."""
    return group * parallelism // groups


def group_range(partition: int, parallelism: int, groups: int) -> range:
    """The key groups partition ``partition`` of ``parallelism`` owns."""
    return range(-(-partition * groups // parallelism), -(-(partition + 1) * groups // parallelism))


# ---- Spark's hash partitioning of an int column: Murmur3_x86_32.hashInt(value, seed 42) ----------

def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark SQL's ``hash()`` of an int (what ``repartition(n, col)`` partitions by), as a signed int."""
    k1 = (value & 0xFFFFFFFF) * 0xCC9E2D51 & 0xFFFFFFFF
    k1 = _rotl(k1, 15) * 0x1B873593 & 0xFFFFFFFF
    h1 = _rotl(seed ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & 0xFFFFFFFF
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & 0xFFFFFFFF
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & 0xFFFFFFFF
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 >= 1 << 31 else h1


def spark_routes(parallelism: int) -> list[int]:
    """Per partition ``p``, the smallest int ``v`` whose Spark hash partitioning into ``parallelism``
    partitions is ``p``: ``pmod(hash(v), parallelism) == p``."""
    routes: dict[int, int] = {}
    value = 0
    while len(routes) < parallelism:
        routes.setdefault(spark_hash_int(value) % parallelism, value)
        value += 1
    return [routes[p] for p in range(parallelism)]
