package metrics

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
)

// latencyBuckets (seconds) span a getattr answered from memory (a few
// microseconds in the daemon) to an fsync or a lock wait of a second.
var latencyBuckets = []float64{
	5e-6, 10e-6, 25e-6, 50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 1,
}

// fuseMetrics are the only metrics kept here rather than read from the
// daemon at scrape time: nothing else sees each FUSE request.
type fuseMetrics struct {
	lat  *prometheus.HistogramVec
	errs *prometheus.CounterVec
	open prometheus.Gauge
	// Resolved once: a request pays no label lookup.
	latOf [numOps]prometheus.Observer
	errOf [numOps]prometheus.Counter
}

func newFuseMetrics() *fuseMetrics {
	m := &fuseMetrics{
		lat: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dnnfs_fuse_request_duration_seconds",
			Help:    "Time the daemon took to answer a FUSE request, from the request's arrival in the file system to its answer (the kernel's queue and the copy to the caller not included), by operation type.",
			Buckets: latencyBuckets,
		}, []string{"op"}),
		errs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dnnfs_fuse_errors_total",
			Help: "FUSE requests answered with an error, by operation type (including the expected ones, such as ENOENT for a lookup of a name that does not exist).",
		}, []string{"op"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dnnfs_fuse_open_files",
			Help: "File handles open on the mount (open, create and O_TMPFILE opens less releases).",
		}),
	}
	// Every operation's series exist from the start, at zero.
	for o := range numOps {
		m.latOf[o] = m.lat.WithLabelValues(opNames[o])
		m.errOf[o] = m.errs.WithLabelValues(opNames[o])
	}
	return m
}

// done records one request of type o that started at t.
func (m *fuseMetrics) done(o op, t time.Time, s fuse.Status) {
	m.latOf[o].Observe(time.Since(t).Seconds())
	if s != fuse.OK {
		m.errOf[o].Inc()
	}
}

func (m *fuseMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.lat.Describe(ch)
	m.errs.Describe(ch)
	m.open.Describe(ch)
}

func (m *fuseMetrics) Collect(ch chan<- prometheus.Metric) {
	m.lat.Collect(ch)
	m.errs.Collect(ch)
	m.open.Collect(ch)
}
