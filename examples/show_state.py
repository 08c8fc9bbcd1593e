"""Start ``statekeep standalone`` on a data directory, read a function's state over its REST API, stop it.

    python examples/show_state.py --data-dir DIR --function TENANT/NAMESPACE/NAME --keys K1 K2

Prints each key's counter (``GET .../state/KEY``), then every counter of the function, largest first
(``GET .../state?limit=...``). If the server does not come up, prints its own error and exits 1.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def value(item: dict) -> object:
    return item.get("numberValue", item.get("stringValue", item.get("byteValue")))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--function", required=True)
    parser.add_argument("--keys", nargs="+", required=True)
    args = parser.parse_args()
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    base = f"/admin/v3/functions/{args.function}/state"
    with tempfile.TemporaryFile() as log:
        server = subprocess.Popen([sys.executable, "-m", "statekeep.cli", "standalone", "--data-dir", args.data_dir,
                                   "--port", str(port), "--no-worker"], stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    get(f"{root}/health")
                    break
                except (OSError, ValueError):
                    if server.poll() is not None or time.monotonic() > deadline:
                        log.seek(0)
                        print(f"statekeep standalone did not start:\n{log.read().decode(errors='replace')}",
                              file=sys.stderr)
                        return 1
                    time.sleep(0.1)
            print(f"      statekeep standalone serves {root} (stopped again after these reads)")
            for key in args.keys:
                try:
                    item = get(f"{root}{base}/{key}")
                    print(f"      GET {base}/{key}  ->  {key} = {value(item)}")
                except urllib.error.HTTPError as e:
                    print(f"      GET {base}/{key}  ->  {e.code}: {e.read().decode(errors='replace')}")
            items = get(f"{root}{base}?limit=1000")["items"]
            counts = sorted(((value(i), i["key"]) for i in items), key=lambda c: (-(c[0] or 0), c[1]))
            print(f"      GET {base}?limit=1000  ->  {len(items)} keys: "
                  + ", ".join(f"{key} {count}" for count, key in counts))
        finally:
            server.terminate()
            server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
