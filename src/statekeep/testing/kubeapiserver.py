"""A ``kube-apiserver`` binary built once per machine from the Go module proxy, into a cache outside the
repository: the Kubernetes API server the tests start (``statekeep.testing.servers.start("kubernetes")``).

    kubeapiserver.path()        # CACHE/v1.34.4/kube-apiserver; MissingDependencyError when not built
    kubeapiserver.build()       # builds it when absent (15-30 minutes, needs ``go``); nothing when present

``go install k8s.io/kubernetes/cmd/kube-apiserver@VERSION`` is refused (Kubernetes' ``go.mod`` replaces its
staging modules with local directories), so :func:`build` writes a wrapper module into a temporary directory: a
``main`` package that runs ``app.NewAPIServerCommand()`` as upstream's ``cmd/kube-apiserver`` does, requiring
``k8s.io/kubernetes VERSION`` and every staging module Kubernetes' ``go.mod`` replaces, each at its published
``v0.X.Y`` and replaced by itself at that version. The binary is built beside its final place and renamed into
it, so a cached binary is always complete. The cache is ``$STATEKEEP_KUBE_APISERVER`` (default
``~/.cache/statekeep/kube-apiserver``), one directory per version. Only :func:`build` runs ``go``; the tests
never do (``scripts/kube-apiserver`` builds before them). This module imports only the standard library.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from statekeep.errors import MissingDependencyError

#: the Kubernetes version built
VERSION = "v1.34.4"
#: the environment variable naming the cache directory
ENV = "STATEKEEP_KUBE_APISERVER"
#: the command that builds the binary, named by every error about a missing one
BUILD_COMMAND = "scripts/kube-apiserver"
#: staging modules the module proxy does not serve at Kubernetes' version (and kube-apiserver does not need)
_UNPUBLISHED = frozenset({"k8s.io/sample-cli-plugin", "k8s.io/sample-controller"})

_MAIN = """\
// The kube-apiserver command, as upstream's cmd/kube-apiserver/apiserver.go: written by statekeep's
// statekeep.testing.kubeapiserver to build the binary from the Go module proxy.
package main

import (
\t"os"

\t"k8s.io/component-base/cli"
\t"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
\tos.Exit(cli.Run(app.NewAPIServerCommand()))
}
"""


def cache_dir() -> Path:
    """``$STATEKEEP_KUBE_APISERVER``, else ``~/.cache/statekeep/kube-apiserver``."""
    configured = os.environ.get(ENV)
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "statekeep" / "kube-apiserver"


def binary(version: str = VERSION) -> Path:
    """Where the binary of ``version`` is (or would be) cached."""
    return cache_dir() / version / "kube-apiserver"


def path(version: str = VERSION) -> Path:
    """The built binary of ``version``; MissingDependencyError naming the command that builds it when absent."""
    where = binary(version)
    if not where.is_file():
        raise MissingDependencyError(f"kube-apiserver {version} is not built (no {where}): run {BUILD_COMMAND} "
                                     "(it builds from the Go module proxy once per machine)")
    return where


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise MissingDependencyError("building kube-apiserver needs Go 1.24 or newer (https://go.dev/dl/)")
    return go


def _run(command: list[str], cwd: Path, env: dict[str, str], quiet: bool) -> str:
    done = subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.PIPE if quiet else sys.stderr,
                          stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        tail = "\n".join((done.stdout or "").strip().splitlines()[-20:])
        raise MissingDependencyError(f"building kube-apiserver: {' '.join(command[:3])} exited "
                                     f"{done.returncode}" + (f":\n{tail}" if tail else ""))
    return done.stdout or ""


def staging_modules(go: str, version: str, env: dict[str, str], cwd: Path) -> list[str]:
    """The ``k8s.io/*`` modules Kubernetes ``version``'s ``go.mod`` replaces with its staging directories, less
    those the proxy does not publish."""
    info = json.loads(_run([go, "mod", "download", "-json", f"k8s.io/kubernetes@{version}"], cwd, env, True))
    text = Path(info["GoMod"]).read_text(encoding="utf-8")
    found = re.findall(r"^\s*(k8s\.io/[\w.\-/]+)\s*=>\s*\./staging/", text, re.MULTILINE)
    return sorted(set(found) - _UNPUBLISHED)


def build(version: str = VERSION, quiet: bool = True) -> Path:
    """Build kube-apiserver ``version`` into the cache unless it is there, and return the binary's path. Raises
    MissingDependencyError when ``go`` is missing or the build fails (its output's end in the message); a
    failed build leaves nothing in the cache but Go's own module and build caches."""
    where = binary(version)
    if where.is_file():
        return where
    go = _go()
    staging_version = "v0." + version.removeprefix("v").split(".", 1)[1]  # v1.34.4 -> v0.34.4
    where.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".build.", dir=where.parent))  # beside it: the rename is atomic
    env = {**os.environ, "GO111MODULE": "on", "CGO_ENABLED": "0"}
    try:
        modules = staging_modules(go, version, env, work)  # outside a module: no -mod flag there
        env["GOFLAGS"] = " ".join(filter(None, (os.environ.get("GOFLAGS", ""), "-mod=mod")))
        lines = ["module statekeep.invalid/kube-apiserver", "", "go 1.24", "", "require (",
                 f"\tk8s.io/kubernetes {version}", *(f"\t{m} {staging_version}" for m in modules), ")", "",
                 "replace (", *(f"\t{m} => {m} {staging_version}" for m in modules), ")", ""]
        (work / "go.mod").write_text("\n".join(lines), encoding="utf-8")
        (work / "main.go").write_text(_MAIN, encoding="utf-8")
        _run([go, "mod", "tidy"], work, env, quiet)
        out = work / "kube-apiserver"
        _run([go, "build", "-trimpath", "-ldflags=-s -w", "-o", str(out), "."], work, env, quiet)
        out.chmod(0o755)
        out.rename(where)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return where


def main(argv: list[str] | None = None) -> int:
    """``python -m statekeep.testing.kubeapiserver [VERSION]``: build when absent, print the binary's path and,
    when it built, how long that took."""
    args = sys.argv[1:] if argv is None else argv
    version = args[0] if args else VERSION
    if binary(version).is_file():
        print(binary(version))
        return 0
    print(f"building kube-apiserver {version} from the Go module proxy (once per machine) ...", file=sys.stderr)
    started = time.monotonic()
    try:
        built = build(version, quiet=False)
    except MissingDependencyError as e:
        print(f"kube-apiserver: {e}", file=sys.stderr)
        return 1
    print(f"built in {time.monotonic() - started:.0f} s (load average {os.getloadavg()[0]:.1f} at the end)",
          file=sys.stderr)
    print(built)
    return 0


if __name__ == "__main__":
    sys.exit(main())
