package metrics

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dnnfs/dnnfs/embedding"
)

// SSD-tier metrics (--ssd): the scheduler's size classes and the devices,
// from embedding.Tier.Status (what `dnnfs status` prints). Its latency
// histograms are exported as summaries (p50, p99, p99.9), the quantiles
// the tier computes; `dnnfs status` reset (setxattr user.dnnfs.status
// reset) clears them and the per-class counters, which Prometheus sees as
// a counter reset.
var (
	classQueued = desc("dnnfs_embedding_queued_pieces",
		"Embedding read and write pieces queued on the devices, by size class.", "class")
	classWaiting = desc("dnnfs_embedding_waiting_requests",
		"Embedding requests none of whose pieces has started, by size class.", "class")
	classInFlight = desc("dnnfs_embedding_inflight_requests",
		"Embedding requests not finished, by size class.", "class")
	classRequests = desc("dnnfs_embedding_requests_total",
		"Embedding requests scheduled, by size class.", "class")
	classFailed = desc("dnnfs_embedding_failed_requests_total",
		"Embedding requests that failed, by size class.", "class")
	classRows = desc("dnnfs_embedding_rows_total",
		"Embedding rows requested, by size class.", "class")
	classBytes = desc("dnnfs_embedding_bytes_total",
		"Embedding bytes requested, by size class.", "class")
	classLatency = desc("dnnfs_embedding_request_seconds",
		"Embedding request latency by size class and stage: queue (to the first piece's start), service, total.", "class", "stage")
	devInfo = desc("dnnfs_embedding_device_info",
		"An SSD-tier device (value 1): its id, directory and modelled speed.", "device", "dir", "model")
	devQueued = desc("dnnfs_embedding_device_queued_pieces",
		"Pieces queued on a device, by size class (the device's load).", "device", "class")
	devInFlight = desc("dnnfs_embedding_device_inflight_pieces",
		"Pieces a device is transferring now.", "device")
	devReads = desc("dnnfs_embedding_device_reads_total",
		"Pieces read from a device.", "device")
	devReadBytes = desc("dnnfs_embedding_device_read_bytes_total",
		"Bytes read from a device (backing reads, at least the useful bytes).", "device")
	devWrites = desc("dnnfs_embedding_device_writes_total",
		"Pieces written to a device.", "device")
	devWriteBytes = desc("dnnfs_embedding_device_write_bytes_total",
		"Bytes written to a device.", "device")
	devErrors = desc("dnnfs_embedding_device_errors_total",
		"Failed transfers on a device.", "device")
	devLatency = desc("dnnfs_embedding_device_piece_seconds",
		"Piece latency on a device, by stage: total (queue and service) or service.", "device", "stage")
	devCapacity = desc("dnnfs_embedding_device_capacity_bytes",
		"Shard space of a device.", "device")
	devUsed = desc("dnnfs_embedding_device_used_bytes",
		"Shard space in use on a device.", "device")
	devShards = desc("dnnfs_embedding_device_shard_copies",
		"Shard copies (primaries and replicas) on a device.", "device")
	devMoves = desc("dnnfs_embedding_device_moves_in_total",
		"Shards the migrator moved onto a device.", "device")
	tierTables       = desc("dnnfs_embedding_tables", "Embedding tables.")
	tierShards       = desc("dnnfs_embedding_shards", "Embedding table shards.")
	tierReplicas     = desc("dnnfs_embedding_replicas", "Shards with a replica on a second device.")
	tierMoves        = desc("dnnfs_embedding_moves_total", "Shards moved by the migrator.")
	tierReplications = desc("dnnfs_embedding_replications_total", "Shards replicated by the migrator.")
	computeQueued    = desc("dnnfs_embedding_compute_queued_requests", "Compute requests waiting on a processing element's queue.", "element", "kind")
	computeOutst     = desc("dnnfs_embedding_compute_outstanding_requests", "A processing element's outstanding compute requests as the compute scheduler tracks them (queued + running).", "element", "kind")
	computeBusy      = desc("dnnfs_embedding_compute_busy_seconds_total", "Time a processing element spent running compute requests.", "element", "kind")
	computeDone      = desc("dnnfs_embedding_compute_completions_total", "Compute requests a processing element completed.", "element", "kind")
	computeTaken     = desc("dnnfs_embedding_compute_taken_total", "Compute requests a processing element took from another element's queue.", "element", "kind")
	computeOnLoader  = desc("dnnfs_embedding_compute_on_loader_total", "Lookups gathered or pooled on the loader (--compute-elements 0).")
	computeOnLoaderS = desc("dnnfs_embedding_compute_on_loader_seconds_total", "Time the loaders spent gathering or pooling lookups (time they did not read).")
	computeWait      = desc("dnnfs_embedding_compute_wait_seconds", "Wait of a compute request from placement to an element's start.")
	tierUseful       = desc("dnnfs_embedding_useful_bytes_total", "Bytes of rows returned to embedding readers (read amplification: device read bytes over these).")
)

// tierCollector reads the SSD tier at scrape time.
type tierCollector struct{ t *embedding.Tier }

func (c *tierCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{classQueued, classWaiting, classInFlight, classRequests, classFailed,
		classRows, classBytes, classLatency, devInfo, devQueued, devInFlight, devReads, devReadBytes, devWrites,
		devWriteBytes, devErrors, devLatency, devCapacity, devUsed, devShards, devMoves, tierTables,
		tierShards, tierReplicas, tierMoves, tierReplications, tierUseful, computeQueued, computeOutst, computeBusy,
		computeDone, computeTaken, computeOnLoader, computeOnLoaderS, computeWait} {
		ch <- d
	}
}

// className is a class's label: the first word of its status name
// ("small (<=128 rows)" is "small"; the thresholds are --classes).
func className(name string) string {
	if i := strings.IndexByte(name, ' '); i > 0 {
		return name[:i]
	}
	return name
}

// summary converts a tier latency summary (microseconds) to a Prometheus
// summary in seconds.
func summary(d *prometheus.Desc, l embedding.Latency, labels ...string) prometheus.Metric {
	sum := l.Mean * float64(l.Count) / 1e6
	q := map[float64]float64{0.5: l.P50 / 1e6, 0.99: l.P99 / 1e6, 0.999: l.P999 / 1e6}
	return prometheus.MustNewConstSummary(d, l.Count, sum, q, labels...)
}

func (c *tierCollector) Collect(ch chan<- prometheus.Metric) {
	counter, gauge := emitters(ch)
	s := c.t.Status()
	names := make([]string, len(s.Classes))
	for i, cl := range s.Classes {
		n := className(cl.Name)
		names[i] = n
		gauge(classQueued, float64(cl.QueuedPieces), n)
		gauge(classWaiting, float64(cl.Waiting), n)
		gauge(classInFlight, float64(cl.InFlight), n)
		counter(classRequests, float64(cl.Requests), n)
		counter(classFailed, float64(cl.Failed), n)
		counter(classRows, float64(cl.Rows), n)
		counter(classBytes, float64(cl.Bytes), n)
		ch <- summary(classLatency, cl.Queue, n, "queue")
		ch <- summary(classLatency, cl.Service, n, "service")
		ch <- summary(classLatency, cl.Total, n, "total")
	}
	for _, d := range s.Devices {
		id := strconv.Itoa(int(d.ID))
		gauge(devInfo, 1, id, d.Dir, d.Model)
		for i, q := range d.Queued {
			if i < len(names) {
				gauge(devQueued, float64(q), id, names[i])
			}
		}
		gauge(devInFlight, float64(d.InFlight), id)
		counter(devReads, float64(d.Reads), id)
		counter(devReadBytes, float64(d.ReadBytes), id)
		counter(devWrites, float64(d.Writes), id)
		counter(devWriteBytes, float64(d.WriteBytes), id)
		counter(devErrors, float64(d.Errors), id)
		ch <- summary(devLatency, d.Latency, id, "total")
		ch <- summary(devLatency, d.Service, id, "service")
		gauge(devCapacity, float64(d.Space.Capacity), id)
		gauge(devUsed, float64(d.Space.Used), id)
		gauge(devShards, float64(d.Shards), id)
		counter(devMoves, float64(d.Moves), id)
	}
	gauge(tierTables, float64(s.Tables))
	gauge(tierShards, float64(s.Shards))
	gauge(tierReplicas, float64(s.Replicas))
	counter(tierMoves, float64(s.Moves))
	counter(tierReplications, float64(s.Replications))
	counter(tierUseful, float64(s.UsefulBytes))
	for _, e := range s.Compute.Elements {
		id := strconv.Itoa(e.Index)
		gauge(computeQueued, float64(e.Queued), id, e.Kind)
		gauge(computeOutst, float64(e.Outstanding), id, e.Kind)
		counter(computeBusy, e.BusySeconds, id, e.Kind)
		counter(computeDone, float64(e.Completions), id, e.Kind)
		counter(computeTaken, float64(e.Taken), id, e.Kind)
	}
	counter(computeOnLoader, float64(s.Compute.OnLoader))
	counter(computeOnLoaderS, s.Compute.OnLoaderSeconds)
	ch <- summary(computeWait, s.Compute.Wait)
}
