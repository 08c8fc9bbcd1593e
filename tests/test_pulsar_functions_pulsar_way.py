"""Pulsar Python functions created the Pulsar way (issue 24), without Spark: function files shaped like
Pulsar's, created only with pulsar-admin's flags through the CLI and REST of a real server, triggered
as ``pulsar-admin functions trigger`` would; statekeep's topics; import errors; the same files with
pulsar-client hidden (statekeep's stand-ins). The Spark side is in test_pulsar_functions_spark.py."""

from __future__ import annotations

import http.server
import importlib.metadata
import json
import subprocess
import sys
import textwrap
import threading

import httpx
import pytest

from support.cli import no_client_settings, run  # noqa: F401 - a fixture, used below

pytestmark = pytest.mark.usefixtures("no_client_settings")

IN, OUT = "persistent://public/default/in", "persistent://public/default/out"

FILES = {
    # Pulsar's exclamation example, native and module-level: --classname names the module
    "exclamation.py": '''
def process(input):
    return input + "!"
''',
    # a custom object through a pulsar.SerDe of the function's own file, user config, a counter
    "shapes.py": '''
from pulsar import Function, SerDe


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y


class PointSerDe(SerDe):
    def serialize(self, point):
        return f"{point.x},{point.y}".encode()

    def deserialize(self, data):
        x, y = data.decode().split(",")
        return Point(int(x), int(y))


class Scale(Function):
    def process(self, input, context):
        assert context.get_output_serde_class_name() == "shapes.PointSerDe"
        factor = int(context.get_user_config_value("factor"))
        context.incr_counter("points", 1)
        return Point(input.x * factor, input.y * factor)
''',
    # publish with message_conf, logging to the log topic, a secret, a counter
    "router.py": '''
from pulsar import Function


class Router(Function):
    def process(self, input, context):
        seen = context.incr_counter(input, 1)
        context.get_logger().info("routing %s (seen %d)", input, seen)
        context.publish("persistent://public/default/routed", input.upper(), message_conf={
            "properties": {"seen": str(seen), "token": context.get_secret("ROUTER_TOKEN")},
            "partition_key": input, "event_timestamp": 1700000000000})
''',
    # a typed record of pulsar.schema, decoded from JSON (customSchemaInputs)
    "users.py": '''
from pulsar.schema import Integer, Record, String


class User(Record):
    name = String()
    age = Integer()


def process(input, context):
    assert isinstance(input, User), type(input)
    return f"{input.name} is {input.age}"
''',
    # two inputs, one with a custom serde: trigger's --topic picks the input
    "which.py": '''
from pulsar import SerDe


class Reversed(SerDe):
    def serialize(self, value):
        return value[::-1].encode()

    def deserialize(self, data):
        return data.decode()[::-1]


def process(input, context):
    return f"{input}@{context.get_current_message_topic_name()}"
''',
    "needs_missing.py": '''
import statekeep_no_such_module_24

def process(input):
    return input
''',
    "fails_at_import.py": '''
import os
VALUE = os.environ["STATEKEEP_NO_SUCH_VARIABLE_24"]

def process(input):
    return input
''',
    "raises.py": '''
def process(input, context):
    raise ValueError("no " + input)
''',
}

CREATE = {  # pulsar-admin functions create flags, nothing statekeep-only
    "exclamation": ["--py", "exclamation.py", "--classname", "exclamation", "--inputs", IN, "--output", OUT],
    "shapes": ["--py", "shapes.py", "--classname", "shapes.Scale", "--user-config", '{"factor": 2}',
               "--custom-serde-inputs", json.dumps({"persistent://public/default/points": "shapes.PointSerDe"}),
               "--output-serde-classname", "shapes.PointSerDe"],
    "router": ["--py", "router.py", "--classname", "router.Router", "--inputs", "words",
               "--secrets", '{"ROUTER_TOKEN": "ROUTER_TOKEN"}', "--log-topic", "persistent://public/default/logs"],
    "users": ["--py", "users.py", "--classname", "users",
              "--custom-schema-inputs", json.dumps({"persistent://public/default/users": "users.User"})],
    "raises": ["--py", "raises.py", "--inputs", IN],
    "which": ["--py", "which.py", "--classname", "which", "--inputs", IN,
              "--custom-serde-inputs", json.dumps({"persistent://public/default/rev": "which.Reversed"})],
}


@pytest.fixture(scope="module")
def server(server_process, tmp_path_factory):
    import os

    os.environ["ROUTER_TOKEN"] = "s3cret"  # the server's environment: the default secrets provider reads it
    try:
        srv = server_process(tmp_path_factory.mktemp("pulsar-way") / "data")
    finally:
        del os.environ["ROUTER_TOKEN"]
    yield srv
    srv.stop()


@pytest.fixture
def files(tmp_path, monkeypatch):
    for name, text in FILES.items():
        (tmp_path / name).write_text(text.lstrip())
    monkeypatch.chdir(tmp_path)
    return tmp_path


def topic(data_dir, name: str) -> list[dict]:
    """The topic's messages in publish order (as ``topics consume`` reads them)."""
    from statekeep.functions.messaging import topics

    return list(topics.read(str(data_dir / "topics"), name))


def test_pulsar_admin_created_functions_answer_trigger_as_pulsar_does(server, files, capsys):
    url = ["--url", server.url]
    for name, flags in CREATE.items():
        code, out, err = run(capsys, "functions", "create", "--tenant", "public", "--namespace", "default",
                             "--name", name, *flags, *url)
        assert code == 0, err

    def trigger(name: str, value: str) -> tuple[int, str, str]:
        return run(capsys, "functions", "trigger", "--fqfn", f"public/default/{name}", "--trigger-value", value, *url)

    assert trigger("exclamation", "hello world")[1] == "hello world!\n"  # a str, as Pulsar's default serde
    assert trigger("shapes", "1,2")[1] == "2,4\n"  # deserialized and serialized by the function's own SerDe
    assert trigger("users", '{"name": "ann", "age": 3}')[1] == "ann is 3\n"  # a pulsar.schema record
    assert trigger("router", "tick")[0] == trigger("router", "tick")[0] == 0
    assert trigger("which", "abc")[1] == f"abc@{IN}\n"  # the first input, Pulsar's default serde
    assert run(capsys, "functions", "trigger", "--fqfn", "public/default/which", "--trigger-value", "abc",
               "--topic", "persistent://public/default/rev", *url)[1] == "cba@persistent://public/default/rev\n"
    code, out, err = trigger("raises", "way")  # the user's exception is the answer: a 400 with its error
    assert code == 2 and "ValueError: no way" in err
    client = httpx.Client(base_url=server.url + "/admin/v3/functions/public/default", timeout=30)
    assert client.get("/shapes/state/points").json()["numberValue"] == 1
    assert client.get("/router/state/tick").json()["numberValue"] == 2
    # publish kept its message_conf; the log topic got the function's log records
    routed = topic(server.data_dir, "routed")
    assert [(m["value"], m["key"], m["properties"], m["eventTime"]) for m in routed] == [
        ("TICK", "tick", {"seen": "1", "token": "s3cret"}, 1700000000000),
        ("TICK", "tick", {"seen": "2", "token": "s3cret"}, 1700000000000)]
    logs = topic(server.data_dir, "logs")
    assert [m["value"] for m in logs] == ["routing tick (seen 1)", "routing tick (seen 2)"]
    assert {m["properties"]["level"] for m in logs} == {"INFO"}
    assert {m["properties"]["function"] for m in logs} == {"public/default/router"}
    assert all(m["properties"]["functionId"] and isinstance(m["eventTime"], int) for m in logs)
    # as stored: pulsar-admin's fields, the serde inputs merged into inputs as Pulsar does
    got = client.get("/shapes").json()
    assert got["inputs"] == ["persistent://public/default/points"]
    assert got["outputSerdeClassName"] == "shapes.PointSerDe"
    assert client.get("/router").json()["logTopic"] == "persistent://public/default/logs"
    # the console lists the topics and shows a topic's messages with their metadata
    ui = httpx.Client(base_url=server.url, timeout=30)
    listed = {t["name"]: t["messages"] for t in ui.get("/ui/api/topics").json()}
    assert listed["persistent://public/default/routed"] == 2 and listed["persistent://public/default/logs"] == 2
    shown = ui.get("/ui/api/topic", params={"name": "routed", "limit": 1}).json()
    assert shown["total"] == 2 and shown["messages"][0]["properties"] == {"seen": "2", "token": "s3cret"}
    assert ui.get("/ui/api/topic", params={"name": "a/b"}).status_code == 400
    assert ui.get("/ui/topics").status_code == 200


def test_an_import_failure_is_a_400_naming_module_and_file(server, files, capsys):
    url = ["--url", server.url]
    code, out, err = run(capsys, "functions", "create", "--name", "missing", "--py", "needs_missing.py",
                         "--inputs", IN, *url)
    assert code == 2 and "needs_missing.py:1" in err and "statekeep_no_such_module_24" in err, err
    client = httpx.Client(base_url=server.url + "/admin/v3/functions/public/default", timeout=30)
    assert "missing" not in httpx.get(f"{server.url}/admin/v3/functions/public/default").json()  # not created
    # one that only fails when run (a top-level error): created, and trigger answers 400 naming the file
    assert run(capsys, "functions", "create", "--name", "late", "--py", "fails_at_import.py", "--inputs", IN,
               *url)[0] == 0
    r = client.post("/late/trigger", files={"data": (None, b"x")})
    assert r.status_code == 400, r.text
    assert "fails_at_import.py:2" in r.json()["reason"] and "KeyError" in r.json()["reason"]
    # a serde class the config names must exist: in the function's own file, or Pulsar's serde module
    for flags, says in ((["--custom-serde-inputs", json.dumps({IN: "shapes.Nope"})], "customSerdeInputs["),
                        (["--inputs", IN, "--output-serde-classname", "serde.JsonSerDe"], "no class 'JsonSerDe'")):
        code, out, err = run(capsys, "functions", "create", "--name", "badserde", "--py", "shapes.py",
                             "--classname", "shapes.Scale", *flags, *url)
        assert code == 2 and says in err, err
    # directly on a store, the same refusal
    code, out, err = run(capsys, "functions", "create", "--name", "missing", "--py", "needs_missing.py",
                         "--inputs", IN, "--data-dir", str(files / "direct"))
    assert code == 2 and "cannot import module 'statekeep_no_such_module_24'" in err


class _Answer500(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = json.dumps({"reason": "internal server error"}).encode()
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_the_cli_says_what_a_server_500_said_and_never_that_the_store_is_unavailable(capsys):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answer500)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, out, err = run(capsys, "functions", "get", "--name", "f", "--url",
                             f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
    assert code == 1 and "ServerError: HTTP 500: internal server error" in err
    assert "StoreUnavailable" not in err


@pytest.mark.parametrize("flags, field", [
    (["--jar", "f.jar"], "jar"), (["--subs-name", "s"], "subName"), (["--auto-ack", "false"], "autoAck"),
    (["--retain-ordering"], "retainOrdering"), (["--cpu", "2"], "resources"),
    (["--schema-type", "AVRO"], "outputSchemaType"),
    (["--input-specs", '{"in": {"receiverQueueSize": 5}}'], "inputSpecs"),
])
def test_every_pulsar_admin_flag_is_taken_and_a_value_statekeep_cannot_honour_is_refused_by_name(
        tmp_path, capsys, flags, field):
    (tmp_path / "f.py").write_text(FILES["exclamation.py"])
    data = ["--data-dir", str(tmp_path / "data")]
    code, out, err = run(capsys, "functions", "create", "--name", "f", "--py", str(tmp_path / "f.py"), "--inputs", IN,
                         *flags, *data)
    assert code == 2 and field in err, err
    assert run(capsys, "functions", "list", *data)[1] == ""  # nothing created
    accepted = ["--auto-ack", "true", "--retain-ordering", "false", "--input-specs",
                json.dumps({IN: {"serdeClassName": "serde.IdentitySerDe"}})]
    assert run(capsys, "functions", "create", "--name", "g", "--py", str(tmp_path / "f.py"), *accepted, *data)[0] == 0


def test_topics_produce_consume_ls_and_stats_on_a_data_dir(tmp_path, capsys):
    data = ["--data-dir", str(tmp_path / "data")]
    code, out, err = run(capsys, "topics", "produce", "in", "-m", "hello world", "-m", "again", "-k", "k1",
                         "-p", "origin=test", *data)
    assert code == 0 and "2 messages successfully produced to persistent://public/default/in" in out
    code, out, _ = run(capsys, "topics", "consume", "public/default/in", *data)
    messages = [json.loads(line) for line in out.splitlines()]
    assert [(m["value"], m["key"], m["properties"]) for m in messages] == [
        ("hello world", "k1", {"origin": "test"}), ("again", "k1", {"origin": "test"})]
    assert run(capsys, "topics", "consume", IN, "-n", "1", *data)[1].count("\n") == 1
    assert run(capsys, "topics", "ls", *data)[1] == f"{IN}\n"
    code, out, err = run(capsys, "topics", "produce", "a/b", "-m", "x", *data)
    assert code == 2 and "not a Pulsar topic name" in err
    # functions stats directly on a store: Pulsar's FunctionStats of a function that has not run
    (tmp_path / "f.py").write_text(FILES["exclamation.py"])
    assert run(capsys, "functions", "create", "--name", "f", "--py", str(tmp_path / "f.py"), "--inputs", IN,
               "--parallelism", "2", *data)[0] == 0
    code, out, err = run(capsys, "functions", "stats", "--name", "f", *data)
    assert code == 0, err
    stats = json.loads(out)
    assert stats["receivedTotal"] == 0 and len(stats["instances"]) == 2
    assert json.loads(run(capsys, "functions", "stats", "--name", "f", "--instance-id", "1", *data)[1])[
        "receivedTotal"] == 0
    assert run(capsys, "functions", "stats", "--name", "f", "--instance-id", "2", *data)[0] == 2
    assert run(capsys, "functions", "stats", "--name", "nope", *data)[0] == 1


def test_the_real_pulsar_client_is_installed_and_its_classes_run_the_functions(tmp_path):
    """pulsar-client is in the test extra: the same files run with its Function, SerDe and schema."""
    importlib.metadata.version("pulsar-client")  # no skip: the test environment must have it
    import pulsar
    import pulsar.schema

    from statekeep.functions.messaging import messages
    from statekeep.functions.config.loader import load_function

    assert "statekeep" not in pulsar.__file__
    process, _ = load_function(FILES["shapes.py"], "shapes.py", "shapes.Scale")
    assert isinstance(process.__self__, pulsar.Function)
    serde = messages.load_serde("shapes.PointSerDe", FILES["shapes.py"], "shapes.py")
    assert isinstance(serde, pulsar.SerDe) and serde.deserialize(b"3,4").y == 4
    user = messages.load_serde("users.User", FILES["users.py"], "users.py", schema=True).deserialize(b'{"name": "b"}')
    assert isinstance(user, pulsar.schema.Record) and user.name == "b" and user.age is None
    assert messages.load_serde("serde.IdentitySerDe").deserialize(b"42") == 42  # Pulsar's default: int first


HIDDEN_CLIENT = textwrap.dedent('''
    import sys
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "pulsar" or name.startswith("pulsar."):
                raise ImportError("pulsar-client is not installed here")
    sys.meta_path.insert(0, Block())
''')


def test_without_pulsar_client_the_stand_ins_run_the_same_files(tmp_path):
    script = HIDDEN_CLIENT + textwrap.dedent(f'''
        import json
        from statekeep.functions.admin import lifecycle
        from statekeep.functions.config.service import FunctionService
        FILES = json.loads({json.dumps(json.dumps(FILES))})
        with FunctionService.open("local://{tmp_path / 'data'}") as service:
            def create(name, py, **config):
                service.registry.create({{"tenant": "public", "namespace": "default", "name": name, "py": py,
                                          **config}}, FILES[py].encode())
            create("shapes", "shapes.py", className="shapes.Scale", userConfig={{"factor": 3}},
                   customSerdeInputs={{"persistent://public/default/points": "shapes.PointSerDe"}},
                   outputSerdeClassName="shapes.PointSerDe")
            create("users", "users.py", className="users",
                   customSchemaInputs={{"persistent://public/default/users": "users.User"}})
            create("exclamation", "exclamation.py", className="exclamation", inputs=["{IN}"])
            out = [lifecycle.output_text(lifecycle.trigger(service.registry, "public", "default", name, data))
                   for name, data in (("shapes", b"1,2"), ("users", b'{{"name": "cy", "age": 7}}'),
                                      ("exclamation", b"hi"))]
        import pulsar, pulsar.schema, statekeep.pulsar_compat
        assert pulsar is statekeep.pulsar_compat and pulsar.schema.Record.__module__.startswith("statekeep")
        print(json.dumps(out))
    ''')
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == ["3,6", "cy is 7", "hi!"]


def test_functions_sharing_a_topic_never_replace_each_others_files(tmp_path):
    """Two functions, each with its output and a publish on one topic, in the same (batch, partition):
    every message is kept, and a replay of the batch still writes each once."""
    from statekeep.functions.messaging import topics
    from support.specs import run_partition

    shared = "persistent://public/default/shared"
    code = f'def process(input, context):\n    context.publish("{shared}", "pub-" + input)\n    return "out-" + input\n'
    for name in ("a", "b", "a"):  # "a" twice: a replay of its batch (a new store, so it runs again)
        spec = {"tenant": "public", "namespace": "default", "name": name, "py_name": f"{name}.py", "code": code,
                "state_provider": "embedded", "state_config": {"metadata_url": f"local://{tmp_path / name}"},
                "input_format": "message", "source_format": "message", "inputs": [IN], "output": shared,
                "user_config": {}, "topics_dir": str(tmp_path / "topics")}
        (tmp_path / name).mkdir(exist_ok=True)
        assert run_partition(spec, 0, 0, [json.dumps({"value": "x", "key": "k"})]).processed in (0, 1)
    messages = list(topics.read(str(tmp_path / "topics"), shared))
    assert sorted((m["value"], m.get("key")) for m in messages) == [("out-x", "k"), ("out-x", "k"), ("pub-x", None),
                                                                  ("pub-x", None)]


def test_a_custom_object_through_a_topic_with_pickle_serde(tmp_path):
    """publish(..., serde_class_name="serde.PickleSerDe") writes bytes that are not UTF-8 (kept as
    valueBase64); a function whose input names the same serde gets the object back."""
    from statekeep.functions.messaging import topics
    from support.specs import run_partition

    objects = "persistent://public/default/objects"

    def spec(name: str, code: str, **extra) -> dict:
        (tmp_path / name).mkdir()
        return {"tenant": "public", "namespace": "default", "name": name, "py_name": f"{name}.py", "code": code,
                "state_provider": "embedded", "state_config": {"metadata_url": f"local://{tmp_path / name}"},
                "input_format": "message", "source_format": "message", "inputs": [IN], "output": None,
                "user_config": {}, "topics_dir": str(tmp_path / "topics"), **extra}

    send = (f'def process(input, context):\n    context.publish("{objects}", {{"word": input, "n": len(input)}}, '
            '"serde.PickleSerDe")\n')
    run_partition(spec("send", send), 0, 0, [json.dumps({"value": "hello"})])
    sent = list(topics.read(str(tmp_path / "topics"), objects))
    assert len(sent) == 1 and "valueBase64" in sent[0]
    receive = "def process(input, context):\n    context.incr_counter(input['word'], input['n'])\n"
    receiving = spec("receive", receive, inputs=[objects], input_serdes={objects: "serde.PickleSerDe"})
    assert run_partition(receiving, 0, 0, [json.dumps(m) for m in sent]).processed == 1
    from statekeep.state import open_provider

    state = open_provider("embedded", receiving["state_config"]).get_state_store("public", "default", "receive")
    assert state.get_counter("hello") == 5
