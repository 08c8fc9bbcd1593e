package io.statekeep.pulsar;

import java.time.Duration;
import java.util.Map;
import org.apache.pulsar.functions.api.StateStore;
import org.apache.pulsar.functions.instance.state.StateStoreProvider;

/**
 * PIP-312's {@link StateStoreProvider} backed by a statekeep server: a Pulsar function's state (its
 * {@code putState}/{@code incrCounter}, and Pulsar's {@code GET|POST /admin/v3/functions/T/N/F/state/KEY}) is kept
 * by statekeep, in statekeep's state provider, where statekeep's REST API, CLI and console read and write the same
 * keys. Counters stay 64-bit big-endian, as Pulsar keeps them.
 *
 * <p>Configured by the worker's {@code stateStorageServiceUrl}: the statekeep server's base URL
 * ({@code http://HOST:PORT}). {@link #getStateStore} registers the function's state with statekeep
 * ({@code PUT /admin/v3/hosted-state/T/N/F}); {@link #cleanUp}, called by the worker when the function is deleted,
 * deletes all of it. Thread-safe; every call may throw {@link StatekeepException} with statekeep's reason.
 */
public class StatekeepStateStoreProvider implements StateStoreProvider {
    /** The timeout of one request to statekeep. */
    public static final Duration TIMEOUT = Duration.ofSeconds(30);

    private volatile StatekeepClient client;

    public StatekeepStateStoreProvider() {
    }

    @Override
    public void init(Map<String, Object> config) {
        Object url = config.get(STATE_STORAGE_SERVICE_URL);
        if (url == null || url.toString().isBlank()) {
            throw new IllegalArgumentException("the statekeep state provider needs stateStorageServiceUrl: "
                    + "the statekeep server's URL, e.g. http://statekeep:8080");
        }
        client = new StatekeepClient(url.toString(), TIMEOUT);
    }

    private StatekeepClient client() {
        StatekeepClient c = client;
        if (c == null) {
            throw new IllegalStateException("StatekeepStateStoreProvider.init was not called");
        }
        return c;
    }

    @Override
    @SuppressWarnings("unchecked")
    public <T extends StateStore> T getStateStore(String tenant, String namespace, String name) {
        client().register(tenant, namespace, name);
        return (T) new StatekeepStateStore(client(), tenant, namespace, name);
    }

    @Override
    public void cleanUp(String tenant, String namespace, String name) {
        client().cleanUp(tenant, namespace, name);
    }

    @Override
    public void close() {
    }
}
