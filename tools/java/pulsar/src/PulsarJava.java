import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.api.CompressionType;
import org.apache.pulsar.client.api.Consumer;
import org.apache.pulsar.client.api.ConsumerBuilder;
import org.apache.pulsar.client.api.ConsumerEventListener;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.api.Producer;
import org.apache.pulsar.client.api.ProducerAccessMode;
import org.apache.pulsar.client.api.ProducerBuilder;
import org.apache.pulsar.client.api.PulsarClient;
import org.apache.pulsar.client.api.PulsarClientException;
import org.apache.pulsar.client.api.Reader;
import org.apache.pulsar.client.api.SubscriptionInitialPosition;
import org.apache.pulsar.client.api.SubscriptionType;
import org.apache.pulsar.client.impl.DefaultCryptoKeyReader;
import org.apache.pulsar.client.impl.MessageIdImpl;
import org.apache.pulsar.common.util.ObjectMapperFactory;

/**
 * Pulsar's own Java client and Java admin client, driven by the tests (tests/support/pulsar_java.py).
 *
 * <p>One JVM runs a script: the commands arrive on stdin, one a line (tokens separated by spaces), and each
 * prints exactly one JSON line on stdout, so that a test pays one JVM start for a whole conversation. A failing
 * command prints {"error": ...} and the program exits 1 after it: the test sees what Pulsar's client said. At the
 * end of its input it exits at once, without closing the consumers and readers still open (see main).
 *
 * <pre>
 *   java -cp '.cache/pulsar-libs/client/*:&lt;classes&gt;' PulsarJava &lt;service url&gt; &lt;admin url&gt;
 *
 *   produce TOPIC N BATCHING(true|false) COMPRESSION(NONE|LZ4|ZLIB|ZSTD|SNAPPY) [start=S] [keys=K]
 *           [batch=B] [gapMs=G] [encryptKey=NAME publicKey=PEM]
 *       messages I = S..S+N-1 (S = 0 unless given): values "java-I", keys "key-(I%K)" (K = 3 unless given),
 *       property idx=I, event time 1700000000000+I; B messages a batch (the last one: the rest, sent by the final
 *       flush - no time limit closes a batch early, so its shape never depends on the machine's load); with gapMs
 *       each is sent once the previous one is stored, G ms later (distinct publish times; each its own batch
 *       after 50 ms); encrypted for the key NAME whose public half is the file PEM with encryptKey; -> the
 *       message ids
 *   consume TOPIC SUBSCRIPTION TYPE(Exclusive|Shared|Failover|Key_Shared) N
 *       from the earliest message, acks each; -> [{value,key,properties,eventTime,publishTime,redeliveryCount,id}]
 *   produce-avro TOPIC DEFINITION RECORDS    DEFINITION: an Avro record schema, RECORDS: a JSON array of objects,
 *       both base64; a producer with that (generic) AVRO schema sends each record -> the message ids
 *   consume-auto TOPIC SUBSCRIPTION N        an AUTO_CONSUME consumer from the earliest message (the client fetches
 *       each message's writer schema by its version), acks each; -> [{version, record: {field: value as text}}]
 *   topics NAMESPACE                         -> admin.topics().getList
 *   create-subscription TOPIC SUB earliest|latest
 *   subscriptions TOPIC                      -> admin.topics().getSubscriptions
 *   reset-cursor-time TOPIC SUB MILLIS       -> admin.topics().resetCursor by publish time
 *   reset-cursor-id TOPIC SUB LEDGER ENTRY   -> admin.topics().resetCursor by message id
 *   stats TOPIC                              -> admin.topics().getStats, as Pulsar's own JSON
 *   last-message-id TOPIC                    -> admin.topics().getLastMessageId as "ledger:entry:partition"
 *   create-partitioned-topic TOPIC N         -> admin.topics().createPartitionedTopic
 *   compact TOPIC                            -> admin.topics().triggerCompaction
 *   compaction-status TOPIC                  -> admin.topics().compactionStatus, as Pulsar's own JSON
 *   partitioned-metadata TOPIC               -> admin.topics().getPartitionedTopicMetadata: the partition count
 *   skip TOPIC SUB N / skip-all TOPIC SUB / expire TOPIC SUB SECONDS / unsubscribe TOPIC SUB
 *   peek TOPIC SUB N                         -> admin.topics().peekMessages: [{id,value,key,properties,
 *                                               eventTime,publishTime,producerName,sequenceId,index}]
 *   tenants, namespaces, namespace and topic policies: the commands of PulsarAdminCalls
 *   any command prefixed with "try " answers {"exception": class, "status": HTTP status} instead of failing
 *   (status 0 for an exception of the client rather than the admin client)
 *
 *   Named consumers and readers that live across commands (a test drives them one command at a time through
 *   PulsarJava.session(); a message is [{topic,id,value,key,properties,eventTime,publishTime,redeliveryCount,
 *   index,brokerPublishTime}] - the last two from the broker entry metadata, null without it):
 *   subscribe NAME TOPIC SUB TYPE [initial=earliest|latest] [consumer=C] [queue=Q] [ackTimeoutMs=T]
 *           [nackDelayMs=D] [pattern=true] [discoveryS=P] [inclusive=true] [batchIndexAck=true]
 *           [privateKey=PEM]
 *       a consumer NAME on TOPIC (pattern=true: TOPIC is a regular expression, topicsPattern); initial position
 *       earliest unless given; privateKey: it decrypts with the private key in the file PEM; -> true
 *   receive NAME N [ack=true|false] [timeoutMs=T] [partial=true]
 *       N messages, each within T ms (60 s unless given), acknowledged unless ack=false; a receive that times
 *       out fails the command, or with partial=true ends it with the messages so far
 *   ack NAME ID / ack-cumulative NAME ID / nack NAME ID   ID = a message NAME received (as printed)
 *   seek NAME ID / seek-time NAME MILLIS                    ID = one NAME received, else one `produce` printed
 *   events NAME                              -> the ACTIVE_CONSUMER_CHANGE events a Failover consumer NAME saw,
 *                                               "active:P"/"inactive:P" (P = the partition)
 *   reader NAME TOPIC earliest|latest|ID [inclusive=true] [compacted=true]   ID = one `produce` printed
 *   read NAME N [timeoutMs=T] [partial=true]  -> messages, as receive
 *   has-available NAME                       -> reader.hasMessageAvailable
 *   producer NAME TOPIC [access=Shared|Exclusive|WaitForExclusive|ExclusiveWithFencing] [wait=false]
 *       an unbatched producer NAME (createAsync); -> true once created (within 60 s), or with wait=false at once:
 *       whether it is created yet (a WaitForExclusive producer is created when it gets the topic)
 *   producer-ready NAME                      -> whether NAME is created yet (a creation that failed fails it)
 *   await-producer NAME                      -> true once NAME is created, within 60 s
 *   send NAME VALUE [key=K]                  one message of text VALUE, sent and stored -> its message id
 *   close NAME                               closes the consumer, reader or producer NAME
 *   close-all                                closes every consumer, reader and producer and forgets what they
 *                                            received
 * </pre>
 */
public final class PulsarJava {
    private static final long EVENT_TIME_BASE = 1_700_000_000_000L;
    private static final long RECEIVE_MS = 60_000;

    /** The session's named consumers, readers, and what each received (ids as printed, for ack/nack/seek). */
    private static final Map<String, Consumer<byte[]>> CONSUMERS = new HashMap<>();
    private static final Map<String, Reader<byte[]>> READERS = new HashMap<>();
    /** The session's named producers, as created asynchronously (a WaitForExclusive one completes late). */
    private static final Map<String, CompletableFuture<Producer<byte[]>>> PRODUCERS = new HashMap<>();
    private static final Map<String, Map<String, Message<byte[]>>> RECEIVED = new HashMap<>();
    private static final Map<String, List<String>> EVENTS = new HashMap<>();
    /** The ids `produce` printed, as the producer returned them (a partitioned topic's carry the partition). */
    private static final Map<String, MessageId> PRODUCED = new HashMap<>();

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
            // Exit without closing the client: what a test needs closed it closes with a command (produce and
            // consume close their own producer and consumer), and the client's graceful close costs two
            // seconds of event-loop shutdown per JVM - a minute over the Java-client matrix.
            System.exit(rc);
        }
    }

    private static String run(PulsarClient client, PulsarAdmin admin, String[] c) throws Exception {
        if ("try".equals(c[0])) {
            try {
                return run(client, admin, java.util.Arrays.copyOfRange(c, 1, c.length));
            } catch (org.apache.pulsar.client.admin.PulsarAdminException e) {
                return "{\"exception\":" + str(e.getClass().getSimpleName()) + ",\"status\":" + e.getStatusCode()
                        + "}";
            } catch (PulsarClientException e) {
                return "{\"exception\":" + str(e.getClass().getSimpleName()) + ",\"status\":0}";
            }
        }
        switch (c[0]) {
            case "create-partitioned-topic":
                admin.topics().createPartitionedTopic(c[1], Integer.parseInt(c[2]));
                return "true";
            case "compact":
                admin.topics().triggerCompaction(c[1]);
                return "true";
            case "compaction-status":
                return ObjectMapperFactory.getMapper().getObjectMapper().writeValueAsString(
                        admin.topics().compactionStatus(c[1]));
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
                        CompressionType.valueOf(c[4]), options(c, 5));
            case "consume":
                return consume(client, c[1], c[2], SubscriptionType.valueOf(c[3]), Integer.parseInt(c[4]));
            case "produce-avro":
                return produceAvro(client, c[1], decode64(c[2]), decode64(c[3]));
            case "consume-auto":
                return consumeAuto(client, c[1], c[2], Integer.parseInt(c[3]));
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
            default: {
                String answer = PulsarAdminCalls.run(admin, c);  // tenants, namespaces, policies
                return answer != null ? answer : session(client, c);
            }
        }
    }

    private static String produce(PulsarClient client, String topic, int n, boolean batching,
                                  CompressionType compression, Map<String, String> opts) throws Exception {
        int start = Integer.parseInt(opts.getOrDefault("start", "0"));
        int keys = Integer.parseInt(opts.getOrDefault("keys", "3"));
        int batch = Integer.parseInt(opts.getOrDefault("batch", "1000"));
        long gap = Long.parseLong(opts.getOrDefault("gapMs", "-1"));
        List<String> ids = new ArrayList<>();
        // without gapMs a batch closes when full or at the final flush, never on a timer: on a loaded machine a 50 ms
        // delay split batches (and the Java client sends a batch of one as an unbatched message)
        long delayMs = gap >= 0 ? 50 : 600_000;
        ProducerBuilder<byte[]> pb = client.newProducer().topic(topic).enableBatching(batching)
                .batchingMaxMessages(batch).batchingMaxPublishDelay(delayMs, TimeUnit.MILLISECONDS)
                .compressionType(compression);
        if (opts.containsKey("encryptKey")) {
            pb.addEncryptionKey(opts.get("encryptKey")).cryptoKeyReader(
                    DefaultCryptoKeyReader.builder().defaultPublicKey("file://" + opts.get("publicKey")).build());
        }
        try (Producer<byte[]> producer = pb.create()) {
            List<java.util.concurrent.CompletableFuture<MessageId>> sends = new ArrayList<>();
            for (int i = start; i < start + n; i++) {
                sends.add(producer.newMessage().key("key-" + (i % keys)).property("idx", Integer.toString(i))
                        .eventTime(EVENT_TIME_BASE + i).value(("java-" + i).getBytes(StandardCharsets.UTF_8))
                        .sendAsync());
                if (gap >= 0) {
                    sends.get(sends.size() - 1).get(60, TimeUnit.SECONDS);
                    Thread.sleep(gap);
                }
            }
            producer.flush();
            for (var f : sends) {
                MessageId id = f.get(60, TimeUnit.SECONDS);
                PRODUCED.put(id.toString(), id);
                ids.add(id.toString());
            }
        }
        return strings(ids);
    }

    /** The stateful commands (see the class comment): named consumers and readers across commands. */
    private static String session(PulsarClient client, String[] c) throws Exception {
        switch (c[0]) {
            case "subscribe":
                return subscribe(client, c[1], c[2], c[3], SubscriptionType.valueOf(c[4]), options(c, 5));
            case "receive": {
                Map<String, String> o = options(c, 3);
                Consumer<byte[]> consumer = consumer(c[1]);
                return take(c[1], Integer.parseInt(c[2]), o, t -> consumer.receive((int) t, TimeUnit.MILLISECONDS),
                        m -> {
                            if (!"false".equals(o.get("ack"))) {
                                consumer.acknowledge(m);
                            }
                        });
            }
            case "ack":
                consumer(c[1]).acknowledge(received(c[1], c[2]));
                return "true";
            case "ack-cumulative":
                consumer(c[1]).acknowledgeCumulative(received(c[1], c[2]));
                return "true";
            case "nack":
                consumer(c[1]).negativeAcknowledge(received(c[1], c[2]));
                return "true";
            case "seek": {
                Message<byte[]> m = RECEIVED.getOrDefault(c[1], Map.of()).get(c[2]);
                MessageId id = m != null ? m.getMessageId() : PRODUCED.get(c[2]);
                if (id == null) {
                    throw new IllegalArgumentException(c[1] + " neither received nor produced " + c[2]);
                }
                consumer(c[1]).seek(id);
                return "true";
            }
            case "seek-time":
                consumer(c[1]).seek(Long.parseLong(c[2]));
                return "true";
            case "events":
                return strings(EVENTS.getOrDefault(c[1], List.of()));
            case "reader":
                return reader(client, c[1], c[2], c[3], options(c, 4));
            case "read": {
                Reader<byte[]> reader = READERS.get(c[1]);
                if (reader == null) {
                    throw new IllegalArgumentException("no reader " + c[1]);
                }
                return take(c[1], Integer.parseInt(c[2]), options(c, 3),
                        t -> reader.readNext((int) t, TimeUnit.MILLISECONDS), m -> { });
            }
            case "has-available":
                return Boolean.toString(READERS.get(c[1]).hasMessageAvailable());
            case "producer":
                return producer(client, c[1], c[2], options(c, 3));
            case "producer-ready":
                return Boolean.toString(created(c[1], false) != null);
            case "await-producer":
                created(c[1], true);
                return "true";
            case "send": {
                Producer<byte[]> producer = created(c[1], false);
                if (producer == null) {
                    throw new IllegalStateException("producer " + c[1] + " is not created yet");
                }
                var m = producer.newMessage().value(c[2].getBytes(StandardCharsets.UTF_8));
                Map<String, String> o = options(c, 3);
                if (o.containsKey("key")) {
                    m.key(o.get("key"));
                }
                return str(m.send().toString());
            }
            case "close-all":
                for (Consumer<byte[]> consumer : CONSUMERS.values()) {
                    consumer.close();
                }
                for (Reader<byte[]> reader : READERS.values()) {
                    reader.close();
                }
                for (CompletableFuture<Producer<byte[]>> f : PRODUCERS.values()) {
                    f.thenAccept(Producer::closeAsync);  // one still waiting for the topic closes once created
                }
                CONSUMERS.clear();
                READERS.clear();
                PRODUCERS.clear();
                RECEIVED.clear();
                EVENTS.clear();
                PRODUCED.clear();
                return "true";
            case "close":
                if (CONSUMERS.containsKey(c[1])) {
                    CONSUMERS.remove(c[1]).close();
                } else if (PRODUCERS.containsKey(c[1])) {
                    PRODUCERS.remove(c[1]).get(RECEIVE_MS, TimeUnit.MILLISECONDS).close();
                } else {
                    READERS.remove(c[1]).close();
                }
                return "true";
            default:
                throw new IllegalArgumentException("unknown command " + c[0]);
        }
    }

    private static String subscribe(PulsarClient client, String name, String topic, String sub,
                                    SubscriptionType type, Map<String, String> o) throws Exception {
        List<String> events = new CopyOnWriteArrayList<>();
        ConsumerBuilder<byte[]> b = client.newConsumer().subscriptionName(sub).subscriptionType(type)
                .subscriptionInitialPosition("latest".equals(o.get("initial")) ? SubscriptionInitialPosition.Latest
                        : SubscriptionInitialPosition.Earliest);
        if (type == SubscriptionType.Failover) {  // the client refuses the listener for any other type
            b.consumerEventListener(new ConsumerEventListener() {
                @Override
                public void becameActive(Consumer<?> consumer, int partitionId) {
                    events.add("active:" + partitionId);
                }

                @Override
                public void becameInactive(Consumer<?> consumer, int partitionId) {
                    events.add("inactive:" + partitionId);
                }
            });
        }
        if ("true".equals(o.get("pattern"))) {
            b.topicsPattern(Pattern.compile(topic))
                    .patternAutoDiscoveryPeriod(Integer.parseInt(o.getOrDefault("discoveryS", "1")), TimeUnit.SECONDS);
        } else {
            b.topic(topic);
        }
        if (o.containsKey("privateKey")) {
            b.cryptoKeyReader(DefaultCryptoKeyReader.builder().defaultPrivateKey("file://" + o.get("privateKey"))
                    .build());
        }
        if (o.containsKey("consumer")) {
            b.consumerName(o.get("consumer"));
        }
        if (o.containsKey("queue")) {
            b.receiverQueueSize(Integer.parseInt(o.get("queue")));
        }
        if (o.containsKey("ackTimeoutMs")) {
            b.ackTimeout(Long.parseLong(o.get("ackTimeoutMs")), TimeUnit.MILLISECONDS)
                    .ackTimeoutTickTime(100, TimeUnit.MILLISECONDS);
        }
        if (o.containsKey("nackDelayMs")) {
            b.negativeAckRedeliveryDelay(Long.parseLong(o.get("nackDelayMs")), TimeUnit.MILLISECONDS);
        }
        if ("true".equals(o.get("inclusive"))) {
            b.startMessageIdInclusive();
        }
        if ("true".equals(o.get("batchIndexAck"))) {
            b.enableBatchIndexAcknowledgment(true);
        }
        Consumer<byte[]> consumer = b.subscribe();
        CONSUMERS.put(name, consumer);
        EVENTS.put(name, events);
        RECEIVED.put(name, new HashMap<>());
        return "true";
    }

    private static String producer(PulsarClient client, String name, String topic, Map<String, String> o)
            throws Exception {
        CompletableFuture<Producer<byte[]>> f = client.newProducer().topic(topic).enableBatching(false)
                .accessMode(ProducerAccessMode.valueOf(o.getOrDefault("access", "Shared"))).createAsync();
        PRODUCERS.put(name, f);
        if ("false".equals(o.get("wait"))) {
            return Boolean.toString(f.isDone() && !f.isCompletedExceptionally());
        }
        created(name, true);
        return "true";
    }

    /** The producer NAME once created: waiting up to RECEIVE_MS with `wait`, else null while it is not yet. */
    private static Producer<byte[]> created(String name, boolean wait) throws Exception {
        CompletableFuture<Producer<byte[]>> f = PRODUCERS.get(name);
        if (f == null) {
            throw new IllegalArgumentException("no producer " + name);
        }
        if (!wait && !f.isDone()) {
            return null;
        }
        try {
            return f.get(RECEIVE_MS, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.ExecutionException e) {  // what its creation failed with, as `try` reports it
            throw e.getCause() instanceof Exception cause ? cause : e;
        }
    }

    private static String reader(PulsarClient client, String name, String topic, String start,
                                 Map<String, String> o) throws Exception {
        MessageId from = switch (start) {
            case "earliest" -> MessageId.earliest;
            case "latest" -> MessageId.latest;
            default -> {
                MessageId id = PRODUCED.get(start);
                if (id == null) {
                    throw new IllegalArgumentException("no message " + start + " was produced");
                }
                yield id;
            }
        };
        var b = client.newReader().topic(topic).startMessageId(from);
        if ("true".equals(o.get("inclusive"))) {
            b.startMessageIdInclusive();
        }
        if ("true".equals(o.get("compacted"))) {
            b.readCompacted(true);
        }
        READERS.put(name, b.create());
        RECEIVED.put(name, new HashMap<>());
        return "true";
    }

    private interface Receive {
        Message<byte[]> next(long timeoutMs) throws Exception;
    }

    private interface Handle {
        void accept(Message<byte[]> m) throws Exception;
    }

    /** Up to n messages through `next`, each handed to `then` and remembered under `name` (see receive). */
    private static String take(String name, int n, Map<String, String> o, Receive next, Handle then)
            throws Exception {
        long timeout = Long.parseLong(o.getOrDefault("timeoutMs", Long.toString(RECEIVE_MS)));
        StringBuilder sb = new StringBuilder("[");
        for (int i = 0; i < n; i++) {
            Message<byte[]> m = next.next(timeout);
            if (m == null) {
                if ("true".equals(o.get("partial"))) {
                    break;
                }
                throw new IllegalStateException(name + " received " + i + " of " + n + " messages, the last "
                        + "receive waited " + timeout + " ms");
            }
            RECEIVED.get(name).put(m.getMessageId().toString(), m);
            then.accept(m);
            sb.append(i > 0 ? "," : "").append(message(m));
        }
        return sb.append(']').toString();
    }

    private static Consumer<byte[]> consumer(String name) {
        Consumer<byte[]> consumer = CONSUMERS.get(name);
        if (consumer == null) {
            throw new IllegalArgumentException("no consumer " + name);
        }
        return consumer;
    }

    private static Message<byte[]> received(String name, String id) {
        Message<byte[]> m = RECEIVED.getOrDefault(name, Map.of()).get(id);
        if (m == null) {
            throw new IllegalArgumentException(name + " never received " + id);
        }
        return m;
    }

    /** Options "key=value" from c[from] on. */
    private static Map<String, String> options(String[] c, int from) {
        Map<String, String> o = new HashMap<>();
        for (int i = from; i < c.length; i++) {
            int eq = c[i].indexOf('=');
            if (eq < 0) {
                throw new IllegalArgumentException("not an option (key=value): " + c[i]);
            }
            o.put(c[i].substring(0, eq), c[i].substring(eq + 1));
        }
        return o;
    }

    private static String message(Message<byte[]> m) {
        Map<String, String> props = new TreeMap<>(m.getProperties());
        StringBuilder p = new StringBuilder("{");
        for (var e : props.entrySet()) {
            p.append(p.length() > 1 ? "," : "").append(str(e.getKey())).append(':').append(str(e.getValue()));
        }
        p.append('}');
        byte[] value = m.getValue();
        return "{\"topic\":" + str(m.getTopicName())
                + ",\"id\":" + str(m.getMessageId().toString())
                + ",\"value\":" + (value == null ? "null" : str(new String(value, StandardCharsets.UTF_8)))
                + ",\"key\":" + (m.hasKey() ? str(m.getKey()) : "null")
                + ",\"properties\":" + p
                + ",\"eventTime\":" + m.getEventTime()
                + ",\"publishTime\":" + m.getPublishTime()
                + ",\"redeliveryCount\":" + m.getRedeliveryCount()
                + ",\"index\":" + m.getIndex().map(Object::toString).orElse("null")
                + ",\"brokerPublishTime\":" + m.getBrokerPublishTime().map(Object::toString).orElse("null") + "}";
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

    private static String decode64(String text) {
        return new String(java.util.Base64.getDecoder().decode(text), StandardCharsets.UTF_8);
    }

    private static String produceAvro(PulsarClient client, String topic, String definition, String records)
            throws Exception {
        org.apache.pulsar.common.schema.SchemaInfo info = org.apache.pulsar.common.schema.SchemaInfo.builder()
                .name(topic).type(org.apache.pulsar.common.schema.SchemaType.AVRO)
                .schema(definition.getBytes(StandardCharsets.UTF_8)).properties(Map.of()).build();
        org.apache.pulsar.client.api.schema.GenericSchema<org.apache.pulsar.client.api.schema.GenericRecord> schema =
                org.apache.pulsar.client.api.Schema.generic(info);
        List<String> ids = new ArrayList<>();
        try (Producer<org.apache.pulsar.client.api.schema.GenericRecord> producer =
                     client.newProducer(schema).topic(topic).enableBatching(false).create()) {
            for (com.fasterxml.jackson.databind.JsonNode rec
                    : new com.fasterxml.jackson.databind.ObjectMapper().readTree(records)) {
                var builder = schema.newRecordBuilder();
                var fields = rec.fields();
                while (fields.hasNext()) {
                    var f = fields.next();
                    JsonValue v = new JsonValue(f.getValue());
                    builder.set(f.getKey(), v.value());
                }
                ids.add(producer.send(builder.build()).toString());
            }
        }
        return strings(ids);
    }

    /** A JSON value as the Avro record builder takes it: int, long, text or null. */
    private record JsonValue(com.fasterxml.jackson.databind.JsonNode node) {
        Object value() {
            if (node.isNull()) {
                return null;
            }
            if (node.isInt()) {
                return node.intValue();
            }
            if (node.isLong()) {
                return node.longValue();
            }
            return node.asText();
        }
    }

    private static String consumeAuto(PulsarClient client, String topic, String sub, int n) throws Exception {
        StringBuilder sb = new StringBuilder("[");
        try (Consumer<org.apache.pulsar.client.api.schema.GenericRecord> consumer =
                     client.newConsumer(org.apache.pulsar.client.api.Schema.AUTO_CONSUME()).topic(topic)
                             .subscriptionName(sub).subscriptionInitialPosition(SubscriptionInitialPosition.Earliest)
                             .subscribe()) {
            for (int i = 0; i < n; i++) {
                Message<org.apache.pulsar.client.api.schema.GenericRecord> m = consumer.receive(60, TimeUnit.SECONDS);
                if (m == null) {
                    throw new IllegalStateException("received " + i + " of " + n + " messages within 60 s");
                }
                consumer.acknowledge(m);
                byte[] version = m.getSchemaVersion();
                StringBuilder r = new StringBuilder("{");
                var rec = m.getValue();
                for (var f : rec.getFields()) {
                    Object v = rec.getField(f);
                    r.append(r.length() > 1 ? "," : "").append(str(f.getName())).append(':')
                            .append(v == null ? "null" : str(v.toString()));
                }
                r.append('}');
                sb.append(i > 0 ? "," : "").append("{\"version\":")
                        .append(version == null ? "null" : Long.toString(java.nio.ByteBuffer.wrap(version).getLong()))
                        .append(",\"record\":").append(r).append('}');
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
