package io.statekeep.pulsar;

/** A statekeep request that failed: {@link #status} is the HTTP status (-1: no answer), the message statekeep's reason. */
public final class StatekeepException extends RuntimeException {
    public final int status;

    StatekeepException(int status, String message) {
        super(message);
        this.status = status;
    }
}
