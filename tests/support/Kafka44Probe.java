// A Kafka 4.4 Java producer, consumer and admin client, for tests/e2e/test_kafka44_versions.py: run against the
// kafka-clients 4.4 jar of the suite's Kafka (.cache/kafka-libs-<version>/, scripts/setup), so that they speak the newest versions
// (ApiVersions v5, Produce v13, Fetch v18, ListOffsets v11, Metadata v13, OffsetCommit/OffsetFetch v10,
// DescribeTopicPartitions v0, DescribeCluster v2, TxnOffsetCommit v6, EndTxn v5) wherever the broker offers them.
//
//   run <bootstrap> <topic> <group> <count>
//     describes the topic (Admin.describeTopics) and the cluster (Admin.describeCluster), produces <count> records "v<i>" with keys "k<i>" (acks=all),
//     consumes them from the earliest offset in group <group> (group.protocol=consumer, KIP-848: the classic
//     consumer stays on OffsetCommit/OffsetFetch v9), commits, and reads the committed offsets back.
//     Then, transactionally (a transactional.id of its own, transaction.version 2 where the broker finalizes it):
//     a second consumer (group <group>-txn, read_committed) reads the <count> records again, and one transaction
//     writes one record "t<p>" per partition read and commits the consumed offsets with sendOffsetsToTransaction
//     (TxnOffsetCommit, topics by id at v6), then commits (EndTxn); the group's committed offsets are read back.
//     Prints: PARTITIONS <n>, NODES <brokers>, SENT <count>, READ <value>... in partition then offset order, COMMITTED <p> <offset>
//     per partition, TXN <p> <offset> per partition of the transactional group, DONE.
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class Kafka44Probe {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[1], topic = args[2], group = args[3];
        int count = Integer.parseInt(args[4]);

        Properties a = new Properties();
        a.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(a)) {
            TopicDescription d = admin.describeTopics(List.of(topic)).allTopicNames().get().get(topic);
            System.out.println("PARTITIONS " + d.partitions().size());
            System.out.println("NODES " + admin.describeCluster().nodes().get().size());
        }

        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", "all");
        p.put("max.block.ms", "60000");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            for (int i = 0; i < count; i++) {
                producer.send(new ProducerRecord<>(topic, "k" + i, "v" + i)).get();
            }
        }
        System.out.println("SENT " + count);

        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group);
        c.put("group.protocol", "consumer");  // KIP-848: the consumer that commits and fetches offsets by topic id (v10)
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        Map<Integer, List<String>> read = new TreeMap<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            int got = 0;
            long deadline = System.currentTimeMillis() + 60_000;
            while (got < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    read.computeIfAbsent(r.partition(), k -> new ArrayList<>()).add(r.value());
                    got++;
                }
            }
            consumer.commitSync();
            Set<TopicPartition> assigned = consumer.assignment();
            Map<TopicPartition, OffsetAndMetadata> committed = consumer.committed(assigned);
            for (List<String> values : read.values()) {
                for (String v : values) {
                    System.out.println("READ " + v);
                }
            }
            Map<Integer, Long> offsets = new TreeMap<>();
            committed.forEach((tp, om) -> offsets.put(tp.partition(), om == null ? -1L : om.offset()));
            offsets.forEach((part, off) -> System.out.println("COMMITTED " + part + " " + off));
        }
        transactional(bootstrap, topic, group, count);
        System.out.println("DONE");
    }

    /** Consume-transform-produce in one transaction, the consumed offsets committed with it. */
    static void transactional(String bootstrap, String topic, String group, int count) throws Exception {
        Properties c = new Properties();
        c.put("bootstrap.servers", bootstrap);
        c.put("group.id", group + "-txn");
        c.put("group.protocol", "consumer");
        c.put("enable.auto.commit", "false");
        c.put("auto.offset.reset", "earliest");
        c.put("isolation.level", "read_committed");
        c.put("key.deserializer", StringDeserializer.class.getName());
        c.put("value.deserializer", StringDeserializer.class.getName());
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", "tx-" + group);
        p.put("max.block.ms", "60000");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c);
             KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            producer.initTransactions();
            consumer.subscribe(List.of(topic));
            Map<TopicPartition, OffsetAndMetadata> next = new HashMap<>();
            int got = 0;
            long deadline = System.currentTimeMillis() + 60_000;
            while (got < count && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    next.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    got++;
                }
            }
            producer.beginTransaction();
            for (TopicPartition tp : next.keySet()) {
                producer.send(new ProducerRecord<>(topic, tp.partition(), "t", "t" + tp.partition()));
            }
            producer.sendOffsetsToTransaction(next, consumer.groupMetadata());
            producer.commitTransaction();
            Map<Integer, Long> offsets = new TreeMap<>();
            consumer.committed(next.keySet()).forEach((tp, om) -> offsets.put(tp.partition(), om == null ? -1L : om.offset()));
            offsets.forEach((part, off) -> System.out.println("TXN " + part + " " + off));
        }
    }
}
