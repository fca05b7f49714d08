// Kafka 4.4 share consumers (KIP-932's KafkaShareConsumer, kafka-clients 4.4 of the suite's Kafka jars) for
// tests/e2e/test_share_groups.py.
//
//   run <bootstrap> <topic> <group> <count> <consumers>
//     sets the group's share.auto.offset.reset to earliest (IncrementalAlterConfigs on the GROUP resource),
//     produces <count> records "v<i>" one batch each, then runs <consumers> share consumers of the group in
//     threads, explicit acknowledgement, max.poll.records 3: a record whose index is a multiple of 3 is
//     RELEASEd at its first delivery, every other delivery ACCEPTed. They stop once every record is accepted.
//     A last consumer of the group then reads until it gets one more record "marker" produced afterwards.
//     Prints: SENT <count>, DELIVERY <consumer> <value> <deliveryCount> <ACCEPT|RELEASE> per delivery,
//     AFTER <value> per record of the last consumer, DONE.
//
//   part <bootstrap> <topic> <group> <accept-below> <accepts> [<group config>=<value>]
//     sets share.auto.offset.reset to earliest (and the config given), then one share consumer (explicit acknowledgement) ACCEPTs the
//     records "r<i>" with i < <accept-below> and RELEASEs the others, until it accepted <accepts> records.
//     Prints: GOT <value> <ACCEPT|RELEASE> <deliveryCount> per delivery, DONE.
//
//   dlq <bootstrap> <topic> <group> <delivery limit> [<group config>=<value>...]
//     sets share.auto.offset.reset to earliest and the configs given, then one share consumer (explicit
//     acknowledgement) REJECTs the records "x<i>", RELEASEs the records "r<i>" and ACCEPTs the others, until it
//     accepted "end" and released every "r" record at the delivery limit (then the broker archives it).
//     Prints: GOT <value> <ACCEPT|RELEASE|REJECT> <deliveryCount> per delivery, DONE.
//
//   crash <bootstrap> <topic> <group>
//     sets share.auto.offset.reset to earliest and share.record.lock.duration.ms to 15000 (Kafka's minimum),
//     then one share consumer polls until it holds records, prints HELD <value> for each and halts the JVM at
//     once: no acknowledgement, no close - its records come back when the broker sees its connection close (or
//     their locks time out).
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ShareProbe {
    static final long DEADLINE_MS = 90_000;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[1], topic = args[2], group = args[3];
        earliest(bootstrap, group);
        if (args[0].equals("crash")) {
            crash(bootstrap, topic, group);
            return;
        }
        if (args[0].equals("dlq")) {
            for (int i = 5; i < args.length; i++) setConfig(bootstrap, group, args[i].split("=", 2)[0], args[i].split("=", 2)[1]);
            dlq(bootstrap, topic, group, Integer.parseInt(args[4]));
            return;
        }
        if (args[0].equals("part")) {
            if (args.length > 6) setConfig(bootstrap, group, args[6].split("=", 2)[0], args[6].split("=", 2)[1]);
            part(bootstrap, topic, group, Integer.parseInt(args[4]), Integer.parseInt(args[5]));
            return;
        }
        int count = Integer.parseInt(args[4]), consumers = Integer.parseInt(args[5]);
        produce(bootstrap, topic, count, "v");
        System.out.println("SENT " + count);

        Set<String> accepted = ConcurrentHashMap.newKeySet();
        List<Thread> threads = new ArrayList<>();
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        for (int c = 0; c < consumers; c++) {
            final int id = c;
            Thread t = new Thread(() -> consume(bootstrap, topic, group, id, count, accepted, deadline));
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) t.join();
        if (accepted.size() != count) throw new IllegalStateException("accepted " + accepted.size() + " of " + count);

        produce(bootstrap, topic, 1, "marker");
        try (KafkaShareConsumer<String, String> last = consumer(bootstrap, group)) {
            last.subscribe(List.of(topic));
            boolean marker = false;
            while (!marker && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : last.poll(Duration.ofMillis(500))) {
                    System.out.println("AFTER " + r.value());
                    marker |= r.value().startsWith("marker");
                }
            }
            last.commitSync();
        }
        System.out.println("DONE");
    }

    static void earliest(String bootstrap, String group) throws Exception {
        setConfig(bootstrap, group, "share.auto.offset.reset", "earliest");
    }

    static void setConfig(String bootstrap, String group, String name, String value) throws Exception {
        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(a)) {
            ConfigResource res = new ConfigResource(ConfigResource.Type.GROUP, group);
            AlterConfigOp op = new AlterConfigOp(new ConfigEntry(name, value), AlterConfigOp.OpType.SET);
            admin.incrementalAlterConfigs(Map.of(res, List.of(op))).all().get();
        }
    }

    static void crash(String bootstrap, String topic, String group) throws Exception {
        setConfig(bootstrap, group, "share.record.lock.duration.ms", "15000");
        KafkaShareConsumer<String, String> consumer = consumer(bootstrap, group);
        consumer.subscribe(List.of(topic));
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        while (System.currentTimeMillis() < deadline) {
            var records = consumer.poll(Duration.ofMillis(200));
            if (records.isEmpty()) continue;
            for (ConsumerRecord<String, String> r : records) System.out.println("HELD " + r.value());
            System.out.flush();
            Runtime.getRuntime().halt(0);
        }
        throw new IllegalStateException("no records");
    }

    static void part(String bootstrap, String topic, String group, int acceptBelow, int accepts) {
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        int accepted = 0;
        try (KafkaShareConsumer<String, String> consumer = consumer(bootstrap, group)) {
            consumer.subscribe(List.of(topic));
            while (accepted < accepts && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    boolean accept = Integer.parseInt(r.value().substring(1)) < acceptBelow;
                    consumer.acknowledge(r, accept ? AcknowledgeType.ACCEPT : AcknowledgeType.RELEASE);
                    System.out.println("GOT " + r.value() + " " + (accept ? "ACCEPT" : "RELEASE") + " "
                                       + r.deliveryCount().orElse((short) -1));
                    if (accept) accepted++;
                }
                consumer.commitSync();
            }
        }
        if (accepted < accepts) throw new IllegalStateException("accepted " + accepted + " of " + accepts);
        System.out.println("DONE");
    }

    static void dlq(String bootstrap, String topic, String group, int limit) {
        long deadline = System.currentTimeMillis() + DEADLINE_MS;
        Map<String, Short> released = new ConcurrentHashMap<>();
        boolean end = false;
        try (KafkaShareConsumer<String, String> consumer = consumer(bootstrap, group)) {
            consumer.subscribe(List.of(topic));
            while (!(end && released.values().stream().allMatch(n -> n >= limit))
                   && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    short delivery = r.deliveryCount().orElse((short) -1);
                    AcknowledgeType type = r.value().startsWith("x") ? AcknowledgeType.REJECT
                        : r.value().startsWith("r") ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT;
                    consumer.acknowledge(r, type);
                    System.out.println("GOT " + r.value() + " " + type + " " + delivery);
                    if (type == AcknowledgeType.RELEASE) released.merge(r.value(), delivery, (a, b) -> (short) Math.max(a, b));
                    end |= r.value().equals("end");
                }
                consumer.commitSync();
            }
        }
        if (!end) throw new IllegalStateException("no end record");
        System.out.println("DONE");
    }

    static void produce(String bootstrap, String topic, int count, String prefix) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("linger.ms", "0");
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, prefix + (prefix.equals("v") ? i : ""))).get();
            }
        }
    }

    static KafkaShareConsumer<String, String> consumer(String bootstrap, String group) {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        c.put("share.acknowledgement.mode", "explicit");
        c.put("max.poll.records", "3");
        return new KafkaShareConsumer<>(c);
    }

    static void consume(String bootstrap, String topic, String group, int id, int count, Set<String> accepted,
                        long deadline) {
        try (KafkaShareConsumer<String, String> consumer = consumer(bootstrap, group)) {
            consumer.subscribe(List.of(topic));
            while (accepted.size() < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    int index = Integer.parseInt(r.value().substring(1));
                    short delivery = r.deliveryCount().orElse((short) -1);
                    boolean release = index % 3 == 0 && delivery == 1;
                    consumer.acknowledge(r, release ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                    synchronized (System.out) {
                        System.out.println("DELIVERY " + id + " " + r.value() + " " + delivery + " "
                                           + (release ? "RELEASE" : "ACCEPT"));
                    }
                    if (!release) accepted.add(r.value());
                }
                consumer.commitSync();
            }
        }
    }
}
