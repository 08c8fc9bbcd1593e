"""statekeep's contract suites, for any backend or state provider, statekeep's own or a third party's.

Each module is a pytest suite over fixtures; import it into a test module of your own and provide the
fixtures it needs (pytest collects what the import brings in)::

    # conftest.py
    import pytest
    from statekeep.testing.contract.plugin import open_url, provider, store  # noqa: F401 - fixtures

    @pytest.fixture
    def store_url(tmp_path) -> str:             # a fresh, empty namespace of your backend per test
        return f"mystore://127.0.0.1:9999/t-{tmp_path.name}"

    @pytest.fixture
    def target(store_url) -> tuple[str, str]:   # (state provider name, store URL) for the state suites
        return "metadata", store_url            # or (name, URL, more provider config)

    # test_contract.py
    from statekeep.testing.contract.metadata import *  # noqa: F401,F403 - the metadata store contract
    from statekeep.testing.contract.state import *  # noqa: F401,F403 - the state store contract

- :mod:`~statekeep.testing.contract.metadata`: the metadata store contract (PIP-45): versions and
  compare-and-set, sorted children, notifications, ephemeral keys, sequential keys, atomic multi, limits,
  bad input; needs ``store`` and ``open_url`` (from ``store_url``).
- :mod:`~statekeep.testing.contract.state`: the state store contract (PIP-312, batches, scans, counters,
  bad input); needs ``provider`` (from ``target``).
- :mod:`~statekeep.testing.contract.changelog`: the changelog half of it (KIP-813: offsets, epoch,
  compaction, full reads, restores); needs ``provider`` and ``target``.

statekeep runs them on memory://, local://, ZooKeeper and etcd, and the state suites on partition-owned
state too, its state dir on a file URL and on S3 (tests/contract/); a capability a provider declares
absent (:class:`statekeep.state.base.Capability`) is checked to be refused. Needs pytest
(``pip install 'statekeep[test]'``).
"""

from __future__ import annotations

try:
    import pytest  # noqa: F401 - the suites are pytest suites
except ImportError as e:
    from statekeep.errors import MissingDependencyError

    raise MissingDependencyError("statekeep.testing.contract needs pytest: pip install 'statekeep[test]'") from e
