import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.apache.pulsar.functions.api.Context;
import org.apache.pulsar.functions.api.Function;

/**
 * The Java function of the PIP-312 tests (tests/test_pulsar_state_provider.py), test code: its state goes through
 * the worker's state provider. An input "count:WORD" adds 1 to the counter WORD and puts "last" = WORD, answering
 * "WORD=COUNT"; "read:KEY" answers "KEY=" and the counter KEY; "bytes:KEY" answers "KEY=" and the UTF-8 state KEY
 * ("null" when absent).
 */
public class CounterFunction implements Function<String, String> {
    @Override
    public String process(String input, Context context) {
        int colon = input.indexOf(':');
        String verb = input.substring(0, colon);
        String key = input.substring(colon + 1);
        switch (verb) {
            case "count":
                context.incrCounter(key, 1);
                context.putState("last", ByteBuffer.wrap(key.getBytes(StandardCharsets.UTF_8)));
                return key + "=" + context.getCounter(key);
            case "read":
                return key + "=" + context.getCounter(key);
            case "bytes":
                ByteBuffer value = context.getState(key);
                if (value == null) {
                    return key + "=null";
                }
                byte[] bytes = new byte[value.remaining()];
                value.get(bytes);
                return key + "=" + new String(bytes, StandardCharsets.UTF_8);
            default:
                throw new IllegalArgumentException("unknown verb " + verb);
        }
    }
}
