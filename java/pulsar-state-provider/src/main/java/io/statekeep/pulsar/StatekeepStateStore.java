package io.statekeep.pulsar;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.ByteBuffer;
import java.util.concurrent.CompletableFuture;
import org.apache.pulsar.functions.api.StateStoreContext;
import org.apache.pulsar.functions.api.state.StateValue;
import org.apache.pulsar.functions.instance.state.DefaultStateStore;

/**
 * One function's state in statekeep (see {@link StatekeepStateStoreProvider}). {@code get} of an absent key is
 * null, {@code getCounter} of one 0; a counter reads as its 8 bytes big-endian through {@code get}, and bytes of
 * length 8 written by {@code put} (Pulsar's REST writes a numberValue so) count on with {@code incrCounter}.
 * Each call is one statekeep request; the synchronous calls throw {@link StatekeepException}, the asynchronous ones
 * complete exceptionally with it.
 */
final class StatekeepStateStore implements DefaultStateStore {
    private final StatekeepClient client;
    private final String tenant;
    private final String namespace;
    private final String name;
    private final String fqfn;

    StatekeepStateStore(StatekeepClient client, String tenant, String namespace, String name) {
        this.client = client;
        this.tenant = tenant;
        this.namespace = namespace;
        this.name = name;
        this.fqfn = StatekeepClient.fn(tenant, namespace, name);
    }

    @Override
    public String tenant() {
        return tenant;
    }

    @Override
    public String namespace() {
        return namespace;
    }

    @Override
    public String name() {
        return name;
    }

    @Override
    public String fqsn() {
        return tenant + "/" + namespace + "/" + name;
    }

    @Override
    public void init(StateStoreContext context) {
    }

    @Override
    public void close() {
    }

    @Override
    public void put(String key, ByteBuffer value) {
        StatekeepClient.join(putAsync(key, value));
    }

    /**
     * Puts the buffer's bytes from index 0 to its limit, as Pulsar's BookKeeper store does (Pulsar's REST hands a
     * numberValue over as a buffer it wrote and did not flip: its position is at the end); a null value deletes.
     */
    @Override
    public CompletableFuture<Void> putAsync(String key, ByteBuffer value) {
        if (value == null) {
            return deleteAsync(key);
        }
        ByteBuffer copy = value.duplicate();
        copy.position(0);
        byte[] bytes = new byte[copy.remaining()];
        copy.get(bytes);
        return client.put(fqfn, key, bytes);
    }

    @Override
    public void delete(String key) {
        StatekeepClient.join(deleteAsync(key));
    }

    @Override
    public CompletableFuture<Void> deleteAsync(String key) {
        return client.delete(fqfn, key);
    }

    @Override
    public ByteBuffer get(String key) {
        return StatekeepClient.join(getAsync(key));
    }

    @Override
    public CompletableFuture<ByteBuffer> getAsync(String key) {
        return client.get(fqfn, key).thenApply(s -> s == null ? null : ByteBuffer.wrap(StatekeepClient.bytesOf(s)));
    }

    @Override
    public StateValue getStateValue(String key) {
        return StatekeepClient.join(getStateValueAsync(key));
    }

    @Override
    public CompletableFuture<StateValue> getStateValueAsync(String key) {
        return client.get(fqfn, key).thenApply(s -> s == null ? null : new StateValue(StatekeepClient.bytesOf(s),
                s.get("version").asLong(), s.hasNonNull("numberValue")));
    }

    @Override
    public void incrCounter(String key, long amount) {
        StatekeepClient.join(incrCounterAsync(key, amount));
    }

    @Override
    public CompletableFuture<Void> incrCounterAsync(String key, long amount) {
        return client.incr(fqfn, key, amount).thenApply(v -> null);
    }

    @Override
    public long getCounter(String key) {
        return StatekeepClient.join(getCounterAsync(key));
    }

    @Override
    public CompletableFuture<Long> getCounterAsync(String key) {
        return client.get(fqfn, key).thenApply(StatekeepStateStore::counterOf);
    }

    private static long counterOf(JsonNode state) {
        if (state == null) {
            return 0L;
        }
        if (state.hasNonNull("numberValue")) {
            return state.get("numberValue").asLong();
        }
        byte[] bytes = StatekeepClient.bytesOf(state);
        if (bytes.length != Long.BYTES) {
            throw new StatekeepException(400, "state key " + state.get("key").asText() + " holds " + bytes.length
                    + " bytes, not a counter (8 bytes big-endian)");
        }
        return ByteBuffer.wrap(bytes).getLong();
    }
}
