// Produce -> delivery latency to share consumers (KIP-932), for bench/share.py: Kafka 4.4 ships
// ShareConsumerPerformance (throughput only) and no share-group counterpart of EndToEndLatency, so this is that.
//
//   ShareLatency <bootstrap> <topic> <group> <records> <record size> <consumers> <acks>
//
// The caller sets the group's share.auto.offset.reset to earliest first (bench/share.py). Starts
// <consumers> KafkaShareConsumers of the group in threads (implicit acknowledgement: a poll acknowledges the
// records of the one before), sends warm-up records until one is delivered (the members have joined and the
// share-partition is initialised), then sends <records> records one at a time, as EndToEndLatency does: record i
// carries i in its first 8 bytes; its latency is from just before send() to the moment a consumer's poll returned
// it (System.nanoTime, one JVM). The next record is sent only after that delivery. A delivery of an older record
// (a redelivery) is counted, not timed; a record not delivered within 30 s fails the run.
//
// Prints one line:
//   SHARE-LATENCY records=<n> avg_ms=<a> p50_ms=<b> p99_ms=<c> p999_ms=<d> max_ms=<e> redelivered=<r>
//                 consumers_used=<k> per_consumer=<c0>/<c1>/...
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ShareLatency {
    static final long WARMUP = -1;

    /** One delivery: the record's sequence number, when the poll returned it, which consumer. */
    record Delivery(long seq, long nanos, int consumer) {}

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1], group = args[2];
        int records = Integer.parseInt(args[3]), size = Math.max(8, Integer.parseInt(args[4]));
        int consumers = Integer.parseInt(args[5]);
        String acks = args[6];
        LinkedBlockingQueue<Delivery> queue = new LinkedBlockingQueue<>();
        AtomicBoolean stop = new AtomicBoolean();
        List<Thread> threads = new ArrayList<>();
        for (int c = 0; c < consumers; c++) {
            final int id = c;
            Thread t = new Thread(() -> consume(bootstrap, topic, group, id, queue, stop), "share-" + c);
            threads.add(t);
            t.start();
        }
        int[] perConsumer = new int[consumers];
        long[] latencies = new long[records];
        int redelivered = 0;
        try (KafkaProducer<byte[], byte[]> producer = producer(bootstrap, acks)) {
            warmUp(producer, topic, size, queue);
            for (int i = 0; i < records; i++) {
                byte[] value = ByteBuffer.allocate(size).putLong(i).array();
                long t0 = System.nanoTime();
                var sent = producer.send(new ProducerRecord<>(topic, value));
                while (true) {
                    Delivery d = queue.poll(30, TimeUnit.SECONDS);
                    if (d == null) throw new IllegalStateException("record " + i + " not delivered within 30 s");
                    if (d.seq() == WARMUP) continue; // a warm-up record still in flight
                    if (d.seq() != i) {
                        redelivered++;
                        continue;
                    }
                    latencies[i] = d.nanos() - t0;
                    perConsumer[d.consumer()]++;
                    break;
                }
                sent.get(30, TimeUnit.SECONDS);
            }
        } finally {
            stop.set(true);
            for (Thread t : threads) t.join(30_000);
        }
        print(latencies, redelivered, perConsumer);
    }

    /** Warm-up records (sequence -1) until one is delivered: the members joined, the share-partition is set up. */
    static void warmUp(KafkaProducer<byte[], byte[]> producer, String topic, int size, LinkedBlockingQueue<Delivery> queue)
            throws Exception {
        long deadline = System.currentTimeMillis() + 120_000;
        while (System.currentTimeMillis() < deadline) {
            producer.send(new ProducerRecord<>(topic, ByteBuffer.allocate(size).putLong(WARMUP).array())).get();
            Delivery d = queue.poll(1, TimeUnit.SECONDS);
            if (d != null) {
                Thread.sleep(500); // the other warm-up records still in flight
                queue.clear();
                return;
            }
        }
        throw new IllegalStateException("no warm-up record delivered within 120 s");
    }

    static void print(long[] latencies, int redelivered, int[] perConsumer) {
        long[] sorted = latencies.clone();
        Arrays.sort(sorted);
        double sum = 0;
        for (long v : sorted) sum += v;
        int used = 0;
        StringBuilder per = new StringBuilder();
        for (int i = 0; i < perConsumer.length; i++) {
            if (perConsumer[i] > 0) used++;
            per.append(i == 0 ? "" : "/").append(perConsumer[i]);
        }
        System.out.printf("SHARE-LATENCY records=%d avg_ms=%.3f p50_ms=%.3f p99_ms=%.3f p999_ms=%.3f max_ms=%.3f "
                + "redelivered=%d consumers_used=%d per_consumer=%s%n", sorted.length, sum / sorted.length / 1e6,
                pct(sorted, 0.50), pct(sorted, 0.99), pct(sorted, 0.999), sorted[sorted.length - 1] / 1e6,
                redelivered, used, per);
    }

    /** The nearest-rank percentile, in ms. */
    static double pct(long[] sorted, double p) {
        int rank = (int) Math.ceil(p * sorted.length);
        return sorted[Math.max(0, Math.min(sorted.length - 1, rank - 1))] / 1e6;
    }

    static void consume(String bootstrap, String topic, String group, int id, LinkedBlockingQueue<Delivery> queue,
                        AtomicBoolean stop) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("group.id", group);
        p.put("client.id", group + "-" + id);
        p.put("key.deserializer", ByteArrayDeserializer.class.getName());
        p.put("value.deserializer", ByteArrayDeserializer.class.getName());
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(p)) {
            consumer.subscribe(List.of(topic));
            while (!stop.get()) {
                var polled = consumer.poll(Duration.ofMillis(100));
                long now = System.nanoTime();
                for (ConsumerRecord<byte[], byte[]> r : polled) {
                    queue.add(new Delivery(ByteBuffer.wrap(r.value()).getLong(), now, id));
                }
            }
            consumer.commitSync();
        }
    }

    static KafkaProducer<byte[], byte[]> producer(String bootstrap, String acks) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("acks", acks);
        p.put("linger.ms", "0");
        p.put("key.serializer", ByteArraySerializer.class.getName());
        p.put("value.serializer", ByteArraySerializer.class.getName());
        return new KafkaProducer<>(p);
    }
}
