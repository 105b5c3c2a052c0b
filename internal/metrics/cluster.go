package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dnnfs/dnnfs/cluster"
)

// Cluster metrics (--etcd): where this node's chunks came from (the fetch
// order's sources: local pool, a peer holding it, its home node, S3), what
// its chunk server served, its S3 traffic and the chunks it holds; the
// "cluster" section of `dnnfs status --json` (cluster.Node.Status).
var (
	fetchRequests = desc("dnnfs_cluster_fetch_requests_total",
		"Chunk fetch attempts by source (local, peer, home, s3): a local lookup, a request to a peer or home node, an S3 GET.", "source")
	fetchChunks = desc("dnnfs_cluster_fetch_chunks_total",
		"Chunks obtained, by the source that gave them (local, peer, home, s3).", "source")
	fetchBytes = desc("dnnfs_cluster_fetch_bytes_total",
		"Bytes of the chunks obtained, by source (local, peer, home, s3).", "source")
	fetchBadCRC = desc("dnnfs_cluster_fetch_bad_chunks_total",
		"Chunks refused for a size or CRC-32C mismatch (fetched again elsewhere).")
	servedChunks = desc("dnnfs_cluster_served_chunks_total",
		"Chunk requests this node's chunk server answered with bytes.")
	servedBytes = desc("dnnfs_cluster_served_bytes_total",
		"Bytes this node's chunk server sent to peers.")
	servedRefused = desc("dnnfs_cluster_served_refused_total",
		"Chunk requests refused, by reason: token (401) or missing (404, not held here).", "reason")
	homeFills = desc("dnnfs_cluster_home_fills_total",
		"Fills from S3 this node made as a chunk's home node for others (one per flight).")
	s3Requests = desc("dnnfs_cluster_s3_requests_total",
		"HTTP requests sent to S3, retries and HEADs included.")
	s3Bytes = desc("dnnfs_cluster_s3_bytes_total",
		"Bytes moved with S3, by direction (get: chunk reads, put: chunk and manifest uploads).", "direction")
	liveNodes = desc("dnnfs_cluster_live_nodes",
		"Nodes of the cluster with a live lease, this one included.")
	heldChunks = desc("dnnfs_cluster_held_chunks",
		"Chunks this node holds in its pool (of the versions it is a holder of).")
	cachedBytes = desc("dnnfs_cluster_cached_bytes",
		"Bytes of chunks kept in memory for others (this node is their home and has no name for their file).")
	evictedChunks = desc("dnnfs_cluster_evicted_chunks_total",
		"Chunks evicted from the pool to keep --cluster-cache-min-free free (least recently read first).")
	evictedBytes = desc("dnnfs_cluster_evicted_bytes_total",
		"Bytes of the chunks evicted from the pool.")
	bgFailures = desc("dnnfs_cluster_background_failures_total",
		"Background work that failed with no caller to tell (each also logged), by work: holder_drop, recheck, read_ahead.", "work")
)

// clusterCollector reads the cluster node at scrape time.
type clusterCollector struct{ n *cluster.Node }

func (c *clusterCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{fetchRequests, fetchChunks, fetchBytes, fetchBadCRC, servedChunks,
		servedBytes, servedRefused, homeFills, s3Requests, s3Bytes, liveNodes, heldChunks, cachedBytes,
		evictedChunks, evictedBytes, bgFailures} {
		ch <- d
	}
}

func (c *clusterCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.n.Status()
	if s == nil {
		return
	}
	counter, gauge := emitters(ch)
	for _, src := range []struct {
		name string
		st   func() (int64, int64, int64)
	}{
		{"local", func() (int64, int64, int64) { return s.Fetch.Local.Requests, s.Fetch.Local.Hits, s.Fetch.Local.Bytes }},
		{"peer", func() (int64, int64, int64) { return s.Fetch.Peer.Requests, s.Fetch.Peer.Hits, s.Fetch.Peer.Bytes }},
		{"home", func() (int64, int64, int64) { return s.Fetch.Home.Requests, s.Fetch.Home.Hits, s.Fetch.Home.Bytes }},
		{"s3", func() (int64, int64, int64) { return s.Fetch.S3.Requests, s.Fetch.S3.Hits, s.Fetch.S3.Bytes }},
	} {
		req, hits, bytes := src.st()
		counter(fetchRequests, float64(req), src.name)
		counter(fetchChunks, float64(hits), src.name)
		counter(fetchBytes, float64(bytes), src.name)
	}
	counter(fetchBadCRC, float64(s.Fetch.BadCRC))
	counter(servedChunks, float64(s.Fetch.Served))
	counter(servedBytes, float64(s.Fetch.ServedBytes))
	counter(servedRefused, float64(s.Fetch.ServedDenied), "token")
	counter(servedRefused, float64(s.Fetch.ServedMissing), "missing")
	counter(homeFills, float64(s.Fetch.Fills))
	counter(s3Requests, float64(s.S3.Requests))
	counter(s3Bytes, float64(s.S3.ChunkGetBytes), "get")
	counter(s3Bytes, float64(s.S3.PutBytes), "put")
	gauge(liveNodes, float64(len(s.Nodes)))
	held := 0
	for _, h := range s.Held {
		held += h.Count
	}
	gauge(heldChunks, float64(held))
	gauge(cachedBytes, float64(s.CachedBytes))
	counter(evictedChunks, float64(s.Evicted.Chunks))
	counter(evictedBytes, float64(s.Evicted.Bytes))
	counter(bgFailures, float64(s.Background.HolderDrops), "holder_drop")
	counter(bgFailures, float64(s.Background.Rechecks), "recheck")
	counter(bgFailures, float64(s.Background.ReadAheads), "read_ahead")
}
