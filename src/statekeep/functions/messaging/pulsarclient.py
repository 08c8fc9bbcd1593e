"""A real Pulsar broker through pulsar-client and its admin REST API, as statekeep's Pulsar topics use it (the
function runner's ``pulsar://`` names and the ``statekeep-pulsar`` Spark data source alike): the options that name
a topic (:class:`PulsarOptions`), its partitions and each partition's last message id, whether the broker
deduplicates it, the largest message it takes, and the effectively-once send (:func:`send`).

**Effectively-once** is Pulsar's broker deduplication: the broker drops a message whose sequence id is not above the
last one it stored from the same producer name. A writer whose replayed batch gives each partition the same messages
in the same order sends them with a producer of a stable name and the sequence id ``batch * 2**24 + position + 1``
(:func:`sequence_id`), so the broker stores each once.

Sends are batched, in **chunks fixed by the messages alone** (:func:`chunks`: up to :data:`CHUNK_MESSAGES` messages and
:data:`CHUNK_BYTES` bytes, cut in order), each chunk one batch entry on the broker. The clients' batches carry no
highest sequence id (pulsar-client-cpp sets only the first message's): the broker dedups a batch by its first
sequence id and remembers that one, so a replay is exact only if it sends the same batches. It does: a chunk's
bounds depend only on the kept messages, the producer cuts a batch only where :func:`send` ends a chunk (its
count and size limits are above a chunk's, its publish delay an hour), and a replay skips whole chunks, those whose
first sequence id the broker reports having (``last_sequence_id``), sending the rest whole: the broker drops a
resent chunk it stored, and stores the others once. (Unbatched, a replay could start inside a stored batch whose
later messages the broker does not know it has.) On a
partitioned topic, writer partition P sends to topic partition P mod N (as Flink's fixed partitioner does): one
topic partition then checks each producer's whole sequence, where a key-hashing router would spread it over
partitions whose last ids differ. A second producer of the same name while the first is connected is refused by
the broker.

Errors are one line: an unknown topic or namespace is a :class:`NotFoundError`, a broker that does not answer within
the timeout a :class:`StoreUnavailableError`, a bad option an :class:`InvalidArgumentError`.
"""

from __future__ import annotations

import atexit
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from statekeep.errors import InvalidArgumentError, MissingDependencyError, NotFoundError, StoreUnavailableError
from statekeep.retry import OUTAGE
from statekeep.lru import memo

DEFAULT_TIMEOUT = 30.0
#: a writer's messages per batch: sequence id = batch * ROWS_PER_BATCH + position + 1
ROWS_PER_BATCH = 2**24
#: Pulsar's default ``maxMessageSize`` (5 MiB), the limit where the broker's configuration states none
DEFAULT_MAX_MESSAGE = 5 * 1024 * 1024
#: the most messages of a chunk, one batch entry on the broker (see :func:`chunks`)
CHUNK_MESSAGES = 1000
#: the most bytes of a chunk as :func:`message_size` counts them (a single larger message is a chunk by itself)
CHUNK_BYTES = 512 * 1024
#: chunks a producer may have in flight before a send waits for the broker
CHUNKS_IN_FLIGHT = 10


def client_module() -> Any:
    """pulsar-client's ``pulsar`` module; MissingDependencyError naming the extra without it."""
    try:
        import pulsar
    except ImportError as e:
        raise MissingDependencyError(f"Pulsar topics need pulsar-client: pip install 'statekeep[pulsar]' ({e})"
                                     ) from e
    return pulsar


class PulsarOptions:
    """The checked options naming a topic (``serviceUrl``, ``adminUrl``, ``topic``, ``startingOffsets``,
    ``timeoutSeconds``): InvalidArgumentError, in one line, for a missing or malformed one."""

    def __init__(self, options: Mapping[str, Any]) -> None:
        def required(name: str, prefixes: tuple[str, ...], example: str) -> str:
            value = options.get(name)
            if not value or not str(value).startswith(prefixes):
                raise InvalidArgumentError(f'option "{name}" must be given, e.g. {example}, not {value!r}')
            return str(value).rstrip("/")

        self.service_url = required("serviceUrl", ("pulsar://", "pulsar+ssl://"), "pulsar://127.0.0.1:6650")
        self.admin_url = required("adminUrl", ("http://", "https://"), "http://127.0.0.1:8080")
        self.topic = required("topic", ("persistent://", "non-persistent://"), "persistent://public/default/t")
        parts = self.topic.split("://", 1)[1].split("/")
        if len(parts) != 3 or not all(parts):
            raise InvalidArgumentError(f'option "topic" must be persistent://TENANT/NAMESPACE/TOPIC, not '
                                       f'{self.topic!r}')
        self.starting = str(options.get("startingOffsets", "latest")).lower()
        if self.starting not in ("earliest", "latest"):
            raise InvalidArgumentError(f'option "startingOffsets" must be earliest or latest, not '
                                       f'{options.get("startingOffsets")!r}')
        try:
            self.timeout = float(options.get("timeoutSeconds", DEFAULT_TIMEOUT))
        except ValueError:
            raise InvalidArgumentError(f'option "timeoutSeconds" must be a number of seconds, not '
                                       f'{options.get("timeoutSeconds")!r}') from None
        if not self.timeout > 0:
            raise InvalidArgumentError(f'option "timeoutSeconds" must be positive, not {self.timeout}')

    @classmethod
    def of(cls, service_url: str, admin_url: str, topic: str, timeout: float = DEFAULT_TIMEOUT) -> PulsarOptions:
        return cls({"serviceUrl": service_url, "adminUrl": admin_url, "topic": topic, "timeoutSeconds": timeout})

    def client(self) -> Any:
        """A new client of the broker (the caller closes it)."""
        pulsar = client_module()
        seconds = max(1, int(self.timeout))
        return pulsar.Client(self.service_url, operation_timeout_seconds=seconds,
                             connection_timeout_ms=seconds * 1000, logger=_quiet_logger())


def _quiet_logger() -> Any:
    import logging

    logger = logging.getLogger("statekeep.pulsar.client")
    logger.setLevel(logging.WARNING)  # the C++ client logs every connection at INFO
    return logger


_clients: dict[tuple[str, float], Any] = {}
_clients_lock = threading.Lock()


def shared_client(options: PulsarOptions) -> Any:
    """This process's client of the broker (made once, kept: a client's connection costs round trips)."""
    key = (options.service_url, options.timeout)
    with _clients_lock:
        if not _clients:
            atexit.register(_close_all)  # closed while Python's logging still stands (the client logs through it)
        if key not in _clients:
            _clients[key] = options.client()
        return _clients[key]


def _close_all() -> None:
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        try:
            client.close()
        except Exception:  # noqa: BLE001 - leaving anyway
            pass


def forget_client(options: PulsarOptions) -> None:
    """Close and forget this process's client of the broker (after it failed: the next call makes a new one)."""
    with _clients_lock:
        client = _clients.pop((options.service_url, options.timeout), None)
    if client is not None:
        try:
            client.close()
        except Exception:  # noqa: BLE001 - a client in a state unknown: dropped either way
            pass


# -- the broker's topics ----------------------------------------------------------------------------------------


def partition_names(options: PulsarOptions) -> list[str]:
    """The topic's partitions' names (the topic itself when it is not partitioned), asked of the broker's binary
    protocol (this process's client: a query asks at every micro-batch): NotFoundError for an unknown topic or
    namespace, StoreUnavailableError when the broker does not answer within the timeout."""
    pulsar = client_module()
    try:
        return list(shared_client(options).get_topic_partitions(options.topic))
    except pulsar.TopicNotFound:
        raise NotFoundError(f"Pulsar topic {options.topic} does not exist on {options.service_url}: create it "
                            "(pulsar-admin topics create, or create-partitioned-topic)") from None
    except (pulsar.Timeout, pulsar.ConnectError) as e:
        forget_client(options)
        raise StoreUnavailableError(f"Pulsar at {options.service_url} did not answer within {options.timeout:g} s "
                                    f"({type(e).__name__})") from None
    except pulsar.PulsarException as e:
        forget_client(options)
        raise StoreUnavailableError(f"Pulsar at {options.service_url} could not list topic {options.topic}: "
                                    f"{type(e).__name__}: {e}") from None


def _admin_get(options: PulsarOptions, path: str, what: str) -> Any:
    """The JSON answer of the admin API's GET ``path``: NotFoundError for a 404, StoreUnavailableError otherwise."""
    url = f"{options.admin_url}{path}"
    try:
        with urllib.request.urlopen(url, timeout=options.timeout) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as e:
        if e.code == 404:
            raise NotFoundError(f"Pulsar topic {options.topic} does not exist at {options.admin_url}: create it "
                                "(pulsar-admin topics create, or create-partitioned-topic)") from None
        raise StoreUnavailableError(f"Pulsar's admin API at {options.admin_url} answered {e.code} for {what}"
                                    ) from None
    except (OSError, ValueError) as e:
        raise StoreUnavailableError(f"Pulsar's admin API at {options.admin_url} did not answer: {e}") from None


def _topic_path(topic: str) -> str:
    return urllib.parse.quote(topic.replace("://", "/", 1))


def last_message_id(options: PulsarOptions, partition: str) -> str:
    """``LEDGER:ENTRY:BATCH`` of the partition's last message (entry -1 when it has none), from the admin REST
    API; an unreachable broker is retried within :data:`statekeep.retry.OUTAGE`'s bound up to the timeout."""
    def ask() -> str:
        found = _admin_get(options, f"/admin/v2/{_topic_path(partition)}/lastMessageId",
                           f"{partition}'s last message id")
        return f"{int(found['ledgerId'])}:{int(found['entryId'])}:{int(found.get('batchIndex', -1))}"

    return OUTAGE.bounded(seconds=options.timeout).repeat(ask)


def ledgers(options: PulsarOptions, partition: str) -> list[tuple[int, int]]:
    """The partition's ledgers as (ledger id, entries), oldest first, from the admin API's internal stats (the open
    ledger's entries are its ``currentLedgerEntries``)."""
    stats = _admin_get(options, f"/admin/v2/{_topic_path(partition)}/internalStats", f"{partition}'s ledgers")
    found = [(int(ledger["ledgerId"]), int(ledger.get("entries", 0))) for ledger in stats.get("ledgers", [])]
    if found and stats.get("currentLedgerEntries") is not None:
        found[-1] = (found[-1][0], max(found[-1][1], int(stats["currentLedgerEntries"])))
    return found


def deduplication_enabled(options: PulsarOptions) -> bool:
    """Whether the broker deduplicates the topic's messages (its applied setting: topic, else namespace, else
    broker); NotFoundError for an unknown topic, StoreUnavailableError when the admin API does not answer."""
    return bool(_admin_get(options, f"/admin/v2/{_topic_path(options.topic)}/deduplicationEnabled?applied=true",
                           f"{options.topic}'s deduplication"))


def check_deduplication(options: PulsarOptions) -> None:
    """InvalidArgumentError, in one line saying how to enable it, if the topic's deduplication is off (a replayed
    batch would be delivered twice); raises as :func:`deduplication_enabled` otherwise."""
    if not deduplication_enabled(options):
        namespace = "/".join(options.topic.split("://", 1)[1].split("/")[:2])
        raise InvalidArgumentError(
            f"Pulsar topic {options.topic} has no deduplication, so a replayed micro-batch would be delivered twice: "
            f"enable it (pulsar-admin namespaces set-deduplication {namespace} --enable, or the broker's "
            "brokerDeduplicationEnabled=true)")


_limits: dict[str, int] = memo()
_limits_lock = threading.Lock()


def max_message_size(options: PulsarOptions) -> int:
    """The largest message the broker takes (its ``maxMessageSize``), asked of its admin API once per process."""
    with _limits_lock:
        if options.admin_url in _limits:
            return _limits[options.admin_url]
    found = _admin_get(options, "/admin/v2/brokers/configuration/runtime", "its configuration")
    try:
        limit = int(found.get("maxMessageSize", DEFAULT_MAX_MESSAGE))
    except (TypeError, ValueError):
        limit = DEFAULT_MAX_MESSAGE
    with _limits_lock:
        _limits[options.admin_url] = limit
    return limit


# -- effectively-once sends ---------------------------------------------------------------------------------------


def sequence_id(batch: int, position: int) -> int:
    """The sequence id of the message at ``position`` of ``batch`` (InvalidArgumentError past
    :data:`ROWS_PER_BATCH` messages)."""
    if position >= ROWS_PER_BATCH - 1:
        raise InvalidArgumentError(f"a Pulsar writer sends at most {ROWS_PER_BATCH - 1} messages of a batch per "
                                   "partition (their sequence ids must stay below the next batch's): repartition")
    return batch * ROWS_PER_BATCH + position + 1  # never 0: the Python client takes 0 for "none given"


def message_size(message: Mapping[str, Any]) -> int:
    """A message's bytes as a chunk counts them: payload, key, properties and 100 for its metadata (at least what
    the producer's batch counts, the payload)."""
    properties = message.get("properties") or {}
    return (len(message["content"]) + len(message.get("partition_key") or "")
            + sum(len(k) + len(v) for k, v in properties.items()) + 100)


def chunks(messages: Iterable[Mapping[str, Any]], limit: int = CHUNK_BYTES
           ) -> Iterator[tuple[int, list[Mapping[str, Any]]]]:
    """``messages`` cut, in order, into chunks of at most :data:`CHUNK_MESSAGES` messages and ``limit`` bytes (a
    message over ``limit`` alone), each with its first message's position: a function of the messages alone, so a
    replay of the same messages cuts the same chunks."""
    chunk: list[Mapping[str, Any]] = []
    first = size = 0
    for position, message in enumerate(messages):
        grows = message_size(message)
        if chunk and (len(chunk) == CHUNK_MESSAGES or size + grows > limit):
            yield first, chunk
            chunk, first, size = [], position, 0
        chunk.append(message)
        size += grows
    if chunk:
        yield first, chunk


def send(options: PulsarOptions, producer_name: str, batch: int, messages: Iterable[Mapping[str, Any]],
         partition: int = 0) -> int:
    """Send ``messages`` (keyword arguments of ``Producer.send``: ``content``, and ``partition_key``,
    ``properties``, ``event_timestamp``) as ``batch``'s messages of producer ``producer_name`` to the topic's
    partition ``partition`` mod its partitions, in :func:`chunks` (one batch each), skipping the chunks the broker
    already has; the number sent. Raises
    NotFoundError for a topic the broker does not have, StoreUnavailableError when a send fails (the broker
    drops what it already stored when the batch is sent again)."""
    pulsar = client_module()
    failures: list[str] = []
    sent = 0
    client = shared_client(options)
    # a chunk stays under the broker's limit for a whole batch entry (each message's size was checked already)
    limit = min(CHUNK_BYTES, max_message_size(options) // 2)
    try:
        names = client.get_topic_partitions(options.topic)
        # the producer cuts a batch only where a chunk ends: at its count (a full chunk), else at the flush below;
        # its byte limit is above a chunk's, its publish delay an hour (a timer's cut would differ on a replay)
        producer = client.create_producer(names[partition % len(names)], producer_name=producer_name,
                                          batching_enabled=True, batching_max_messages=CHUNK_MESSAGES,
                                          batching_max_allowed_size_in_bytes=2 * CHUNK_BYTES,
                                          batching_max_publish_delay_ms=3_600_000, block_if_queue_full=True,
                                          max_pending_messages=CHUNK_MESSAGES * CHUNKS_IN_FLIGHT,
                                          send_timeout_millis=int(options.timeout * 1000))
        try:
            last = producer.last_sequence_id()

            def done(result: Any, ident: Any) -> None:
                if result != pulsar.Result.Ok:
                    failures.append(str(result))

            for first, chunk in chunks(messages, limit):
                if sequence_id(batch, first) <= last:
                    continue  # the broker has this chunk: a replay
                for position, message in enumerate(chunk, first):
                    producer.send_async(callback=done, sequence_id=sequence_id(batch, position), **message)
                sent += len(chunk)
                if len(chunk) < CHUNK_MESSAGES:
                    producer.flush()  # a short chunk: its batch ends here (a full one was sent at its count)
            producer.flush()
        finally:
            producer.close()
    except pulsar.TopicNotFound:
        raise NotFoundError(f"Pulsar topic {options.topic} does not exist on {options.service_url}") from None
    except pulsar.PulsarException as e:
        forget_client(options)  # a client in a state unknown (a broker restarted): the next send makes a new one
        raise StoreUnavailableError(f"sending to Pulsar topic {options.topic} failed: {type(e).__name__}: {e}"
                                    ) from None
    if failures:
        raise StoreUnavailableError(f"{len(failures)} messages to Pulsar topic {options.topic} failed "
                                    f"({failures[0]}); the batch is sent again")
    return sent
