"""A function file for the Kafka tests: a per-key count, one output per message ``KEY:N`` (its key's count after
it) to the function's Kafka output, with the message's key, properties and event time kept; a message ``del``
deletes its key's count instead (no output).

Faults, armed by the environment of the driver (which its Python workers inherit): ``SK_FLAGS`` a directory,
``SK_PAUSE`` ``WHERE@BATCH,...``, each fault once (the file ``FLAGS/armed-WHERE`` exists until the fault takes it):
``before-commit``: partition 0's Kafka (or Pulsar) delivery of micro-batch BATCH stops after its state commit and
before its Kafka transaction (its Pulsar sends), writing ``FLAGS/paused-before-commit``, so the test can SIGKILL
the driver between the two;
``kill-worker``: the function SIGKILLs its own Python worker on micro-batch BATCH's partition 0; ``function``
(or any name starting so, e.g. ``function2``): the function stops on every partition of micro-batch BATCH
(writing ``FLAGS/paused-WHERE-PARTITION``) until ``FLAGS/go-WHERE`` exists (the test kills brokers meanwhile,
with no transaction in flight).
"""

import os
import signal
import time

FLAGS = os.environ.get("SK_FLAGS", "")
ARMED = dict(item.split("@") for item in os.environ.get("SK_PAUSE", "").split(",") if "@" in item)


def take(where):
    """Whether the fault ``where`` is still armed; this call disarms it."""
    try:
        os.remove(os.path.join(FLAGS, f"armed-{where}"))
        return True
    except FileNotFoundError:
        return False


def pause(where, until=None):
    open(os.path.join(FLAGS, f"paused-{where}"), "w").close()
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (until and os.path.exists(os.path.join(FLAGS, until))):
        time.sleep(0.1)


if "before-commit" in ARMED:  # in this worker: partition 0's delivery of the batch waits (to be killed)
    from statekeep.functions.messaging import kafka, pulsartopics

    _behind = kafka.KafkaDelivery.behind  # a task's first step of its delivery (see kafka.deliver_kept)

    def _paused(self, batch, table, earlier):
        if batch == int(ARMED["before-commit"]) and self.transactional_id.endswith("-0") and take("before-commit"):
            pause("before-commit")
        return _behind(self, batch, table, earlier)

    kafka.KafkaDelivery.behind = _paused
    _send = pulsartopics.deliver_table

    def _paused_send(table, producer, batch, partition):
        if batch == int(ARMED["before-commit"]) and partition == 0 and take("before-commit"):
            pause("before-commit")
        return _send(table, producer, batch, partition)

    pulsartopics.deliver_table = _paused_send


def batch_and_partition(context):
    """(batch, partition) of the record: Spark's micro-batch and the task's partition (the function instance)."""
    from pyspark import TaskContext

    return TaskContext.get().getLocalProperty("streaming.sql.batchId"), str(context.get_instance_id())


def process(value, context):
    key = context.get_message_key()
    if value == "del":
        context.del_counter(key)
        return None
    n = context.incr_counter(key, 1)
    batch, partition = batch_and_partition(context)
    if ARMED.get("kill-worker") == batch and partition == "0" and take("kill-worker"):
        os.kill(os.getpid(), signal.SIGKILL)
    for where, at in ARMED.items():  # every partition of the batch stops (nothing commits meanwhile), once
        if where.startswith("function") and at == batch and not os.path.exists(os.path.join(FLAGS, f"go-{where}")):
            take(where)
            pause(f"{where}-{partition}", until=f"go-{where}")
    return f"{key}:{n}"
