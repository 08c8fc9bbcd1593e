"""Followers as the README shows them: ``FollowerStore.open(provider_or_url, tenant, namespace, name)``
without ``local_dir`` keeps a private temporary copy, removed at close; a follower finds its function
through the function registry's own reading of it (``statekeep.state.catalog``), under the root the
registry was configured with, and uses the state provider the registry names. Real backends."""

from __future__ import annotations

import os

import pytest
from conftest import BACKENDS, need

from statekeep.changelog import FollowerStore
from statekeep.errors import NotFoundError, ReadOnlyStoreError
from statekeep.functions.config.service import FunctionService
from statekeep.metadata import open_store
from statekeep.testing import wait_for

CODE = b"def process(input, context):\n    return input\n"
@pytest.fixture
def provider(leader):
    return leader


def test_follower_without_local_dir_keeps_a_private_copy_removed_at_close(provider):
    state = provider.get_state_store("t", "n", "f")
    state.put("k", b"v")
    state.incr("c", 3)
    first = FollowerStore.open(provider, "t", "n", "f", poll_interval=0.01)
    second = FollowerStore.open(provider, "t", "n", "f", poll_interval=0.01)
    try:
        assert first.local_dir != second.local_dir  # private: each its own
        for follower in (first, second):
            assert os.path.isdir(follower.local_dir)
            assert follower.wait_until_caught_up(60)
            assert follower.get("k") == b"v" and follower.get_counter("c") == 3 and follower.lag == 0
            with pytest.raises(ReadOnlyStoreError):
                follower.put("k", b"x")
    finally:
        first.close()
    assert not os.path.exists(first.local_dir)
    assert os.path.isdir(second.local_dir)  # closing one leaves the other alone
    second.close()
    assert not os.path.exists(second.local_dir)
    assert state.get("k") == b"v"


def test_a_given_local_dir_stays_after_close(provider, tmp_path):
    provider.get_state_store("t", "n", "f").put("k", b"v")
    directory = tmp_path / "mine"
    with FollowerStore.open(provider, "t", "n", "f", local_dir=str(directory)) as follower:
        assert follower.wait_until_caught_up(60)
        assert follower.local_dir == str(directory)
    assert directory.is_dir() and any(directory.iterdir())


@pytest.mark.parametrize("backend", ["local", "zk", "etcd"])
def test_follower_finds_the_function_under_the_registry_root(request, tmp_path, backend):
    url = BACKENDS[backend](request, tmp_path)
    config = {"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"}
    with FunctionService.open(url, functions_root="/apps/functions") as service:
        service.registry.create(config, CODE)
        state = service.registry.state_store("t", "n", "f")
        state.put("k", b"v")
        with pytest.raises(NotFoundError, match="does not exist"):  # not under the default root
            FollowerStore.open(url, "t", "n", "f")
        with FollowerStore.open(url, "t", "n", "f", functions_root="/apps/functions",
                                poll_interval=0.01) as follower:
            assert follower.wait_until_caught_up(60) and follower.get("k") == b"v"
            service.registry.delete("t", "n", "f")
            assert wait_for(lambda: follower.status()["error"] is not None, timeout=30)
            with pytest.raises(NotFoundError, match="deleted"):
                follower.get("k")
        assert not os.path.exists(follower.local_dir)


def test_follower_uses_the_provider_the_registry_names(tmp_path):
    """On local:// the default provider is "embedded"; a function whose config names the "metadata"
    provider (with its own root) is followed there, as the registry itself reads it."""
    url = f"local://{tmp_path / 'data'}"
    storage = {"provider": "metadata", "config": {"metadata_url": url, "root": "/elsewhere"}}
    config = {"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py", "stateStorage": storage}
    with FunctionService.open(url) as service:
        service.registry.create(config, CODE)
        service.registry.state_store("t", "n", "f").put("k", b"named")
        with open_store(url) as store:
            assert store.get_children("/elsewhere")  # the state went to the named provider
        with FollowerStore.open(url, "t", "n", "f", poll_interval=0.01) as follower:
            assert follower.wait_until_caught_up(60) and follower.get("k") == b"named"


def test_server_followers_use_the_servers_functions_root_and_a_temporary_copy(tmp_path):
    need("fastapi")
    from fastapi.testclient import TestClient

    from statekeep.server import ServerConfig, create_app

    url = f"local://{tmp_path / 'data'}"
    config = {"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"}
    with FunctionService.open(url, functions_root="/apps/functions") as service:
        service.registry.create(config, CODE)
        service.registry.state_store("t", "n", "f").put("k", b"v")
    spec = {"tenant": "t", "namespace": "n", "name": "f", "leader": url}  # no local_dir
    app = create_app(ServerConfig(metadata_url="memory://", functions_root="/apps/functions", followers=[spec]))
    with TestClient(app) as client:
        base = "/admin/v3/followers/t/n/f/state"
        assert wait_for(lambda: client.get(f"{base}/k").status_code == 200, timeout=30)
        assert client.get(f"{base}/k").json()["key"] == "k"
        assert client.post(f"{base}/k", json={"stringValue": "x"}).status_code == 405


def test_cli_follower_get_without_local_dir(tmp_path, capsys):
    import json

    from statekeep.cli import main

    url = f"local://{tmp_path / 'data'}"
    config = {"tenant": "t", "namespace": "n", "name": "f", "inputs": ["x"], "py": "f.py"}
    with FunctionService.open(url, functions_root="/apps/functions") as service:
        service.registry.create(config, CODE)
        service.registry.state_store("t", "n", "f").incr("hello", 2)
    argv = ["followers", "get", "--tenant", "t", "--namespace", "n", "--name", "f", "--key", "hello",
            "--leader-store", url]
    assert main(argv) == 1  # not under the default root
    assert "does not exist" in capsys.readouterr().err
    assert main([*argv, "--functions-root", "/apps/functions"]) == 0
    assert json.loads(capsys.readouterr().out)["numberValue"] == 2
