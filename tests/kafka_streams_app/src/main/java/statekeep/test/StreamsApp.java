package statekeep.test;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyQueryMetadata;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The Kafka Streams application of statekeep's KIP-813 tests, with interactive queries over HTTP.
 *
 * <p>{@code --mode=follow}: a read-only state store of {@code --topic} (a statekeep function's changelog topic), added
 * with {@code Topology.addReadOnlyStateStore}, its values read with {@code --value} (long, string, json or bytes).
 * {@code --mode=count}: {@code groupByKey().count()} of {@code --topic} (string keys and values) into the store
 * {@code --store}, exactly once (its changelog {@code APP_ID-STORE-changelog} is written in transactions), with the
 * changelog topic's configs {@code --changelog-config=NAME=VALUE,...}.
 *
 * <p>HTTP on {@code --port}: {@code GET /ready} {@code {"state": "RUNNING"}} (the application's state);
 * {@code GET /get?key=K} {@code {"key", "value", "partition"}} (404 for a key the store does not have;
 * {@code partition}: where Kafka Streams' key-to-instance metadata puts the key); {@code GET /all} the whole store
 * as one JSON object. Values: a long as a number, text as a string, bytes as base64. SIGTERM closes it.
 */
public final class StreamsApp {
  private StreamsApp() {}

  public static void main(String[] argv) throws Exception {
    Map<String, String> args = new HashMap<>();
    for (String arg : argv) {
      int eq = arg.indexOf('=');
      if (!arg.startsWith("--") || eq < 0) {
        throw new IllegalArgumentException("arguments are --name=value, not " + arg);
      }
      args.put(arg.substring(2, eq), arg.substring(eq + 1));
    }
    String mode = args.get("mode");
    String store = args.getOrDefault("store", "counts");
    String topic = args.get("topic");
    int port = Integer.parseInt(args.get("port"));
    String valueKind = "count".equals(mode) ? "long" : args.getOrDefault("value", "long");

    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, args.get("app-id"));
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, args.get("bootstrap"));
    props.put(StreamsConfig.STATE_DIR_CONFIG, args.get("state-dir"));
    props.put(StreamsConfig.APPLICATION_SERVER_CONFIG, "127.0.0.1:" + port);
    props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
    props.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    props.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    // statekeep writes its changelog in transactions: a follower reads only what was committed
    props.put(StreamsConfig.consumerPrefix(ConsumerConfig.ISOLATION_LEVEL_CONFIG), "read_committed");

    Topology topology;
    if ("follow".equals(mode)) {
      topology = followTopology(store, topic, valueKind);
    } else if ("count".equals(mode)) {
      props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
      Map<String, String> changelogConfig = new HashMap<>();
      for (String pair : args.getOrDefault("changelog-config", "").split(",")) {
        if (!pair.isEmpty()) {
          changelogConfig.put(pair.substring(0, pair.indexOf('=')), pair.substring(pair.indexOf('=') + 1));
        }
      }
      StreamsBuilder builder = new StreamsBuilder();
      builder.stream(topic, Consumed.with(Serdes.String(), Serdes.String()))
          .groupByKey()
          .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as(store)
              .withLoggingEnabled(changelogConfig));
      topology = builder.build();
    } else {
      throw new IllegalArgumentException("--mode is follow or count, not " + mode);
    }

    KafkaStreams streams = new KafkaStreams(topology, props);
    HttpServer http = HttpServer.create(new InetSocketAddress("127.0.0.1", port), 0);
    http.createContext("/ready", exchange -> reply(exchange, 200, "{\"state\":\"" + streams.state() + "\"}"));
    http.createContext("/get", exchange -> answer(exchange, () -> {
      String key = query(exchange).get("key");
      Object value = view(streams, store).get(key);
      if (value == null) {
        reply(exchange, 404, "{\"key\":" + json(key) + "}");
        return;
      }
      KeyQueryMetadata where = streams.queryMetadataForKey(store, key, Serdes.String().serializer());
      reply(exchange, 200, "{\"key\":" + json(key) + ",\"value\":" + json(value) + ",\"partition\":"
          + where.partition() + "}");
    }));
    http.createContext("/all", exchange -> answer(exchange, () -> {
      Map<String, Object> all = new TreeMap<>();
      try (KeyValueIterator<String, Object> it = view(streams, store).all()) {
        while (it.hasNext()) {
          KeyValue<String, Object> kv = it.next();
          all.put(kv.key, kv.value);
        }
      }
      StringBuilder out = new StringBuilder("{");
      for (Map.Entry<String, Object> e : all.entrySet()) {
        out.append(out.length() > 1 ? "," : "").append(json(e.getKey())).append(':').append(json(e.getValue()));
      }
      reply(exchange, 200, out.append('}').toString());
    }));
    CountDownLatch closed = new CountDownLatch(1);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      http.stop(0);
      streams.close();
      closed.countDown();
    }));
    http.start();
    streams.start();
    closed.await();
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  private static Topology followTopology(String store, String topic, String valueKind) {
    Serde valueSerde = switch (valueKind) {
      case "long" -> Serdes.Long();
      case "string", "json" -> Serdes.String();
      case "bytes" -> Serdes.ByteArray();
      default -> throw new IllegalArgumentException("--value is long, string, json or bytes, not " + valueKind);
    };
    Topology topology = new Topology();
    // KIP-813: the topic is the store's changelog; the store itself logs nothing
    topology.addReadOnlyStateStore(
        Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(store), Serdes.String(), valueSerde)
            .withLoggingDisabled(),
        "changelog-source", Serdes.String().deserializer(), valueSerde.deserializer(), topic, "store-updater",
        () -> new Processor<String, Object, Void, Void>() {
          private KeyValueStore<String, Object> kv;

          @Override
          public void init(ProcessorContext<Void, Void> context) {
            kv = context.getStateStore(store);
          }

          @Override
          public void process(Record<String, Object> record) {
            if (record.value() == null) {
              kv.delete(record.key());
            } else {
              kv.put(record.key(), record.value());
            }
          }
        });
    return topology;
  }

  private static ReadOnlyKeyValueStore<String, Object> view(KafkaStreams streams, String store) {
    return streams.store(StoreQueryParameters.fromNameAndType(store, QueryableStoreTypes.keyValueStore()));
  }

  private static Map<String, String> query(HttpExchange exchange) {
    Map<String, String> out = new HashMap<>();
    String raw = exchange.getRequestURI().getRawQuery();
    for (String pair : raw == null ? new String[0] : raw.split("&")) {
      int eq = pair.indexOf('=');
      if (eq > 0) {
        out.put(URLDecoder.decode(pair.substring(0, eq), StandardCharsets.UTF_8),
            URLDecoder.decode(pair.substring(eq + 1), StandardCharsets.UTF_8));
      }
    }
    return out;
  }

  private static String json(Object value) {
    if (value == null) {
      return "null";
    }
    if (value instanceof Number) {
      return value.toString();
    }
    String text = value instanceof byte[] bytes ? Base64.getEncoder().encodeToString(bytes) : value.toString();
    StringBuilder out = new StringBuilder("\"");
    for (char c : text.toCharArray()) {
      if (c == '"' || c == '\\') {
        out.append('\\').append(c);
      } else if (c < 0x20) {
        out.append(String.format("\\u%04x", (int) c));
      } else {
        out.append(c);
      }
    }
    return out.append('"').toString();
  }

  /** A query's answer, or 503 with the error while the store cannot be queried (a rebalance, a restore). */
  private interface Query {
    void run() throws IOException;
  }

  private static void answer(HttpExchange exchange, Query query) throws IOException {
    try {
      query.run();
    } catch (RuntimeException e) {
      reply(exchange, 503, "{\"error\":" + json(e.toString()) + "}");
    }
  }

  private static void reply(HttpExchange exchange, int status, String body) throws IOException {
    byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
    exchange.getResponseHeaders().set("Content-Type", "application/json");
    exchange.sendResponseHeaders(status, bytes.length);
    try (OutputStream out = exchange.getResponseBody()) {
      out.write(bytes);
    }
  }
}
