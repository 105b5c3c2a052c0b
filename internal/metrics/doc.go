// Package metrics serves a mount's Prometheus metrics (`dnnfs mount
// --metrics-listen`): it reads the counters the daemon already keeps for
// `dnnfs status` (core.FS, the journal, the data locks, the SSD tier, the
// cluster node) at
// scrape time, and times every FUSE request in a wrapper around the raw
// file system.
//
// What it owns: the metric names and their help text (docs/METRICS.md;
// docs/grafana-dnnfs.json queries them), the listen-address rule (loopback
// unless --metrics-allow-remote), the HTTP server of /metrics, the FUSE
// request latency histograms, error counts and the open-handle gauge.
//
// What it must not do: keep a second copy of a counter that core, the
// journal, the lock package, the SSD tier or the cluster already keep
// (collectors read theirs when scraped); change anything it reads; take a
// lock a FUSE request holds across a scrape (status snapshots only); or do
// more on a request's path than read the clock and add to one histogram.
package metrics
