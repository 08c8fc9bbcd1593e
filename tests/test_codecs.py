"""One of each (issue 31, part 4): the store-record JSON codec, the stored-entry codec and the one blob
format (with the legacy function-snapshot format still read), and the one restore path of
partition-owned state. Fast: in-memory and local stores only."""

from __future__ import annotations

import io
import json
import struct

import pytest

from statekeep import jsonrecords
from statekeep.changelog import SnapshotStore, snapshots as snapshots_module
from statekeep.errors import CorruptRecordError, CorruptStateError, InvalidArgumentError, NotFoundError
from statekeep.handles.blobs import BlobRef
from statekeep.metadata import open_store
from statekeep.state import open_provider, records
from statekeep.state.catalog import FunctionCatalog
from statekeep.state.partitioned import entries
from statekeep.state.keygroups import key_group
from statekeep.state.partitioned.manifest import Blob, Layout, Lineage, Manifest
from statekeep.state.partitioned.restore import restore
from statekeep.state.timestate import decode_group, encode_group
from support.followers import entries as entries_of
from support.followers import open_follower, write_mix

# ---- 1. store-record JSON codec --------------------------------------------------------------------


@pytest.mark.parametrize("raw", [b"{not json", b"[1, 2]", b"\xff\xfe", b'"a string"', b""])
def test_a_corrupt_record_is_named_with_its_key(raw):
    with pytest.raises(CorruptRecordError, match="/some/where") as caught:
        jsonrecords.decode(raw, "/some/where", "thing")
    assert caught.value.key == "/some/where" and isinstance(caught.value, CorruptStateError)


def test_a_record_missing_a_field_is_named_and_statekeep_errors_pass_through():
    with pytest.raises(CorruptRecordError, match=r"layout at /p/layout is not statekeep's: KeyError\('groups"):
        Layout.decode(b'{"parallelism": 1, "generation": 0}', 3, "/p/layout")

    def refuse(d):
        raise NotFoundError("gone")

    with pytest.raises(NotFoundError):
        jsonrecords.decode(b"{}", "/k", "x", refuse)


def test_store_records_round_trip_byte_identical():
    layout = Layout(128, 2, 5)
    assert layout.encode() == b'{"groups": 128, "parallelism": 2, "generation": 5}'  # as written before
    assert Layout.decode(layout.encode(), 7, "/l") == layout
    blob = Blob("file:///b", 10, "ab" * 32, 3, 4)
    manifest = Manifest("id1", 1, 0, (0, 64), 3, 2, blob, (blob,), (Lineage((0, 128), None, (blob,)),))
    raw = manifest.encode()
    assert raw.startswith(b'{"id":"id1","generation":1,"partition":0,"groups":[0,64],"seq":3,"batch":2,')
    assert Manifest.decode(raw, 9, "/m") == manifest
    with pytest.raises(CorruptRecordError, match="/m"):
        Manifest.decode(raw[:-3], 9, "/m")
    group = {"wm": 5, "t": {"k": [[1, "e"]]}, "x": {}}
    assert decode_group(encode_group(group)) == group
    with pytest.raises(CorruptRecordError, match=r"'\\x00g7'"):
        decode_group(b'{"wm": 1', "\x00g7")


def test_registry_entries_handles_and_fences_name_the_key(tmp_path):
    from statekeep.handles.handle import decode as decode_handle

    store = open_store(f"local://{tmp_path / 'store'}")
    try:
        catalog = FunctionCatalog(store)
        store.put(catalog.path("t", "n", "f"), b'{"tenant": "t"', -1)
        with pytest.raises(CorruptRecordError, match="/statekeep/functions/t/n/f") as caught:
            catalog.config("t", "n", "f")
        assert caught.value.key == "/statekeep/functions/t/n/f"
    finally:
        store.close()
    with pytest.raises(CorruptRecordError, match="snapshot-0000000001"):
        decode_handle("snapshot-0000000001", 0, b'{"format": 1, "blob": "x"}', None)


def test_a_followers_corrupt_meta_record_is_named(tmp_path):
    from statekeep.changelog.replica import LocalReplica

    replica = LocalReplica(str(tmp_path / "copy"), "t", "n", "f")
    try:
        replica.begin_restore({"source": "read"})
        assert replica.load().restore == {"source": "read", "gen": 1, "written": 0}
        replica._submit(lambda txn: txn.put(replica._p + b"r", b'{"gen": ', db=replica._meta))
        with pytest.raises(CorruptRecordError, match="follower_meta t/n/f/r"):
            replica.load()
    finally:
        replica.close()


# ---- 2. stored-entry codec -------------------------------------------------------------------------


def test_stored_entries_round_trip_and_corruption_names_the_key():
    for kind, value in (("bytes", b""), ("bytes", b"\x00v"), ("counter", records.counter_bytes(-5))):
        raw = records.entry_bytes(7, kind, value)
        assert records.decode_entry("k", raw) == records.StateEntry("k", value, kind, 7)
        assert records.entry_value("k", raw) == value
        assert records.entry_record(b"k", raw, 3) == records.ChangelogRecord("k", kind, value, 7, 3)
    assert records.entry_counter("k", records.entry_bytes(1, "counter", records.counter_bytes(-5))) == -5
    assert records.entry_counter("k", None) == 0 and records.entry_value("k", None) is None
    with pytest.raises(InvalidArgumentError, match="holds bytes"):
        records.entry_counter("k", records.entry_bytes(1, "bytes", b"x"))
    tomb = records.tombstone_entry(4, 1234)
    assert records.entry_record(b"k", tomb) == records.ChangelogRecord("k", None, None, 4, -1, 1234)
    for garbage in (b"\x00" * 8 + b"Zjunk", b"\x00" * 8 + b"C\x01", b"\x00\x01"):
        for decode in (records.decode_entry, records.entry_value, records.entry_counter):
            with pytest.raises(CorruptStateError, match="'my key'"):
                decode("my key", garbage)


def test_every_provider_reads_a_corrupt_entry_as_a_named_error(tmp_path):
    provider = open_provider("embedded", {"metadata_url": f"local://{tmp_path / 'store'}"})
    try:
        state = provider.get_state_store("t", "n", "f")
        state.put("good", b"v")
        with state._env.begin(write=True) as txn:
            txn.put(state._prefix + b"bad", b"\x00" * 8 + b"?", db=state._state)
        assert state.get("good") == b"v"
        for read in (state.get, state.get_counter, state.get_entry):
            with pytest.raises(CorruptStateError, match="'bad'"):
                read("bad")
        with pytest.raises(CorruptStateError, match="'bad'"):
            list(state.scan_entries())
    finally:
        provider.close()


# ---- 2. one blob format, the legacy function snapshot still read -------------------------------------


def _legacy_snapshot(header: dict, pairs) -> bytes:
    """A function snapshot as statekeep wrote it before the one format (changelog/snapshot_format.py):
    magic, u32 header length, JSON header, per entry ``>HcQI`` (key length, tag, version, value length)
    + key + value, trailer ``u16 0xFFFF, u64 count``."""
    raw_header = json.dumps(header, sort_keys=True).encode()
    out = [b"SKSNAP1\n", struct.pack(">I", len(raw_header)), raw_header]
    for key, entry in pairs:
        out += [struct.pack(">HcQI", len(key), entry[8:9], records.entry_version(entry), len(entry) - 9), key,
                entry[9:]]
    return b"".join(out + [struct.pack(">HQ", 0xFFFF, len(pairs))])


def _pairs(n: int):
    return [(f"k{i:04d}".encode(), records.entry_bytes(i, "counter" if i % 3 == 0 else "bytes",
                                                       records.counter_bytes(i) if i % 3 == 0 else b"v" * (i % 7)))
            for i in range(n)]


def test_blob_format_round_trips_in_chunks_and_names_a_bad_blob():
    pairs = _pairs(500)
    for kind in (entries.SEGMENT, entries.SNAPSHOT):
        chunks = list(entries.encode(kind, pairs, chunk_size=256))
        assert len(chunks) > 10  # streamed: memory bounded by a chunk
        data = b"".join(chunks)
        assert list(entries.decode(kind, data, "blob-x")) == pairs
        assert list(entries.decode(kind, io.BytesIO(data).read, "blob-x", chunk_size=100)) == pairs
        with pytest.raises(CorruptStateError, match="blob-x is truncated"):
            list(entries.decode(kind, data[:-3], "blob-x"))
    with pytest.raises(CorruptStateError, match="blob-y is not a statekeep segment"):
        list(entries.decode(entries.SEGMENT, b"".join(entries.encode(entries.SNAPSHOT, pairs)), "blob-y"))
    # the bytes partition-owned state has written all along: SKSNP1/SKSEG1, >HI, key, version + tagged value
    old = b"SKSEG1\n" + struct.pack(">HI", 1, 10) + b"a" + struct.pack(">Q", 2) + b"Bx" + \
        struct.pack(">HI", 1, 17) + b"b" + struct.pack(">Q", 0) + b"D" + struct.pack(">Q", 99)
    assert list(entries.decode(entries.SEGMENT, old, "s")) == [
        (b"a", records.entry_bytes(2, "bytes", b"x")), (b"b", records.tombstone_entry(0, 99))]
    old = b"SKSNP1\n" + struct.pack(">HI", 1, 17) + b"c" + struct.pack(">Q", 4) + b"C" + struct.pack(">q", -2)
    assert list(entries.decode(entries.SNAPSHOT, old, "s")) == [
        (b"c", records.entry_bytes(4, "counter", records.counter_bytes(-2)))]


def test_legacy_function_snapshots_are_still_read():
    pairs = _pairs(300)
    data = _legacy_snapshot({"format": 1, "offset": 41, "epoch": "e"}, pairs)
    assert list(entries.decode(entries.SNAPSHOT, io.BytesIO(data).read, "old")) == pairs
    for prefix in (b"k00", b"k0299", b"zz", b"a"):
        got = list(entries.decode(entries.SNAPSHOT, io.BytesIO(data).read, "old", key_prefix=prefix))
        assert got == [p for p in pairs if p[0].startswith(prefix)]
    with pytest.raises(CorruptStateError, match="old"):  # a count the trailer does not vouch for
        list(entries.decode(entries.SNAPSHOT, data[:-1] + b"\x00", "old"))
    with pytest.raises(CorruptStateError, match="old"):
        list(entries.decode(entries.SNAPSHOT, data[:len(data) // 2], "old"))


def test_a_legacy_function_snapshot_restores_and_bootstraps_a_follower(tmp_path, monkeypatch):
    provider = open_provider("embedded", {"metadata_url": f"local://{tmp_path / 'store'}"})
    try:
        state = provider.get_state_store("t", "n", "f")
        write_mix(state, 120)
        state.put("é/ü", b"\x00\xff")
        saved = entries_of(state)
        snapshots = SnapshotStore(provider.store, f"file://{tmp_path}/blobs")
        with monkeypatch.context() as m:  # what statekeep wrote before: format 1 in the old layout
            m.setattr(snapshots_module, "FORMAT", 1)
            m.setattr(snapshots_module.entries, "encode",
                      lambda kind, pairs: iter([_legacy_snapshot({"format": 1}, list(pairs))]))
            old = snapshots.create(state)
        assert snapshots.verify(old) == len(saved)
        with open_follower(provider, tmp_path, snapshots=snapshots) as follower:  # bootstraps from it
            assert follower.wait_until_caught_up(30) and entries_of(follower) == saved
        new = snapshots.create(state)  # the one format from now on
        with snapshots.open(new) as (header, _):
            assert header["format"] == 2
        write_mix(state, 60, seed=5)
        assert snapshots.restore(state, old) > 0 and entries_of(state).keys() == saved.keys()
        assert {k: v[:2] for k, v in entries_of(state).items()} == {k: v[:2] for k, v in saved.items()}
    finally:
        provider.close()


# ---- 3. one restore path ---------------------------------------------------------------------------


def test_restore_applies_inherited_state_snapshot_and_segments_in_order():
    groups = 8
    blobs: dict[str, bytes] = {}

    def put(name: str, kind: bytes, pairs, seq: int) -> Blob:
        blobs[name] = b"".join(entries.encode(kind, pairs))
        return Blob.of(BlobRef(name, len(blobs[name]), "-", 0), seq, len(pairs))

    keys = [f"key{i}" for i in range(40)]
    mine = [k for k in keys if key_group(k, groups) in range(0, 4)]
    parent = Lineage((0, 8), put("p-snap", entries.SNAPSHOT, [(k.encode(), records.entry_bytes(0, "bytes", b"p"))
                                                              for k in sorted(keys)], 1),
                     (put("p-seg", entries.SEGMENT, [(keys[0].encode(), records.entry_bytes(1, "bytes", b"q"))], 2),))
    seg1 = put("seg1", entries.SEGMENT, [(mine[1].encode(), records.tombstone_entry(0, 5))], 1)
    seg2 = put("seg2", entries.SEGMENT, [(mine[2].encode(), records.entry_bytes(1, "bytes", b"r"))], 2)
    manifest = Manifest("m", 1, 0, (0, 4), 2, parents=(parent,), segments=(seg1, seg2))

    def state(after=None, key_prefix=b""):
        out: dict[bytes, bytes] = {}
        for _, kind, pairs in restore(manifest, groups, lambda b: blobs[b.url], after=after, key_prefix=key_prefix):
            for key, value in pairs:
                if value[records.TAG_AT] == records.TOMBSTONE_TAG:
                    out.pop(key, None)
                else:
                    out[key] = value
        return out

    want = {k.encode(): records.entry_bytes(0, "bytes", b"p") for k in mine if k != mine[1]}
    want[mine[2].encode()] = records.entry_bytes(1, "bytes", b"r")
    if keys[0] in mine:
        want[keys[0].encode()] = records.entry_bytes(1, "bytes", b"q")
    assert state() == want  # only the groups both own, then the partition's own segments
    assert [b.url for b, _, _ in restore(manifest, groups, lambda b: blobs[b.url], after=1)] == ["seg2"]
    assert state(key_prefix=b"key1") == {k: v for k, v in want.items() if k.startswith(b"key1")}
    blobs["seg2"] = blobs["seg2"][:-2]
    with pytest.raises(CorruptStateError, match="seg2"):
        state()


def test_partition_and_follower_restore_the_same_state(tmp_path):
    shared = f"file://{tmp_path / 'shared'}"
    url = f"local://{tmp_path / 'store'}"

    def provider(cache: str):
        return open_provider("partitioned", {"state_dir": shared, "metadata_url": url,
                                             "cache_dir": str(tmp_path / cache)})

    leader = provider("cache-a")
    try:
        state = leader.get_state_store("t", "n", "f")
        state.ensure_layout(2)
        for i in range(30):
            state.apply_batch({f"k{i}": b"v" * i}, {f"c{i % 7}": 1})
        state.delete("k3")
        for partition in range(2):  # a snapshot, then segments after it
            layout = state.layout(refresh=True)
            part = state.partition(layout, partition)
            manifest = part.manifest()
            part.sync(manifest)
            assert part.snapshot(manifest)
        state.put("after", b"snapshot")
        fresh = provider("cache-b")  # another machine: restores from the snapshots and segments
        try:
            again = fresh.get_state_store("t", "n", "f")
            assert entries_of(again) == entries_of(state)
            with open_follower(leader, tmp_path, snapshots=False) as follower:
                assert follower.wait_until_caught_up(30) and entries_of(follower) == entries_of(state)
        finally:
            fresh.close()
    finally:
        leader.close()
