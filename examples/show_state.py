"""Start ``statekeep standalone`` on a data directory, read some state keys over REST, stop it.

    python examples/show_state.py --data-dir DIR --function TENANT/NAMESPACE/NAME --keys K1 K2
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--function", required=True)
    parser.add_argument("--keys", nargs="+", required=True)
    args = parser.parse_args()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "statekeep.cli", "standalone", "--data-dir", args.data_dir,
                               "--port", str(port), "--no-worker"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}/admin/v3/functions/{args.function}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        for key in args.keys:
            with urllib.request.urlopen(f"{base}/state/{key}", timeout=10) as response:
                print(f"GET {base}/state/{key}\n  {json.loads(response.read())}")
        with urllib.request.urlopen(f"{base}/state?limit=5", timeout=10) as response:
            page = json.loads(response.read())
            print(f"GET {base}/state?limit=5\n  {[(i['key'], i.get('numberValue')) for i in page['items']]}")
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
