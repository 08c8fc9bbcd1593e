"""``statekeep standalone`` runs functions created through REST on Spark, stops them on delete, and
starts a function created again under the same name from scratch."""

from __future__ import annotations

import json

import httpx

from statekeep.testing import wait_for

from server_process import ServerProcess, create_function

WORDCOUNT = b"def process(input, context):\n    context.incr_counter(input['word'], 1)\n"


def test_created_function_runs_and_its_state_is_served(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    (inputs / "a.jsonl").write_text("".join(json.dumps({"word": w}) + "\n" for w in ["a", "b", "a"]))
    server = ServerProcess(tmp_path / "data", worker=True)
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            response = create_function(client, "public", "default", "wc", WORDCOUNT, inputs=[str(inputs)],
                                       keyField="word")
            assert response.status_code == 200, response.text

            def count(key: str):
                r = client.get(f"/admin/v3/functions/public/default/wc/state/{key}")
                return r.json().get("numberValue") if r.status_code == 200 else None

            assert wait_for(lambda: count("a") == 2, timeout=240), server.log.name
            assert count("b") == 1
            (inputs / "b.jsonl").write_text(json.dumps({"word": "b"}) + "\n")  # a running query picks it up
            assert wait_for(lambda: count("b") == 2, timeout=120)

            assert client.delete("/admin/v3/functions/public/default/wc").status_code in (200, 204)
            assert client.get("/admin/v3/functions/public/default/wc/state/a").status_code == 404

            # created again under the same name: a new query from its own checkpoint reads every file again
            response = create_function(client, "public", "default", "wc", WORDCOUNT, inputs=[str(inputs)],
                                       keyField="word")
            assert response.status_code == 200, response.text
            assert wait_for(lambda: count("a") == 2 and count("b") == 2, timeout=240), server.log.name
    finally:
        server.stop()
