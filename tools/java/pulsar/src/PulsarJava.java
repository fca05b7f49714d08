import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.impl.MessageIdImpl;
import org.apache.pulsar.common.util.ObjectMapperFactory;

/**
 * Pulsar's own Java client and Java admin client, driven by the tests (tests/support/pulsar_java.py).
 *
 * <p>One JVM runs a script: the commands arrive on stdin, one a line (tokens separated by spaces), and each
 * prints exactly one JSON line on stdout, so that a test pays one JVM start for a whole conversation. A failing
 * command prints {"error": ...} and the program exits 1 after it: the test sees what Pulsar's client said.
 *
 * <pre>
 *   java -cp '.cache/pulsar-libs/client/*:&lt;classes&gt;' PulsarJava &lt;service url&gt; &lt;admin url&gt;
 *
 *   produce TOPIC N BATCHING(true|false) COMPRESSION(NONE|LZ4|ZLIB|ZSTD|SNAPPY)
 *       values "java-I", keys "key-(I%3)", property idx=I, event time 1700000000000+I; -> the message ids
 *   consume TOPIC SUBSCRIPTION TYPE(Exclusive|Shared|Failover|Key_Shared) N
 *       from the earliest message, acks each; -> [{value,key,properties,eventTime,publishTime,redeliveryCount,id}]
 *   topics NAMESPACE                         -> admin.topics().getList
 *   create-subscription TOPIC SUB earliest|latest
 *   subscriptions TOPIC                      -> admin.topics().getSubscriptions
 *   reset-cursor-time TOPIC SUB MILLIS       -> admin.topics().resetCursor by publish time
 *   reset-cursor-id TOPIC SUB LEDGER ENTRY   -> admin.topics().resetCursor by message id
 *   stats TOPIC                              -> admin.topics().getStats, as Pulsar's own JSON
 *   last-message-id TOPIC                    -> admin.topics().getLastMessageId as "ledger:entry:partition"
 *   create-partitioned-topic TOPIC N         -> admin.topics().createPartitionedTopic
 *   partitioned-metadata TOPIC               -> admin.topics().getPartitionedTopicMetadata: the partition count
 *   skip TOPIC SUB N / skip-all TOPIC SUB / expire TOPIC SUB SECONDS / unsubscribe TOPIC SUB
 *   peek TOPIC SUB N                         -> admin.topics().peekMessages: [{id,value,key,properties,
 *                                               eventTime,publishTime,producerName,sequenceId,index}]
 *   any command prefixed with "try " answers {"exception": class, "status": HTTP status} instead of failing
 * </pre>
 */
public final class PulsarJava {
    private static final long EVENT_TIME_BASE = 1_700_000_000_000L;

    private PulsarJava() {
    }

    public static void main(String[] args) throws Exception {
        String serviceUrl = args[0];
        String adminUrl = args[1];
        int rc = 0;
        try (PulsarClient client = PulsarClient.builder().serviceUrl(serviceUrl)
                .operationTimeout(60, TimeUnit.SECONDS).build();
             PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(adminUrl).build()) {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                String[] cmd = line.trim().split("\\s+");
                String out;
                try {
                    out = "{\"ok\":" + run(client, admin, cmd) + "}";
                } catch (Exception e) {
                    out = "{\"error\":" + str(e.toString()) + "}";
                    rc = 1;
                }
                System.out.println(out);
                System.out.flush();
                if (rc != 0) {
                    break;
                }
            }
        }
        System.exit(rc);
    }

    private static String run(PulsarClient client, PulsarAdmin admin, String[] c) throws Exception {
        if ("try".equals(c[0])) {
            try {
                return run(client, admin, java.util.Arrays.copyOfRange(c, 1, c.length));
            } catch (org.apache.pulsar.client.admin.PulsarAdminException e) {
                return "{\"exception\":" + str(e.getClass().getSimpleName()) + ",\"status\":" + e.getStatusCode()
                        + "}";
            }
        }
        switch (c[0]) {
            case "create-partitioned-topic":
                admin.topics().createPartitionedTopic(c[1], Integer.parseInt(c[2]));
                return "true";
            case "partitioned-metadata":
                return Integer.toString(admin.topics().getPartitionedTopicMetadata(c[1]).partitions);
            case "skip":
                admin.topics().skipMessages(c[1], c[2], Long.parseLong(c[3]));
                return "true";
            case "skip-all":
                admin.topics().skipAllMessages(c[1], c[2]);
                return "true";
            case "expire":
                admin.topics().expireMessages(c[1], c[2], Long.parseLong(c[3]));
                return "true";
            case "unsubscribe":
                admin.topics().deleteSubscription(c[1], c[2]);
                return "true";
            case "peek":
                return peek(admin, c[1], c[2], Integer.parseInt(c[3]));
            case "produce":
                return produce(client, c[1], Integer.parseInt(c[2]), Boolean.parseBoolean(c[3]),
                        CompressionType.valueOf(c[4]));
            case "consume":
                return consume(client, c[1], c[2], SubscriptionType.valueOf(c[3]), Integer.parseInt(c[4]));
            case "topics":
                return strings(admin.topics().getList(c[1]));
            case "create-subscription":
                admin.topics().createSubscription(c[1], c[2],
                        "latest".equals(c[3]) ? MessageId.latest : MessageId.earliest);
                return "true";
            case "subscriptions":
                return strings(admin.topics().getSubscriptions(c[1]));
            case "reset-cursor-time":
                admin.topics().resetCursor(c[1], c[2], Long.parseLong(c[3]));
                return "true";
            case "reset-cursor-id":
                admin.topics().resetCursor(c[1], c[2],
                        new MessageIdImpl(Long.parseLong(c[3]), Long.parseLong(c[4]), -1));
                return "true";
            case "stats":
                return ObjectMapperFactory.getMapper().getObjectMapper().writeValueAsString(
                        admin.topics().getStats(c[1]));
            case "last-message-id":
                return str(admin.topics().getLastMessageId(c[1]).toString());
            default:
                throw new IllegalArgumentException("unknown command " + c[0]);
        }
    }

    private static String produce(PulsarClient client, String topic, int n, boolean batching,
                                  CompressionType compression) throws Exception {
        List<String> ids = new ArrayList<>();
        try (Producer<byte[]> producer = client.newProducer().topic(topic).enableBatching(batching)
                .batchingMaxPublishDelay(50, TimeUnit.MILLISECONDS).compressionType(compression).create()) {
            List<java.util.concurrent.CompletableFuture<MessageId>> sends = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                sends.add(producer.newMessage().key("key-" + (i % 3)).property("idx", Integer.toString(i))
                        .eventTime(EVENT_TIME_BASE + i).value(("java-" + i).getBytes(StandardCharsets.UTF_8))
                        .sendAsync());
            }
            producer.flush();
            for (var f : sends) {
                ids.add(f.get(60, TimeUnit.SECONDS).toString());
            }
        }
        return strings(ids);
    }

    private static String consume(PulsarClient client, String topic, String sub, SubscriptionType type, int n)
            throws Exception {
        StringBuilder sb = new StringBuilder("[");
        try (Consumer<byte[]> consumer = client.newConsumer().topic(topic).subscriptionName(sub)
                .subscriptionType(type).subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                .subscribe()) {
            for (int i = 0; i < n; i++) {
                Message<byte[]> m = consumer.receive(60, TimeUnit.SECONDS);
                if (m == null) {
                    throw new IllegalStateException("received " + i + " of " + n + " messages within 60 s");
                }
                consumer.acknowledge(m);
                Map<String, String> props = new TreeMap<>(m.getProperties());
                StringBuilder p = new StringBuilder("{");
                for (var e : props.entrySet()) {
                    p.append(p.length() > 1 ? "," : "").append(str(e.getKey())).append(':').append(str(e.getValue()));
                }
                p.append('}');
                sb.append(i > 0 ? "," : "")
                        .append("{\"value\":").append(str(new String(m.getValue(), StandardCharsets.UTF_8)))
                        .append(",\"key\":").append(m.hasKey() ? str(m.getKey()) : "null")
                        .append(",\"properties\":").append(p)
                        .append(",\"eventTime\":").append(m.getEventTime())
                        .append(",\"publishTime\":").append(m.getPublishTime())
                        .append(",\"redeliveryCount\":").append(m.getRedeliveryCount())
                        .append(",\"id\":").append(str(m.getMessageId().toString())).append('}');
            }
        }
        return sb.append(']').toString();
    }

    private static String peek(PulsarAdmin admin, String topic, String sub, int n) throws Exception {
        StringBuilder sb = new StringBuilder("[");
        for (Message<byte[]> m : admin.topics().peekMessages(topic, sub, n)) {
            Map<String, String> props = new TreeMap<>(m.getProperties());
            StringBuilder p = new StringBuilder("{");
            for (var e : props.entrySet()) {
                p.append(p.length() > 1 ? "," : "").append(str(e.getKey())).append(':').append(str(e.getValue()));
            }
            p.append('}');
            sb.append(sb.length() > 1 ? "," : "")
                    .append("{\"id\":").append(str(m.getMessageId().toString()))
                    .append(",\"value\":").append(str(new String(m.getValue(), StandardCharsets.UTF_8)))
                    .append(",\"key\":").append(m.hasKey() ? str(m.getKey()) : "null")
                    .append(",\"properties\":").append(p)
                    .append(",\"eventTime\":").append(m.getEventTime())
                    .append(",\"publishTime\":").append(m.getPublishTime())
                    .append(",\"producerName\":").append(m.getProducerName() == null ? "null"
                            : str(m.getProducerName()))
                    .append(",\"sequenceId\":").append(m.getSequenceId())
                    .append(",\"index\":").append(m.getIndex().map(Object::toString).orElse("null"))
                    .append('}');
        }
        return sb.append(']').toString();
    }

    private static String strings(List<String> items) {
        StringBuilder sb = new StringBuilder("[");
        for (String s : items) {
            sb.append(sb.length() > 1 ? "," : "").append(str(s));
        }
        return sb.append(']').toString();
    }

    /** A JSON string literal. */
    private static String str(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                default -> {
                    if (ch < 0x20) {
                        sb.append(String.format("\\u%04x", (int) ch));
                    } else {
                        sb.append(ch);
                    }
                }
            }
        }
        return sb.append('"').toString();
    }
}
