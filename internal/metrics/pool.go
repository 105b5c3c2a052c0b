package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dnnfs/dnnfs/core"
)

// desc is a metric description; the collectors' Describe sends them all.
func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// Pool metrics: the counters of `dnnfs status --json` (core.FS
// StatsSnapshot, with the journal's), statfs and the data locks.
var (
	poolOps = desc("dnnfs_operations_total",
		"Data operations served by the pool (read, write, fsync), from any caller: what `dnnfs status` counts.", "op")
	poolBytes = desc("dnnfs_bytes_total",
		"Bytes read from and written to files of the pool, by operation (read, write).", "op")
	journalCommits = desc("dnnfs_journal_commits_total",
		"Metadata transactions committed to the journal.")
	journalBytes = desc("dnnfs_journal_bytes_total",
		"Bytes of metadata transactions written to the journal.")
	journalBatches = desc("dnnfs_journal_batches_total",
		"Journal commits that persisted one or more transactions together (group commit): commits/batches is the batching factor.")
	journalLargest = desc("dnnfs_journal_largest_batch",
		"Transactions in the largest group commit since mount.")
	pendingFiles = desc("dnnfs_pending_files",
		"Files with writes that allocated or grew the file not yet committed (delayed commit, DESIGN.md §Delayed commit).")
	intervalCommits = desc("dnnfs_interval_commits_total",
		"Files whose delayed writes the committer committed at the commit interval (not by fsync or a metadata change).")
	warmBytes = desc("dnnfs_pool_warm_bytes",
		"Freed blocks an emulated pool keeps in its file for reuse instead of punching them (DESIGN.md §Warm blocks; --warm-bytes).")
	warmPunched = desc("dnnfs_pool_warm_punched_bytes_total",
		"Warm blocks punched, by reason: decay (unused for --warm-decay) or cap (over --warm-bytes, or unmount).", "reason")
	poolBlocks = desc("dnnfs_pool_blocks",
		"Data blocks of the pool (statfs f_blocks).")
	poolFree = desc("dnnfs_pool_free_blocks",
		"Free data blocks (statfs f_bfree).")
	poolAvail = desc("dnnfs_pool_available_blocks",
		"Free data blocks writes may take: free less the metadata reserve (statfs f_bavail).")
	poolBlockSize = desc("dnnfs_pool_block_size_bytes",
		"Size of a pool block.")
	poolInodes = desc("dnnfs_pool_inodes",
		"Inode slots of the pool (statfs f_files).")
	poolFreeInodes = desc("dnnfs_pool_free_inodes",
		"Free inode slots (statfs f_ffree).")
	lockAcquired = desc("dnnfs_lock_acquired_total",
		"Data locks granted (range or whole-file, by --lock), over every file since mount.")
	lockWaits = desc("dnnfs_lock_waits_total",
		"Data locks that had to wait for a conflicting lock.")
	lockWaitSeconds = desc("dnnfs_lock_wait_seconds_total",
		"Time spent waiting for data locks.")
	lockInterrupted = desc("dnnfs_lock_interrupted_total",
		"Lock waits abandoned because the caller was interrupted.")
	lockRunning = desc("dnnfs_lock_running",
		"Data locks held now, over every file.")
	lockWaiting = desc("dnnfs_lock_waiting",
		"Data locks queued now (the lock wait queues' depth, over every file).")
	sessionsOpen = desc("dnnfs_sessions_open",
		"Segmented sessions open and not finished (`dnnfs cp`, user.dnnfs.session).")
)

// poolCollector reads a mounted pool's counters at scrape time.
type poolCollector struct{ p *core.FS }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolOps, poolBytes, journalCommits, journalBytes, journalBatches,
		journalLargest, pendingFiles, intervalCommits, warmBytes, warmPunched, poolBlocks, poolFree, poolAvail, poolBlockSize,
		poolInodes, poolFreeInodes, lockAcquired, lockWaits, lockWaitSeconds, lockInterrupted,
		lockRunning, lockWaiting, sessionsOpen} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	counter, gauge := emitters(ch)
	// The keys are `dnnfs status --json`'s "counters" (core/pool.go).
	s := c.p.StatsSnapshot()
	counter(poolOps, float64(s["reads"]), "read")
	counter(poolOps, float64(s["writes"]), "write")
	counter(poolOps, float64(s["fsyncs"]), "fsync")
	counter(poolBytes, float64(s["read_bytes"]), "read")
	counter(poolBytes, float64(s["write_bytes"]), "write")
	counter(journalCommits, float64(s["journal_commits"]))
	counter(journalBytes, float64(s["journal_bytes"]))
	counter(journalBatches, float64(s["journal_batches"]))
	gauge(journalLargest, float64(s["journal_largest_batch"]))
	gauge(pendingFiles, float64(s["pending_files"]))
	counter(intervalCommits, float64(s["committed_by_interval"]))
	gauge(warmBytes, float64(s["warm_bytes"]))
	counter(warmPunched, float64(s["warm_punched_decay_bytes"]), "decay")
	counter(warmPunched, float64(s["warm_punched_cap_bytes"]), "cap")

	st := c.p.Statfs()
	gauge(poolBlocks, float64(st.Blocks))
	gauge(poolFree, float64(st.Free))
	gauge(poolAvail, float64(st.Avail))
	gauge(poolBlockSize, float64(st.BlockSize))
	gauge(poolInodes, float64(st.Files))
	gauge(poolFreeInodes, float64(st.FFree))

	lt := c.p.LockTotals()
	counter(lockAcquired, float64(lt.Acquired))
	counter(lockWaits, float64(lt.Waits))
	counter(lockWaitSeconds, lt.WaitTime.Seconds())
	counter(lockInterrupted, float64(lt.Interrupted))
	gauge(lockRunning, float64(lt.Running))
	gauge(lockWaiting, float64(lt.Waiting))

	open := 0
	for _, in := range c.p.Inodes() {
		if in.IsDir() {
			continue
		}
		if info, ok := c.p.Session(in); ok && !info.Done {
			open++
		}
	}
	gauge(sessionsOpen, float64(open))
}

// emitters returns functions that send a counter or a gauge of d with
// value v to ch, for a collector's Collect.
func emitters(ch chan<- prometheus.Metric) (counter, gauge func(d *prometheus.Desc, v float64, labels ...string)) {
	counter = func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge = func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	return counter, gauge
}
