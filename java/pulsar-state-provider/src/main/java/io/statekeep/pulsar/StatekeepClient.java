package io.statekeep.pulsar;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Base64;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;

/**
 * The statekeep REST calls the provider makes: a function's hosted-state registration, and its state keys
 * (Pulsar's FunctionState JSON: {"key", "stringValue" | "byteValue" | "numberValue", "version"}).
 *
 * <p>Every call either returns statekeep's answer or throws {@link StatekeepException} with statekeep's own
 * reason (its JSON body) and the HTTP status. A request that could not be sent (connection refused) is tried
 * again, up to {@link #ATTEMPTS} times in all; a request that was sent is never repeated (an increment is not
 * idempotent).
 */
final class StatekeepClient {
    static final int ATTEMPTS = 5;
    private static final ObjectMapper JSON = new ObjectMapper();

    private final URI base;
    private final HttpClient http;
    private final Duration timeout;

    StatekeepClient(String baseUrl, Duration timeout) {
        String url = baseUrl.endsWith("/") ? baseUrl.substring(0, baseUrl.length() - 1) : baseUrl;
        if (!url.startsWith("http://") && !url.startsWith("https://")) {
            throw new IllegalArgumentException("stateStorageServiceUrl must be a statekeep server's http(s) URL, "
                    + "e.g. http://statekeep:8080, not " + baseUrl);
        }
        this.base = URI.create(url);
        this.timeout = timeout;
        this.http = HttpClient.newBuilder().connectTimeout(timeout).version(HttpClient.Version.HTTP_1_1).build();
    }

    static String segment(String s) {
        return URLEncoder.encode(s, StandardCharsets.UTF_8).replace("+", "%20");
    }

    static String fn(String tenant, String namespace, String name) {
        return segment(tenant) + "/" + segment(namespace) + "/" + segment(name);
    }

    /** Registers the function's state with statekeep (idempotent). */
    void register(String tenant, String namespace, String name) {
        join(send("PUT", "/admin/v3/hosted-state/" + fn(tenant, namespace, name), "{}", 200, 201));
    }

    /** Deletes the function's state and its registration (PIP-312's cleanUp); nothing if there was none. */
    void cleanUp(String tenant, String namespace, String name) {
        join(send("DELETE", "/admin/v3/hosted-state/" + fn(tenant, namespace, name), null, 204, 404));
    }

    private String stateUri(String fqfn, String key) {
        return "/admin/v3/functions/" + fqfn + "/state/" + segment(key);
    }

    /** The key's FunctionState JSON, or null when the key does not exist. */
    CompletableFuture<JsonNode> get(String fqfn, String key) {
        return send("GET", stateUri(fqfn, key), null, 200, 404).thenApply(r -> r.statusCode() == 404 ? null : parse(r));
    }

    CompletableFuture<Void> put(String fqfn, String key, byte[] value) {
        ObjectNode body = JSON.createObjectNode();
        body.put("key", key);
        body.put("byteValue", Base64.getEncoder().encodeToString(value));
        return send("POST", stateUri(fqfn, key), body.toString(), 200).thenApply(r -> null);
    }

    CompletableFuture<Void> delete(String fqfn, String key) {
        return send("DELETE", stateUri(fqfn, key), null, 204, 404).thenApply(r -> null);
    }

    /** Adds amount to the counter atomically; its new value. */
    CompletableFuture<Long> incr(String fqfn, String key, long amount) {
        String body = "{\"amount\": " + amount + "}";
        return send("POST", "/admin/v3/functions/" + fqfn + "/counter/" + segment(key), body, 200)
                .thenApply(r -> parse(r).get("numberValue").asLong());
    }

    /** The raw bytes of a FunctionState JSON: a counter as 8 bytes big-endian, as Pulsar keeps counters. */
    static byte[] bytesOf(JsonNode state) {
        if (state.hasNonNull("numberValue")) {
            return java.nio.ByteBuffer.allocate(Long.BYTES).putLong(state.get("numberValue").asLong()).array();
        }
        if (state.hasNonNull("byteValue")) {
            return Base64.getDecoder().decode(state.get("byteValue").asText());
        }
        return state.get("stringValue").asText().getBytes(StandardCharsets.UTF_8);
    }

    private static JsonNode parse(HttpResponse<String> response) {
        try {
            return JSON.readTree(response.body());
        } catch (IOException e) {
            throw new StatekeepException(response.statusCode(), "statekeep answered no JSON: " + response.body());
        }
    }

    private CompletableFuture<HttpResponse<String>> send(String method, String path, String body, int... ok) {
        HttpRequest.Builder request = HttpRequest.newBuilder(URI.create(base + path)).timeout(timeout)
                .method(method, body == null ? HttpRequest.BodyPublishers.noBody()
                        : HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8));
        if (body != null) {
            request.header("Content-Type", "application/json");
        }
        return attempt(request.build(), 1).thenApply(response -> {
            for (int status : ok) {
                if (response.statusCode() == status) {
                    return response;
                }
            }
            throw new StatekeepException(response.statusCode(),
                    method + " " + path + ": statekeep answered " + response.statusCode() + " " + response.body());
        });
    }

    private CompletableFuture<HttpResponse<String>> attempt(HttpRequest request, int n) {
        return http.sendAsync(request, HttpResponse.BodyHandlers.ofString()).handle((response, error) -> {
            if (error == null) {
                return CompletableFuture.completedFuture(response);
            }
            Throwable cause = error instanceof CompletionException && error.getCause() != null ? error.getCause() : error;
            if (cause instanceof ConnectException && n < ATTEMPTS) {
                CompletableFuture<HttpResponse<String>> next = new CompletableFuture<>();
                CompletableFuture.delayedExecutor(100L << n, java.util.concurrent.TimeUnit.MILLISECONDS)
                        .execute(() -> attempt(request, n + 1).whenComplete((r, e) -> {
                            if (e != null) {
                                next.completeExceptionally(e);
                            } else {
                                next.complete(r);
                            }
                        }));
                return next;
            }
            throw new StatekeepException(-1, "statekeep at " + base + " is unreachable: " + cause);
        }).thenCompose(f -> f);
    }

    static <T> T join(CompletableFuture<T> future) {
        try {
            return future.join();
        } catch (CompletionException e) {
            if (e.getCause() instanceof RuntimeException) {
                throw (RuntimeException) e.getCause();
            }
            throw e;
        }
    }
}
