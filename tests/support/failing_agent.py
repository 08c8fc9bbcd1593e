"""A Kafka delivery agent (statekeep.functions.messaging.kafkaagent) whose delivery of one batch handed behind its
task fails once: ``failing_agent.py SOCKET OWNER_PID BATCH``."""

import sys

from statekeep.functions.messaging import kafkaagent, kafkatxn

FAIL = int(sys.argv[3])
failed: list[int] = []


def run(op, bootstrap, ident, batch, payload, replay):
    if op == "behind" and batch == FAIL and not failed:
        failed.append(batch)
        raise kafkatxn.KafkaDeliveryError(f"batch {batch}: injected")
    return kafkatxn._agent_delivery(op, bootstrap, ident, batch, payload, replay)


kafkaagent.Agent(sys.argv[1], int(sys.argv[2]), run).serve()
