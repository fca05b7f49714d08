// A transactional Java producer and a consumer with a chosen isolation level, for tests/e2e/test_transactions.py.
// Runs as a single-file source program against the Kafka 4.x client jars (tests/support/java.py).
//
//   produce <bootstrap> <topic> <transactional.id> <plan>   plan: e.g. "C3,A2,C1" = commit 3 records,
//                                                           abort 2, commit 1; records "<txn>-<i>"; prints OK
//   consume <bootstrap> <topic> <read_committed|read_uncommitted> <count> <timeout ms>
//                                                           prints each value read, then END
//   hang <bootstrap> <topic> <transactional.id> <count>     sends <count> records in a transaction, flushes, prints
//                                                           READY, then waits for stdin to close (never commits)
//   ctp <bootstrap> <in> <out> <group> <transactional.id> <total>
//                                                           consume-transform-produce: reads <in> partition 0 from
//                                                           the group's committed offset (read_committed), writes
//                                                           "out-<value>" to <out> with the consumed offsets in the
//                                                           same transaction, at most 20 records per transaction;
//                                                           prints SENT <next offset> once a transaction's records
//                                                           are written, COMMITTED <next offset> after its commit, DONE
//                                                           once <total> records are consumed
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class TxnProbe {
    static KafkaProducer<String, String> producer(String bootstrap, String txnId) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("transactional.id", txnId);
        p.put("transaction.timeout.ms", "60000");
        p.put("max.block.ms", "60000");
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        return new KafkaProducer<>(p);
    }

    static void consumeTransformProduce(String bootstrap, String in, String out, String group, String txnId,
                                        long total) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("isolation.level", "read_committed");
        p.put("max.poll.records", "20");
        p.put("key.deserializer", StringDeserializer.class.getName());
        p.put("value.deserializer", StringDeserializer.class.getName());
        TopicPartition tp = new TopicPartition(in, 0);
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p);
             KafkaProducer<String, String> producer = producer(bootstrap, txnId)) {
            producer.initTransactions();
            consumer.assign(List.of(tp));
            while (consumer.position(tp) < total) {
                var records = consumer.poll(Duration.ofMillis(200));
                if (records.isEmpty()) continue;
                producer.beginTransaction();
                long next = -1;
                for (ConsumerRecord<String, String> r : records) {
                    producer.send(new ProducerRecord<>(out, 0, r.key(), "out-" + r.value()));
                    next = r.offset() + 1;
                }
                producer.flush();
                System.out.println("SENT " + next);  // the records are in the log, the transaction still open
                System.out.flush();
                producer.sendOffsetsToTransaction(
                    java.util.Map.of(tp, new org.apache.kafka.clients.consumer.OffsetAndMetadata(next)),
                    consumer.groupMetadata());
                producer.commitTransaction();
                System.out.println("COMMITTED " + next);
                System.out.flush();
            }
        }
        System.out.println("DONE");
    }

    /** Whether the consumer's position is at the end offset of every partition (what its isolation level reads). */
    static boolean atEnd(KafkaConsumer<String, String> consumer, List<TopicPartition> parts) {
        var ends = consumer.endOffsets(parts);
        return parts.stream().allMatch(tp -> consumer.position(tp) >= ends.get(tp));
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String bootstrap = args[1];
        String topic = args[2];
        if (mode.equals("produce")) {
            try (KafkaProducer<String, String> producer = producer(bootstrap, args[3])) {
                producer.initTransactions();
                int txn = 0;
                for (String step : args[4].split(",")) {
                    boolean commit = step.charAt(0) == 'C';
                    int n = Integer.parseInt(step.substring(1));
                    producer.beginTransaction();
                    for (int i = 0; i < n; i++) {
                        String v = (commit ? "c" : "a") + txn + "-" + i;
                        producer.send(new ProducerRecord<>(topic, i % 2, v, v));
                    }
                    producer.flush();
                    if (commit) producer.commitTransaction(); else producer.abortTransaction();
                    txn++;
                }
            }
            System.out.println("OK");
        } else if (mode.equals("consume")) {
            Properties p = new Properties();
            p.put("bootstrap.servers", bootstrap);
            p.put("isolation.level", args[3]);
            p.put("key.deserializer", StringDeserializer.class.getName());
            p.put("value.deserializer", StringDeserializer.class.getName());
            int want = Integer.parseInt(args[4]);
            long deadline = System.currentTimeMillis() + Long.parseLong(args[5]);
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(p)) {
                List<TopicPartition> parts = new ArrayList<>();
                consumer.partitionsFor(topic).forEach(pi -> parts.add(new TopicPartition(topic, pi.partition())));
                consumer.assign(parts);
                consumer.seekToBeginning(parts);
                int got = 0;
                while (got < want && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                        System.out.println(r.value());
                        got++;
                    }
                }
                // read on to the end of every partition (its end offset: for read_committed the last stable
                // offset), or for a second at most: anything beyond `want` is a record that should not be there
                long extra = System.currentTimeMillis() + 1000;
                while (System.currentTimeMillis() < extra && !atEnd(consumer, parts)) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                        System.out.println(r.value());
                    }
                }
            }
            System.out.println("END");
        } else if (mode.equals("ctp")) {
            consumeTransformProduce(bootstrap, topic, args[3], args[4], args[5], Long.parseLong(args[6]));
        } else if (mode.equals("hang")) {
            KafkaProducer<String, String> producer = producer(bootstrap, args[3]);
            producer.initTransactions();
            producer.beginTransaction();
            for (int i = 0; i < Integer.parseInt(args[4]); i++) {
                producer.send(new ProducerRecord<>(topic, 0, "h" + i, "h" + i));
            }
            producer.flush();
            System.out.println("READY");
            System.out.flush();
            while (System.in.read() >= 0) { }
            producer.close(Duration.ZERO);
        }
    }
}
