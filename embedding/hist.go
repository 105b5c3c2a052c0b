package embedding

import (
	"math/bits"
	"sync/atomic"
	"time"
)

// hist is a lock-free latency histogram: log-linear buckets (8 per power
// of two of nanoseconds), so a percentile is within 1/8 (12.5%) of the
// true value. Good enough for p50/p99/p99.9 in status and benchmarks.
type hist struct {
	b     [64 * 8]atomic.Uint64
	count atomic.Uint64
	sum   atomic.Uint64 // ns
}

func bucketOf(ns uint64) int {
	if ns < 8 {
		return int(ns)
	}
	e := bits.Len64(ns) - 1 // ns in [2^e, 2^(e+1))
	sub := (ns >> (e - 3)) & 7
	return (e-2)*8 + int(sub)
}

// bucketLow is the smallest value of bucket i; bucketHigh the next one's.
func bucketLow(i int) uint64 {
	if i < 8 {
		return uint64(i)
	}
	e := i/8 + 2
	sub := uint64(i % 8)
	return (8 + sub) << (e - 3)
}

func (h *hist) add(d time.Duration) {
	ns := uint64(max(d, 0))
	h.b[bucketOf(ns)].Add(1)
	h.count.Add(1)
	h.sum.Add(ns)
}

// quantile returns the q-quantile (0 < q <= 1) as the middle of its bucket.
func (h *hist) quantile(q float64) time.Duration {
	n := h.count.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(q*float64(n) + 0.5)
	rank = max(rank, 1)
	var seen uint64
	for i := range h.b {
		seen += h.b[i].Load()
		if seen >= rank {
			lo, hi := bucketLow(i), bucketLow(i+1)
			return time.Duration((lo + hi) / 2)
		}
	}
	return time.Duration(bucketLow(len(h.b) - 1))
}

// Latency is a percentile summary in microseconds.
type Latency struct {
	Count uint64  `json:"count"`
	Mean  float64 `json:"mean_us"`
	P50   float64 `json:"p50_us"`
	P99   float64 `json:"p99_us"`
	P999  float64 `json:"p999_us"`
}

func (h *hist) summary() Latency {
	n := h.count.Load()
	l := Latency{Count: n}
	if n == 0 {
		return l
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	l.Mean = float64(h.sum.Load()) / float64(n) / 1e3
	l.P50, l.P99, l.P999 = us(h.quantile(0.5)), us(h.quantile(0.99)), us(h.quantile(0.999))
	return l
}

func (h *hist) reset() {
	for i := range h.b {
		h.b[i].Store(0)
	}
	h.count.Store(0)
	h.sum.Store(0)
}
