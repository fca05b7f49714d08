// Command loadgen is the capacity benchmark's light load generator (issue 27): it produces N records of S bytes
// round-robin over P partitions of an existing topic with acks=all, then consumes them back from offset 0 of
// every partition (direct assignment, no group), and prints one JSON line with the counts, the times and its
// own CPU seconds (getrusage), so that the bench can tell the broker's CPU from the generator's.
//
// It is written to cost as little CPU per record as a Kafka client can: one shared value buffer, a fixed pool
// of kgo.Record reused once their promise fired (no allocation per produced record), long linger and big
// batches, no compression, no consumer group. The perf tools' JVMs it replaces used several times our broker's
// CPU on a 2-core machine, so their figures measured the generator, not the broker.
//
// -clients N runs N producer clients and then N consumer clients at once, client i owning the partitions p with
// p % N == i. Why: franz-go keeps one produce request in flight per broker connection for an idempotent producer
// (sequence numbers stay gapless that way), so one client measures the round trip of a request, not how much the
// broker can take; several connections keep the broker busy, which is what a capacity figure is about.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

type result struct {
	Records       int64   `json:"records"`
	Bytes         int64   `json:"bytes"`
	Partitions    int     `json:"partitions"`
	Clients       int     `json:"clients"`
	ProduceS      float64 `json:"produce_s"`
	ProduceRps    float64 `json:"produce_records_per_s"`
	ProduceMBps   float64 `json:"produce_mb_per_s"`
	ProduceCPUS   float64 `json:"produce_cpu_s"`
	Consumed      int64   `json:"consumed"`
	ConsumedBytes int64   `json:"consumed_bytes"`
	ConsumeS      float64 `json:"consume_s"`
	ConsumeRps    float64 `json:"consume_records_per_s"`
	ConsumeMBps   float64 `json:"consume_mb_per_s"`
	ConsumeCPUS   float64 `json:"consume_cpu_s"`
	Seconds       float64 `json:"seconds"`
	CPUS          float64 `json:"cpu_s"`
}

// cpuSeconds is this process's user + system CPU time (all its threads).
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return -1
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}

func die(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "loadgen: "+format+"\n", args...)
	os.Exit(1)
}

// produce writes n records of value over partitions round-robin; a pool of records is recycled through a
// channel once each one's promise has run (franz-go no longer touches a record after its promise).
func produce(ctx context.Context, cl *kgo.Client, topic string, value []byte, n int64, owned []int32) {
	const pool = 1 << 15
	free := make(chan *kgo.Record, pool)
	for i := 0; i < pool; i++ {
		free <- &kgo.Record{Topic: topic, Value: value}
	}
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	promise := func(r *kgo.Record, err error) {
		if err != nil {
			errOnce.Do(func() { firstErr = err })
		}
		free <- r
		wg.Done()
	}
	wg.Add(int(n))
	for i := int64(0); i < n; i++ {
		r := <-free
		r.Partition = owned[i%int64(len(owned))]
		cl.Produce(ctx, r, promise)
	}
	wg.Wait()
	if firstErr != nil {
		die("produce: %v", firstErr)
	}
}

// consume reads from offset 0 of every partition until n records arrived; it returns the records and value
// bytes read.
func consume(ctx context.Context, cl *kgo.Client, n int64) (int64, int64) {
	var got, bytes int64
	for got < n {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			die("consume: read %d of %d records before the timeout", got, n)
		}
		fetches.EachError(func(t string, p int32, err error) { die("consume %s[%d]: %v", t, p, err) })
		fetches.EachRecord(func(r *kgo.Record) {
			got++
			bytes += int64(len(r.Value))
		})
	}
	return got, bytes
}

func btoi(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap servers, comma-separated")
	topic := flag.String("topic", "", "an existing topic of -partitions partitions")
	records := flag.Int64("records", 100000, "records to produce and consume")
	size := flag.Int("size", 1024, "value bytes per record")
	partitions := flag.Int("partitions", 16, "partitions of the topic (records go round-robin)")
	lingerMs := flag.Int("linger-ms", 20, "producer linger")
	batchBytes := flag.Int("batch-bytes", 1<<20, "producer max batch bytes")
	mode := flag.String("mode", "both", "produce, consume or both")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	clients := flag.Int("clients", 1, "producer (then consumer) clients at once, each owning every Nth partition")
	flag.Parse()
	if *topic == "" {
		die("-topic is required")
	}
	if *clients < 1 || *clients > *partitions {
		die("-clients must be between 1 and -partitions")
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	seeds := strings.Split(*brokers, ",")
	res := result{Records: *records, Bytes: *records * int64(*size), Partitions: *partitions, Clients: *clients}
	start, cpu0 := time.Now(), cpuSeconds()

	// owned[i] are client i's partitions; the records are shared out as evenly as they divide.
	owned := make([][]int32, *clients)
	for p := 0; p < *partitions; p++ {
		owned[p%*clients] = append(owned[p%*clients], int32(p))
	}
	share := func(i int) int64 { return *records/int64(*clients) + btoi(int64(i) < *records%int64(*clients)) }

	if *mode != "consume" {
		value := make([]byte, *size)
		for i := range value {
			value[i] = byte('a' + i%26)
		}
		producers := make([]*kgo.Client, *clients)
		for i := range producers {
			p, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequiredAcks(kgo.AllISRAcks()),
				kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Duration(*lingerMs)*time.Millisecond),
				kgo.ProducerBatchMaxBytes(int32(*batchBytes)), kgo.MaxBufferedRecords(1<<16),
				kgo.ProducerBatchCompression(kgo.NoCompression()))
			if err != nil {
				die("producer: %v", err)
			}
			producers[i] = p
		}
		t0, c0 := time.Now(), cpuSeconds()
		var wg sync.WaitGroup
		for i, p := range producers {
			wg.Add(1)
			go func(i int, p *kgo.Client) {
				defer wg.Done()
				produce(ctx, p, *topic, value, share(i), owned[i])
			}(i, p)
		}
		wg.Wait()
		res.ProduceS, res.ProduceCPUS = time.Since(t0).Seconds(), cpuSeconds()-c0
		for _, p := range producers {
			p.Close()
		}
		res.ProduceRps = float64(*records) / res.ProduceS
		res.ProduceMBps = float64(res.Bytes) / 1e6 / res.ProduceS
	}
	if *mode != "produce" {
		consumers := make([]*kgo.Client, *clients)
		for i := range consumers {
			offsets := map[int32]kgo.Offset{}
			for _, p := range owned[i] {
				offsets[p] = kgo.NewOffset().AtStart()
			}
			c, err := kgo.NewClient(kgo.SeedBrokers(seeds...),
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{*topic: offsets}),
				kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(8<<20), kgo.FetchMaxWait(100*time.Millisecond))
			if err != nil {
				die("consumer: %v", err)
			}
			consumers[i] = c
		}
		t0, c0 := time.Now(), cpuSeconds()
		var (
			wg sync.WaitGroup
			mu sync.Mutex
		)
		for i, c := range consumers {
			wg.Add(1)
			go func(i int, c *kgo.Client) {
				defer wg.Done()
				got, bytes := consume(ctx, c, share(i))
				mu.Lock()
				res.Consumed, res.ConsumedBytes = res.Consumed+got, res.ConsumedBytes+bytes
				mu.Unlock()
			}(i, c)
		}
		wg.Wait()
		res.ConsumeS, res.ConsumeCPUS = time.Since(t0).Seconds(), cpuSeconds()-c0
		for _, c := range consumers {
			c.Close()
		}
		res.ConsumeRps = float64(res.Consumed) / res.ConsumeS
		res.ConsumeMBps = float64(res.ConsumedBytes) / 1e6 / res.ConsumeS
	}
	res.Seconds, res.CPUS = time.Since(start).Seconds(), cpuSeconds()-cpu0
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}
