"""The metadata store contract (after Pulsar's PIP-45; docs/ARCHITECTURE.md), run unchanged on every
backend: needs the fixtures ``store`` and ``open_url`` (:mod:`statekeep.testing.contract`). statekeep's
own backends join through ``BACKENDS`` in its tests' conftest; nothing here names one.
"""

from __future__ import annotations

import threading

import pytest

from statekeep.errors import (
    AlreadyExistsError,
    BadVersionError,
    InvalidArgumentError,
    InvalidPathError,
    NotEmptyError,
    NotFoundError,
    StoreClosedError,
    ValueTooLargeError,
)
from statekeep.testing import in_threads, wait_for
from statekeep.metadata import Check, Delete, MetadataStore, Notification, NotificationType, Put

INVALID_PATHS = ["", "a", "a/b", "//", "/a//b", "/a/", "/.", "/a/./b", "/..", "/a/../b", "/a\x00b",
                 "/a\nb", "/a\x7fb", "/\x1b"]


class TestVersions:
    def test_create_starts_at_zero_and_each_put_adds_one(self, store: MetadataStore):
        assert store.put("/k", b"a").version == 0
        assert store.put("/k", b"b").version == 1
        assert store.put("/k", b"c", 1).version == 2
        result = store.get("/k")
        assert result.value == b"c" and result.stat.version == 2 and result.stat.path == "/k"

    def test_get_absent_is_none(self, store):
        assert store.get("/absent") is None
        assert not store.exists("/absent")

    def test_expected_version_minus_one_requires_absence(self, store):
        store.put("/k", b"a", -1)
        with pytest.raises(AlreadyExistsError):
            store.put("/k", b"b", -1)
        assert isinstance(AlreadyExistsError("x"), BadVersionError)  # a lost create is a lost race
        assert store.get("/k").value == b"a"

    def test_expected_version_must_match(self, store):
        store.put("/k", b"a")
        store.put("/k", b"b")
        with pytest.raises(BadVersionError):
            store.put("/k", b"c", 0)
        assert store.get("/k").value == b"b"
        assert store.put("/k", b"c", 1).version == 2

    @pytest.mark.parametrize("version", [0, 1, 5])
    def test_expected_version_on_absent_key_is_bad_version(self, store, version):
        # Pulsar's MetadataStoreTest (insertionTestWithExpectedVersion): BadVersion, not NotFound, so a
        # compare-and-set loop that catches BadVersionError also covers a key deleted under it
        with pytest.raises(BadVersionError) as raised:
            store.put("/absent/k", b"x", version)
        assert not isinstance(raised.value, NotFoundError)
        assert not store.exists("/absent/k") and not store.exists("/absent")

    def test_expected_version_on_a_deleted_key_is_bad_version(self, store):
        stat = store.put("/k", b"a")
        store.delete("/k")
        with pytest.raises(BadVersionError):
            store.put("/k", b"b", stat.version)
        assert not store.exists("/k")

    def test_stat_times_are_plausible(self, store):
        first = store.put("/k", b"a")
        second = store.put("/k", b"b")
        assert second.created_ms == first.created_ms
        assert second.modified_ms >= first.modified_ms >= first.created_ms >= 0
        assert not first.ephemeral


class TestDelete:
    def test_delete(self, store):
        store.put("/k", b"a")
        store.delete("/k")
        assert store.get("/k") is None

    def test_delete_absent_raises_not_found(self, store):
        with pytest.raises(NotFoundError):
            store.delete("/absent")
        with pytest.raises(NotFoundError):
            store.delete("/absent", 0)

    def test_delete_with_version(self, store):
        store.put("/k", b"a")
        store.put("/k", b"b")
        with pytest.raises(BadVersionError):
            store.delete("/k", 0)
        assert store.exists("/k")
        store.delete("/k", 1)
        assert not store.exists("/k")

    def test_delete_with_children_fails(self, store):
        store.put("/p", b"")
        store.put("/p/c", b"")
        with pytest.raises(NotEmptyError):
            store.delete("/p")
        assert store.exists("/p") and store.exists("/p/c")

    def test_delete_recursive(self, store):
        for path in ["/r/a/x", "/r/a/y", "/r/b", "/rest"]:
            store.put(path, path.encode())
        store.delete_recursive("/r")
        for path in ["/r", "/r/a", "/r/a/x", "/r/b"]:
            assert not store.exists(path), path
        assert store.get("/rest").value == b"/rest"  # a sibling sharing the prefix survives
        store.delete_recursive("/r")  # absent: a no-op


class TestChildren:
    def test_children_sorted_and_immediate_only(self, store):
        for name in ["b", "a", "c", "a-1", "B"]:
            store.put(f"/p/{name}", b"")
        store.put("/p/a/deep", b"")
        store.put("/pp", b"")
        store.put("/p-sibling/x", b"")
        assert store.get_children("/p") == sorted(["b", "a", "c", "a-1", "B"])
        assert store.get_children("/p/a") == ["deep"]

    def test_children_of_absent_parent_is_empty(self, store):
        assert store.get_children("/nothing/here") == []

    def test_root_children(self, store):
        store.put("/x", b"")
        store.put("/y/z", b"")
        assert store.get_children("/") == ["x", "y"]

    def test_put_creates_missing_ancestors_as_empty_keys(self, store):
        store.put("/a/b/c", b"leaf")
        for ancestor in ("/a", "/a/b"):
            result = store.get(ancestor)
            assert result.value == b"" and result.stat.version == 0 and not result.stat.ephemeral
        assert store.get_children("/a") == ["b"]
        store.delete("/a/b/c")
        assert store.exists("/a/b")  # deleting a child leaves its parent
        with pytest.raises(NotEmptyError):
            store.delete("/a")

    def test_children_after_delete(self, store):
        store.put("/p/a", b"")
        store.put("/p/b", b"")
        store.delete("/p/a")
        assert store.get_children("/p") == ["b"]

    def test_a_listing_then_a_change_then_a_listing_shows_the_change(self, store):
        store.put("/p/b", b"")
        assert store.get_children("/p") == ["b"]
        listed = store.get_children("/p")
        listed.append("mine")  # the caller's list: the store's next listing is its own
        assert store.get_children("/p") == ["b"]
        store.put("/p/a", b"")
        assert store.get_children("/p") == ["a", "b"]
        store.multi([Delete("/p/b")])
        assert store.get_children("/p") == ["a"]

    def test_unicode_names(self, store):
        store.put("/p/é", b"1")
        store.put("/p/z", b"2")
        store.put("/p/Ω", b"3")
        assert store.get_children("/p") == sorted(["é", "z", "Ω"])
        assert store.get("/p/Ω").value == b"3"


class TestEphemeralAndSequential:
    def test_ephemeral_key_goes_with_its_session(self, open_url):
        owner, other = open_url(), open_url()
        stat = owner.put("/eph", b"x", ephemeral=True)
        assert stat.ephemeral and stat.created_by_self
        seen = other.get("/eph")
        assert seen.stat.ephemeral and not seen.stat.created_by_self
        owner.close()
        assert wait_for(lambda: not other.exists("/eph"))

    def test_ephemeral_key_has_no_children(self, store):
        store.put("/eph-parent", b"", ephemeral=True)
        with pytest.raises(InvalidArgumentError):
            store.put("/eph-parent/child", b"")
        with pytest.raises(InvalidArgumentError):
            store.put("/eph-parent/a/b", b"")
        assert store.get_children("/eph-parent") == []

    def test_persistent_key_survives_its_writer(self, open_url):
        writer, other = open_url(), open_url()
        writer.put("/persistent", b"x")
        writer.close()
        assert other.get("/persistent").value == b"x"

    def test_sequential_keys_are_unique_and_increasing(self, store):
        paths = [store.put("/q/item-", b"%d" % i, sequential=True).path for i in range(5)]
        assert len(set(paths)) == 5
        assert paths == sorted(paths)
        for path in paths:
            assert path.startswith("/q/item-") and len(path) == len("/q/item-") + 10
            assert path[-10:].isdigit()
        assert store.get_children("/q") == [p.rsplit("/", 1)[1] for p in paths]

    def test_sequence_numbers_are_not_reused_after_delete(self, store):
        first = store.put("/q/n-", b"", sequential=True).path
        store.delete(first)
        second = store.put("/q/n-", b"", sequential=True).path
        assert second > first

    def test_ephemeral_sequential(self, open_url):
        owner, other = open_url(), open_url()
        stat = owner.put("/q/e-", b"", ephemeral=True, sequential=True)
        assert stat.ephemeral
        owner.close()
        assert wait_for(lambda: not other.exists(stat.path))


class TestMulti:
    def test_all_applied(self, store):
        store.put("/m/a", b"1")
        store.put("/m/c", b"3")
        stats = store.multi([Put("/m/b", b"2", -1), Put("/m/a", b"11", 0), Check("/m/c", 0), Delete("/m/c")])
        assert stats[0].version == 0 and stats[1].version == 1
        assert stats[2] is None and stats[3] is None
        assert store.get("/m/a").value == b"11" and store.get("/m/b").value == b"2"
        assert not store.exists("/m/c")

    def test_none_applied_when_one_fails(self, store):
        store.put("/m/a", b"1")
        with pytest.raises(BadVersionError):
            store.multi([Put("/m/new", b"x"), Put("/m/a", b"2"), Check("/m/a", 7)])
        assert not store.exists("/m/new")
        assert store.get("/m/a").value == b"1" and store.get("/m/a").stat.version == 0

    @pytest.mark.parametrize("failing", [
        Delete("/m/absent"),
        Put("/m/a", b"", -1),
        Check("/m/absent", 0),
        Check("/m/a", -1),
    ])
    def test_each_failure_kind_writes_nothing(self, store, failing):
        store.put("/m/a", b"1")
        with pytest.raises((NotFoundError, BadVersionError)):
            store.multi([Put("/m/x", b"x", -1), Put("/m/y", b"2"), failing])
        assert store.get("/m/a").value == b"1"
        assert not store.exists("/m/x") and not store.exists("/m/y")

    def test_put_with_version_on_absent_key_is_bad_version(self, store):
        store.put("/m/a", b"1")
        for ops in ([Put("/m/absent", b"x", 0)], [Put("/m/b", b"2", -1), Put("/m/absent", b"x", 3)],
                    [Put("/m/a", b"2", 0), Put("/m/no/such/key", b"x", 0)]):
            with pytest.raises(BadVersionError) as raised:
                store.multi(ops)
            assert not isinstance(raised.value, NotFoundError)
        assert store.get("/m/a").value == b"1" and store.get("/m/a").stat.version == 0
        assert store.get_children("/m") == ["a"]

    def test_delete_and_check_of_absent_key_stay_not_found(self, store):
        with pytest.raises(NotFoundError):
            store.multi([Delete("/m/absent")])
        with pytest.raises(NotFoundError):
            store.multi([Check("/m/absent", 0)])

    def test_checks_among_versioned_writes(self, store):
        """The shape a compare-and-set writer sends (versioned writes, checks, a sequential append),
        which a backend may send without reading first: the same results as any other multi."""
        store.put("/m/a", b"1")
        store.put("/m/c", b"3")
        stats = store.multi([Check("/m/c", 0), Put("/m/a", b"2", 0), Put("/m/log/r", b"x", sequential=True)])
        assert stats[0] is None and stats[1].version == 1 and store.get("/m/a").value == b"2"
        for failing in (Check("/m/c", 5), Check("/m/absent", 0)):
            with pytest.raises((BadVersionError, NotFoundError)):
                store.multi([failing, Put("/m/a", b"3", 1), Put("/m/log/r", b"y", sequential=True)])
        assert store.get("/m/a").value == b"2" and len(store.get_children("/m/log")) == 1
        store.multi([Put("/m/a", b"4", 1), Check("/m/a", 2)])  # a check sees the multi's earlier writes
        with pytest.raises(BadVersionError):
            store.multi([Put("/m/a", b"5", 2), Check("/m/a", 2)])
        assert store.get("/m/a").value == b"4" and store.get("/m/a").stat.version == 2

    def test_empty_multi(self, store):
        assert store.multi([]) == []

    def test_writing_one_path_twice_is_refused(self, store):
        with pytest.raises(InvalidArgumentError):
            store.multi([Put("/m/x", b"1"), Put("/m/x", b"2")])
        with pytest.raises(InvalidArgumentError):
            store.multi([Put("/m/y", b"1"), Delete("/m/y")])
        assert not store.exists("/m/x") and not store.exists("/m/y")

    def test_bad_op_type_writes_nothing(self, store):
        with pytest.raises(InvalidArgumentError):
            store.multi([Put("/m/x", b"x"), "not an op"])
        assert not store.exists("/m/x")

    def test_creates_under_parents_the_same_multi_creates(self, store):
        # the shape of a bulk copy: parents before children, create-only, and an upsert of a progress key
        store.put("/j", b"0")
        stats = store.multi([Put("/c/a", b"1", -1), Put("/c/a/b", b"2", -1), Put("/c/a/b/c", b"3", -1),
                             Put("/c/d", b"4", -1), Put("/j", b"1")])
        assert [s.version for s in stats] == [0, 0, 0, 0, 1]
        assert store.get_children("/c") == ["a", "d"] and store.get_children("/c/a/b") == ["c"]
        assert [store.get(p).value for p in ("/c/a", "/c/a/b", "/c/a/b/c", "/c/d")] == [b"1", b"2", b"3", b"4"]
        for existing in ("/c/a/b", "/c/a"):  # a key that exists, also one a multi has seen as a parent
            with pytest.raises(AlreadyExistsError):
                store.multi([Put("/n/x", b"", -1), Put("/n/x/y", b"", -1), Put(existing, b"again", -1),
                             Put("/j", b"2")])
        assert not store.exists("/n") and store.get("/c/a/b").value == b"2" and store.get("/j").value == b"1"
        with pytest.raises(InvalidArgumentError):  # an ephemeral key has no children, also within one multi
            store.multi([Put("/e", b"", -1, ephemeral=True), Put("/e/c", b"", -1)])
        assert not store.exists("/e")

    def test_a_listing_shows_each_multi_whole_while_another_client_writes(self, open_url):
        """A multi is isolated from readers: while one client appends batches of sequential children (a
        changelog's shape), another client's listings only ever show whole batches, and only a prefix of the
        children in the end (a later child without an earlier one would make a follower skip the earlier)."""
        writer, reader = open_url(), open_url()
        writer.put("/log", b"")
        per, batches = 12, 25
        listings: list[list[str]] = []
        done = threading.Event()

        def write() -> None:
            try:
                for i in range(batches):
                    writer.multi([Put("/log/r", b"%d" % i, sequential=True) for _ in range(per)])
            finally:
                done.set()

        def read() -> None:
            while not done.is_set():
                listings.append(reader.get_children("/log"))

        in_threads(lambda role: role(), [(write,), (read,)])
        final = reader.get_children("/log")
        assert len(final) == per * batches
        torn = [names for names in listings if len(names) % per or names != final[:len(names)]]
        missing = sorted(set(final[:final.index(torn[0][-1]) + 1]) - set(torn[0])) if torn else []
        assert not torn, f"{len(torn)} of {len(listings)} listings showed part of a multi, e.g. one without {missing}"

    def test_upsert_of_a_key_another_client_deleted_creates_it_again(self, open_url):
        writer, other = open_url(), open_url()
        for _ in range(2):  # a key this client has written before
            writer.multi([Put("/u/k", b"1"), Put("/u/d/child", b"c")])
        other.delete("/u/k")
        other.delete_recursive("/u/d")
        stats = writer.multi([Put("/u/k", b"2"), Put("/u/d/child", b"c2")])
        assert [s.version for s in stats] == [0, 0]
        assert writer.get("/u/k").value == b"2" and other.get("/u/d/child").value == b"c2"
        other.delete("/u/k")
        writer.delete("/u/d/child")
        writer.delete("/u/d")
        stats = writer.multi([Put("/u/k", b"3"), Put("/u/d", b"d")])
        assert [s.version for s in stats] == [0, 0] and other.get("/u/d").value == b"d"


class TestNotifications:
    def _collect(self, store) -> list[Notification]:
        events: list[Notification] = []
        store.add_listener(events.append)
        return events

    def test_created_modified_deleted_children_changed(self, open_url):
        writer = open_url()
        observer = open_url()
        mine, theirs = self._collect(writer), self._collect(observer)
        writer.put("/n/k", b"1")
        writer.put("/n/k", b"2")
        writer.delete("/n/k")
        expected = [
            Notification(NotificationType.Created, "/n/k"),
            Notification(NotificationType.ChildrenChanged, "/n"),
            Notification(NotificationType.Modified, "/n/k"),
            Notification(NotificationType.Deleted, "/n/k"),
            Notification(NotificationType.ChildrenChanged, "/n"),
        ]
        for events in (mine, theirs):
            assert wait_for(lambda: all(e in events for e in expected)), events
            per_key = [e for e in events if e.path == "/n/k"]
            assert [e.type for e in per_key] == [NotificationType.Created, NotificationType.Modified,
                                                 NotificationType.Deleted]

    def test_order_per_key_under_many_updates(self, open_url):
        writer, observer = open_url(), open_url()
        events = self._collect(observer)
        writer.put("/order", b"0")
        for i in range(1, 50):
            writer.put("/order", b"%d" % i)
        assert wait_for(lambda: sum(e.path == "/order" for e in events) >= 50)
        types = [e.type for e in events if e.path == "/order"]
        assert types[0] is NotificationType.Created and set(types[1:]) == {NotificationType.Modified}

    def test_unsubscribe(self, store):
        events: list[Notification] = []
        subscription = store.add_listener(events.append)
        modified = threading.Event()  # a sentinel: a listener that stays subscribed
        store.add_listener(lambda n: n.path == "/u/b" and n.type is NotificationType.Modified and modified.set())
        store.put("/u/a", b"")
        assert wait_for(lambda: any(e.path == "/u/a" for e in events))  # the put's last event (after /u's)
        subscription.close()
        count = len(events)
        store.put("/u/b", b"")
        store.put("/u/b", b"again")
        # per-key order: once the Modified of /u/b reached a listener, its Created was dispatched to all
        assert modified.wait(30)
        assert len(events) == count

    def test_no_delivery_after_close(self, store):
        held, release, passed_on = threading.Event(), threading.Event(), threading.Event()

        def holder(n):  # keeps the dispatcher inside the event of /q/a
            if n.path == "/q/a":
                held.set()
                release.wait(30)

        store.add_listener(holder)
        events: list[Notification] = []
        subscription = store.add_listener(events.append)
        store.add_listener(lambda n: n.path == "/q/a" and passed_on.set())
        store.put("/q/a", b"")
        assert held.wait(30)  # /q/a is posted and not yet given to events.append
        subscription.close()
        release.set()
        assert passed_on.wait(30)  # delivery went on to the listener after it
        assert [e for e in events if e.path == "/q/a"] == []

    def test_failing_listener_does_not_stop_others(self, store):
        events: list[Notification] = []

        def broken(_):
            raise RuntimeError("listener bug")

        store.add_listener(broken)
        store.add_listener(events.append)
        store.put("/f/a", b"")
        store.put("/f/b", b"")
        assert wait_for(lambda: len([e for e in events if e.type is NotificationType.Created]) >= 2)


class TestBadInput:
    @pytest.mark.parametrize("path", INVALID_PATHS)
    def test_invalid_paths_raise_and_write_nothing(self, store, path):
        for call in (lambda: store.put(path, b"x"), lambda: store.get(path), lambda: store.delete(path),
                     lambda: store.get_children(path), lambda: store.exists(path),
                     lambda: store.multi([Put(path, b"x")])):
            with pytest.raises(InvalidPathError):
                call()
        assert store.get_children("/") == []

    @pytest.mark.parametrize("path", [b"/bytes", ["/a"], None, 1])
    def test_non_str_path(self, store, path):
        for call in (store.get, store.exists, store.get_children, lambda p: store.put(p, b"")):
            with pytest.raises(InvalidPathError):
                call(path)  # type: ignore[arg-type]

    def test_root_cannot_be_written_or_deleted(self, store):
        with pytest.raises(InvalidPathError):
            store.put("/", b"x")
        with pytest.raises(InvalidPathError):
            store.delete("/")

    @pytest.mark.parametrize("value", ["text", 1, None, ["a"]])
    def test_value_must_be_bytes(self, store, value):
        with pytest.raises(InvalidArgumentError):
            store.put("/k", value)  # type: ignore[arg-type]
        assert not store.exists("/k")

    @pytest.mark.parametrize("version", [-2, -100, "1", 1.0, True])
    def test_bad_versions(self, store, version):
        with pytest.raises(InvalidArgumentError):
            store.put("/k", b"x", version)  # type: ignore[arg-type]
        assert not store.exists("/k")

    def test_oversized_value_rejected_with_a_pointer_to_handles(self, store):
        big = b"x" * (store.max_value_size + 1)
        with pytest.raises(ValueTooLargeError, match="StateHandleStore"):
            store.put("/big", big)
        with pytest.raises(ValueTooLargeError):
            store.multi([Put("/ok", b"fine"), Put("/big", big)])
        assert not store.exists("/big") and not store.exists("/ok")

    def test_value_at_the_limit_is_accepted(self, open_url):
        store = open_url(max_value_size=64 * 1024)
        assert store.max_value_size == 64 * 1024
        store.put("/edge", b"e" * store.max_value_size)
        assert len(store.get("/edge").value) == store.max_value_size
        with pytest.raises(ValueTooLargeError):
            store.put("/edge2", b"e" * (store.max_value_size + 1))

    def test_closed_store_raises(self, open_url):
        store = open_url()
        store.close()
        store.close()  # idempotent
        with pytest.raises(StoreClosedError):
            store.get("/k")
        with pytest.raises(StoreClosedError):
            store.put("/k", b"")


class TestValuesAndPersistence:
    def test_arbitrary_binary_values(self, store):
        values = [b"", b"\x00", bytes(range(256)), b"\xff" * 1000, "é".encode()]
        for i, value in enumerate(values):
            store.put(f"/bin/{i}", value)
        for i, value in enumerate(values):
            assert store.get(f"/bin/{i}").value == value

    def test_bytearray_and_memoryview_accepted(self, store):
        store.put("/ba", bytearray(b"ab"))
        store.put("/mv", memoryview(b"cd"))
        assert store.get("/ba").value == b"ab" and store.get("/mv").value == b"cd"

    def test_persists_across_close_and_reopen(self, open_url, store_url):
        store = open_url()
        if "persistent" not in store.capabilities:
            pytest.skip(f"{store.scheme}:// keeps nothing after close by design")
        store.put("/keep/a", b"1")
        store.put("/keep/a", b"2")
        store.close()
        again = open_url(store_url)
        result = again.get("/keep/a")
        assert result.value == b"2" and result.stat.version == 1
        assert again.get_children("/keep") == ["a"]

    def test_concurrent_cas_increments_are_exact(self, open_url):
        stores = [open_url() for _ in range(4)]
        stores[0].put("/counter", (0).to_bytes(8, "big"))
        successes = []

        def worker(s: MetadataStore) -> None:
            done = 0
            for _ in range(25):
                while True:
                    current = s.get("/counter")
                    value = int.from_bytes(current.value, "big") + 1
                    try:
                        s.put("/counter", value.to_bytes(8, "big"), current.stat.version)
                        done += 1
                        break
                    except BadVersionError:
                        continue
            successes.append(done)

        in_threads(worker, [(s,) for s in stores])
        final = stores[0].get("/counter")
        assert int.from_bytes(final.value, "big") == sum(successes) == 100
        assert final.stat.version == 100


def _number(path: str) -> int:
    return int(path[-10:])


class TestSequenceCounters:
    """``last_sequence``/``raise_sequence``: what a copy of a tree needs so that numbers are not handed out twice."""

    def test_last_sequence_bounds_the_numbers_handed_out(self, store):
        assert store.last_sequence("/seq") == 0
        numbers = [_number(store.put("/seq/a-", b"", sequential=True).path) for _ in range(3)]
        store.delete(f"/seq/a-{numbers[-1]:010d}")
        last = store.last_sequence("/seq")
        assert last >= max(numbers)
        store.raise_sequence("/seq", last)
        assert _number(store.put("/seq/a-", b"", sequential=True).path) > last

    def test_raise_makes_later_numbers_greater(self, store):
        first = _number(store.put("/seq/a-", b"", sequential=True).path)
        target = first + 1500  # over one ZooKeeper transaction's worth of scratch children
        raised = store.raise_sequence("/seq", target)
        assert raised >= target
        assert store.last_sequence("/seq") >= target
        after = [_number(store.put("/seq/b-", b"", sequential=True).path) for _ in range(2)]
        assert target < after[0] < after[1]
        assert store.get_children("/seq") == [f"a-{first:010d}"] + [f"b-{n:010d}" for n in after]  # no scratch left

    def test_raise_never_lowers_and_repeats_harmlessly(self, store):
        store.put("/seq/x", b"")
        assert store.raise_sequence("/seq", 40) >= 40
        assert store.raise_sequence("/seq", 40) >= 40
        assert store.raise_sequence("/seq", 3) >= 40
        assert _number(store.put("/seq/a-", b"", sequential=True).path) > 40

    def test_raise_under_the_root(self, store):
        store.raise_sequence("/", 25)
        assert _number(store.put("/r-", b"", sequential=True).path) > 25

    def test_raise_by_another_client_is_honoured(self, open_url):
        writer, other = open_url(), open_url()
        before = _number(writer.put("/seq/a-", b"", sequential=True).path)  # the writer now knows the counter
        other.raise_sequence("/seq", before + 30)
        assert _number(writer.put("/seq/a-", b"", sequential=True).path) > before + 30
        assert writer.last_sequence("/seq") > before + 30

    def test_bad_input_raises_and_writes_nothing(self, store):
        with pytest.raises(NotFoundError):
            store.raise_sequence("/absent", 5)
        assert not store.exists("/absent") and store.last_sequence("/absent") == 0
        store.put("/seq/x", b"")
        for bad in (-1, True, "3", 1.5, None):
            with pytest.raises(InvalidArgumentError):
                store.raise_sequence("/seq", bad)
        assert store.get_children("/seq") == ["x"]
        for path in INVALID_PATHS:
            with pytest.raises(InvalidPathError):
                store.raise_sequence(path, 1)
            with pytest.raises(InvalidPathError):
                store.last_sequence(path)
        assert _number(store.put("/seq/a-", b"", sequential=True).path) < 5  # nothing was raised

    def test_closed_store_refuses(self, open_url):
        store = open_url()
        store.close()
        with pytest.raises(StoreClosedError):
            store.last_sequence("/seq")
        with pytest.raises(StoreClosedError):
            store.raise_sequence("/seq", 1)
