"""``statekeep topics produce|consume|ls|create``: statekeep's Pulsar topics (see
:mod:`statekeep.functions.messaging.topics`) and Kafka topics, shaped after ``pulsar-client produce|consume``.

``produce TOPIC -m MESSAGE [-m ...] [-k KEY] [-p NAME=VALUE ...] [--event-time MS]`` appends the messages as
one new file of the topic (each ``-m`` one message, a str payload as Pulsar's default serde reads it);
``consume TOPIC [-n N]`` prints the topic's messages (every message from the first; statekeep keeps
them all and has no subscriptions), one JSON object per line (``value`` or ``valueBase64``, ``key``,
``properties``, ``eventTime``, ``publishTime``); ``ls`` lists the topics. A Kafka topic
(``kafka://HOST:PORT/TOPIC``, see :mod:`statekeep.functions.messaging.kafka`) is produced to in one transaction
and consumed ``read_committed`` from its beginning to its end (``partition`` and ``offset`` added); a Pulsar
broker's topic (``pulsar://HOST:PORT/persistent://...``, see :mod:`statekeep.functions.messaging.pulsartopics`) is
produced to routed by key and read from its first message to its last (``partition`` and ``messageId`` added);
``create`` makes one (``--partitions``, ``--replication-factor``, ``--config NAME=VALUE``). Topic names are Pulsar's,
short names completed (``in`` is ``persistent://public/default/in``). The topics root is ``--topics-dir``,
else ``DATA_DIR/topics`` of ``--data-dir``, else ``$STATEKEEP_TOPICS_DIR``, else ``./.statekeep-data/topics``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from statekeep.errors import InvalidArgumentError


def add_topics_dir_option(parser: argparse.ArgumentParser) -> None:
    """``--topics-dir DIR``, for ``standalone``, ``localrun`` and the ``topics`` commands."""
    parser.add_argument("--topics-dir", default=None, metavar="DIR",
                        help="the root of statekeep's Pulsar topics, a directory or an fsspec URL such as "
                             "s3://bucket/topics (default: DATA_DIR/topics); on a cluster, one every worker reaches")


def use_topics_dir(args: argparse.Namespace, data_dir: str | None = None) -> str:
    """The topics root the command names (:func:`topics_root`), made this process's and its
    children's (``$STATEKEEP_TOPICS_DIR``)."""
    from statekeep.functions.config.locations import ENV

    root = os.environ[ENV] = topics_root(args, data_dir)
    return root


def topics_root(args: argparse.Namespace, data_dir: str | None) -> str:
    """The command's ``--topics-dir``, else ``DATA_DIR/topics``, else ``$STATEKEEP_TOPICS_DIR`` or the default."""
    from statekeep.functions.config.locations import absolute, default_root

    if getattr(args, "topics_dir", None):
        return absolute(args.topics_dir)
    return os.path.join(os.path.abspath(data_dir), "topics") if data_dir else default_root()


def register(groups: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = groups.add_parser("topics", help="produce, consume and list statekeep's Pulsar topics")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, run: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help)
        sub.set_defaults(run=run)
        where = sub.add_mutually_exclusive_group()
        where.add_argument("--topics-dir", default=None, metavar="DIR", help="the topics root (a directory or URL)")
        where.add_argument("--data-dir", default=None, metavar="DIR", help="the topics of this data dir (DIR/topics)")
        return sub

    produce = command("produce", _produce, "append messages to a topic")
    produce.add_argument("topic")
    produce.add_argument("-m", "--messages", action="append", required=True, help="a message (repeat for more)")
    produce.add_argument("-k", "--key", default=None, help="the messages' key")
    produce.add_argument("-p", "--property", action="append", default=[], metavar="NAME=VALUE",
                         help="a message property (repeat for more)")
    produce.add_argument("--event-time", type=int, default=None, metavar="MS", help="the messages' event time")
    consume = command("consume", _consume, "print a topic's messages, one JSON object per line")
    consume.add_argument("topic")
    consume.add_argument("-n", "--num-messages", type=int, default=0, help="at most this many (0: all)")
    command("ls", _ls, "list the topics")
    create = commands.add_parser("create", help="create a Kafka topic (kafka://HOST:PORT/TOPIC); a statekeep "
                                                "topic is made by its first message")
    create.set_defaults(run=_create)
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=1, help="its partitions (default 1)")
    create.add_argument("--replication-factor", type=int, default=1, help="its replicas (default 1)")
    create.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                        help="a topic config, e.g. cleanup.policy=compact (repeat for more)")


def _produce(args: argparse.Namespace) -> int:
    from statekeep.functions.config.locations import is_broker
    from statekeep.functions.messaging import topics
    from statekeep.functions.messaging.delivery import produce
    from statekeep.functions.messaging.messages import Message

    properties = _pairs(args.property, "--property")
    records = [Message(m, args.key, properties, args.event_time).to_json() for m in args.messages]
    if is_broker(args.topic):  # Kafka's in one transaction; Pulsar's routed by key
        name = args.topic
        produce(name, records)
    else:
        name = topics.complete(args.topic)
        topics.write(topics_root(args, args.data_dir), name, records)
    print(f"{len(args.messages)} messages successfully produced to {name}")
    return 0


def _consume(args: argparse.Namespace) -> int:
    from statekeep.functions.config.locations import is_broker
    from statekeep.functions.messaging import topics
    from statekeep.functions.messaging.delivery import consume

    found = (consume(args.topic, args.num_messages or 0) if is_broker(args.topic)
             else topics.read(topics_root(args, args.data_dir), topics.complete(args.topic)))
    for count, record in enumerate(found, 1):
        sys.stdout.write(json.dumps(record) + "\n")
        if args.num_messages and count >= args.num_messages:
            break
    return 0


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    found = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise InvalidArgumentError(f"{flag} must be NAME=VALUE, not {item!r}")
        found[name] = value
    return found


def _create(args: argparse.Namespace) -> int:
    from statekeep.functions.messaging.kafka import is_kafka, parse
    from statekeep.kafka.admin import create_topic

    if not is_kafka(args.topic):
        raise InvalidArgumentError(f"{args.topic!r}: only Kafka topics (kafka://HOST:PORT/TOPIC) are created; a "
                                   "statekeep topic is made by its first message")
    topic = parse(args.topic)
    create_topic(topic.bootstrap, topic.topic, partitions=args.partitions, replication=args.replication_factor,
                 config=_pairs(args.config, "--config") or None)
    print(f"created {args.topic} ({args.partitions} partitions, replication {args.replication_factor})")
    return 0


def _ls(args: argparse.Namespace) -> int:
    from statekeep.functions.messaging import topics

    for name in topics.list_topics(topics_root(args, args.data_dir)):
        print(name)
    return 0
