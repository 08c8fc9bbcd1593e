"""Running the ``statekeep`` command in-process, as the CLI tests do."""

from __future__ import annotations

import pytest

from statekeep.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``statekeep ARGV...``: its exit code, stdout and stderr."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def no_client_settings(tmp_path, monkeypatch):
    """Nothing of this machine's own client settings reaches the CLI under test (use with autouse)."""
    for name in ("STATEKEEP_URL", "STATEKEEP_STORE", "STATEKEEP_TOKEN", "STATEKEEP_CLIENT_CONF"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
