"""The cyclic garbage collector during a partition's run (statekeep.functions.executor.collector): only the youngest
generation is collected while a run holds its batch, cyclic garbage is still freed, and the thresholds come back."""

from __future__ import annotations

import gc
import json
import threading
import weakref

import pytest

from statekeep.functions.executor.collector import young_generation_only
from support.specs import run_partition

KEEP = '''
def process(input, context):
    context.put_state(input["k"], str([[input["k"], i] for i in range(3)]))
    return {"k": input["k"], "kept": [[input["k"]]]}
'''


@pytest.fixture
def collections():
    """The generation of every collection while a :func:`young_generation_only` block is open."""
    seen: list[int] = []
    outside = gc.get_threshold()[1]

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and gc.get_threshold()[1] != outside:
            seen.append(info["generation"])

    gc.callbacks.append(count)
    yield seen
    gc.callbacks.remove(count)


def test_a_run_collects_only_the_youngest_generation_and_then_restores_the_thresholds(tmp_path, collections):
    before = gc.get_threshold()
    spec = {"tenant": "public", "namespace": "default", "name": "keep", "code": KEEP, "py_name": "keep.py",
            "state_provider": "embedded", "state_config": {"metadata_url": f"local://{tmp_path}"},
            "input_format": "json", "output": str(tmp_path / "out"), "user_config": {}}
    lines = [json.dumps({"k": f"k{i}"}) for i in range(60_000)]  # its outputs alone: 120k containers
    stats = run_partition(spec, 0, 0, lines, {f"k{i}" for i in range(60_000)})
    assert stats.processed == 60_000
    assert collections and set(collections) == {0}  # young collections ran, older ones never did
    assert gc.get_threshold() == before


def test_cyclic_garbage_made_within_is_still_freed(collections):
    class Node:
        pass

    with young_generation_only():
        node = Node()
        node.self = node  # a cycle: only the collector frees it
        gone = weakref.ref(node)
        del node
        kept = [[i] for i in range(gc.get_threshold()[0] * 3)]  # enough allocations for young collections
        assert gone() is None and 0 in collections
    assert len(kept) > 0


def test_overlapping_blocks_restore_the_thresholds_when_the_last_one_ends():
    before = gc.get_threshold()
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with young_generation_only():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other)
    with young_generation_only():
        thread.start()
        assert inside.wait(10)
        assert gc.get_threshold()[0] == before[0] and min(gc.get_threshold()[1:]) > 1_000_000
    assert min(gc.get_threshold()[1:]) > 1_000_000  # the thread's block is still open
    release.set()
    thread.join(10)
    assert gc.get_threshold() == before
    with pytest.raises(RuntimeError), young_generation_only():
        raise RuntimeError("an error in the block")
    assert gc.get_threshold() == before
