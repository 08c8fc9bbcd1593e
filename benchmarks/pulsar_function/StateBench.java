import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import org.apache.pulsar.functions.api.Context;
import org.apache.pulsar.functions.api.Function;

/**
 * benchmarks/pulsar_broker.py's Java function: an input "N" times N context.incrCounter calls, then N context.getState calls
 * of a 16-byte value put once, each with System.nanoTime inside the worker (the state provider's cost as a function
 * sees it), and answers "incr P50 P99 get P50 P99" in microseconds.
 */
public class StateBench implements Function<String, String> {
    @Override
    public String process(String input, Context context) {
        int n = Integer.parseInt(input.trim());
        long[] incr = new long[n];
        long[] get = new long[n];
        for (int i = 0; i < n; i++) {
            long t = System.nanoTime();
            context.incrCounter("bench-counter", 1);
            incr[i] = System.nanoTime() - t;
        }
        context.putState("bench-value", ByteBuffer.wrap("0123456789abcdef".getBytes(StandardCharsets.UTF_8)));
        for (int i = 0; i < n; i++) {
            long t = System.nanoTime();
            ByteBuffer value = context.getState("bench-value");
            get[i] = System.nanoTime() - t;
            if (value == null) {
                throw new IllegalStateException("bench-value vanished");
            }
        }
        return quantiles(incr) + " " + quantiles(get) + " " + context.getCounter("bench-counter");
    }

    private static String quantiles(long[] nanos) {
        long[] sorted = nanos.clone();
        Arrays.sort(sorted);
        return (sorted[sorted.length / 2] / 1000.0) + " " + (sorted[(int) (sorted.length * 0.99)] / 1000.0);
    }
}
