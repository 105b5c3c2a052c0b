package metrics

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/embedding"
	dfs "github.com/dnnfs/dnnfs/fs"
	"github.com/dnnfs/dnnfs/internal/pmemtest"
	"github.com/dnnfs/dnnfs/pmem"
)

// mounted is a pool mounted in this process as `dnnfs mount
// --metrics-listen 127.0.0.1:0` mounts it: the FUSE file system wrapped by
// Server.FUSE, /metrics served from the pool (and the SSD tier).
type mounted struct {
	mnt, url string
	p        *core.FS
	ssdDir   string
}

// mountWithMetrics formats a pool in a temporary directory and mounts it
// with metrics on (timed false: metrics off, the FUSE file system as it
// is). Cleanup unmounts, closes and requires fsck to find the pool clean.
func mountWithMetrics(t testing.TB, ssd, timed bool) *mounted {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root (DirectMount)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE: %v", err)
	}
	dir := t.TempDir()
	mt := &mounted{mnt: filepath.Join(dir, "mnt")}
	poolPath := filepath.Join(dir, "pool")
	if err := os.Mkdir(mt.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := pmem.Create(poolPath, 256<<20, false); err != nil {
		t.Fatal(err)
	}
	m, err := pmem.Open(poolPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := core.Format(m, 0, 0); err != nil {
		m.Close()
		t.Fatal(err)
	}
	var log *zap.Logger
	if _, ok := t.(*testing.B); ok {
		log = zap.NewNop() // a benchmark's logging would be measured
	} else {
		log = zaptest.NewLogger(t)
	}
	p, _, err := core.Open(m, core.Options{Log: log})
	if err != nil {
		m.Close()
		t.Fatal(err)
	}
	mt.p = p
	var tier *embedding.Tier
	if ssd {
		mt.ssdDir = filepath.Join(dir, "ssd")
		if err := os.Mkdir(mt.ssdDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if tier, err = embedding.Open(p, embedding.Options{Devices: []embedding.DeviceSpec{{Dir: mt.ssdDir,
			Model: embedding.Model{Channels: embedding.DefaultChannels}}}, ComputeElements: 1, Log: log}); err != nil {
			p.Close()
			m.Close()
			t.Fatal(err)
		}
	}
	var mx *Server
	if timed {
		if mx, err = Listen("127.0.0.1:0", log); err != nil {
			t.Fatal(err)
		}
		mt.url = "http://" + mx.Addr() + "/metrics"
	}
	opts := dfs.MountOptions(poolPath, false, log)
	raw := mx.FUSE(dfs.NewRawFS(dfs.Root(p, dfs.Options{Log: log, Tier: tier}), p, opts, log))
	server, err := fuse.NewServer(raw, mt.mnt, &opts.MountOptions)
	if err == nil {
		go server.Serve()
		err = server.WaitMount()
	}
	if err != nil {
		mx.Close()
		p.Close()
		m.Close()
		t.Fatal(err)
	}
	mx.Serve(Sources{Pool: p, Tier: tier})
	t.Cleanup(func() {
		for i := 0; ; i++ {
			err := server.Unmount()
			if err == nil {
				break
			}
			if i == 50 {
				t.Errorf("unmount %s: %v; detaching", mt.mnt, err)
				_ = unix.Unmount(mt.mnt, unix.MNT_DETACH)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		server.Wait()
		if err := mx.Close(); err != nil {
			t.Errorf("closing the metrics server: %v", err)
		}
		if tier != nil {
			if err := tier.Close(); err != nil {
				t.Errorf("closing the SSD tier: %v", err)
			}
		}
		if err := p.Close(); err != nil {
			t.Errorf("closing the pool: %v", err)
		}
		pmemtest.CheckNow(t, m)
		if err := m.Close(); err != nil {
			t.Errorf("closing the medium: %v", err)
		}
	})
	return mt
}

func (mt *mounted) scrape(t testing.TB) Families {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := Scrape(ctx, mt.url)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// value is the series' value; the test fails if there is none.
func value(t testing.TB, f Families, name string, labels ...string) float64 {
	t.Helper()
	v, ok := f.Value(name, labels...)
	if !ok {
		t.Fatalf("scrape has no %s%v", name, labels)
	}
	return v
}

// delta is how much a series moved between two scrapes.
func delta(t testing.TB, before, after Families, name string, labels ...string) float64 {
	t.Helper()
	return value(t, after, name, labels...) - value(t, before, name, labels...)
}

// TestScrapeMovesWithIO does file I/O on a mount and checks that every
// counter moved by exactly what was done, and that the gauges agree with
// statfs(2).
func TestScrapeMovesWithIO(t *testing.T) {
	mt := mountWithMetrics(t, false, true)
	const n = 3<<20 + 12345 // not a whole number of requests or blocks
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*7 + i>>12)
	}
	before := mt.scrape(t)
	path := filepath.Join(mt.mnt, "weights.bin")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	during := mt.scrape(t)
	if v := value(t, during, "dnnfs_fuse_open_files"); v != 1 {
		t.Errorf("dnnfs_fuse_open_files with one file open = %v, want 1", v)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("read back %d bytes, want %d", len(got), n)
	}
	if err := os.Mkdir(filepath.Join(mt.mnt, "dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mt.mnt, "dir")); err != nil {
		t.Fatal(err)
	}
	after := mt.scrape(t)

	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dnnfs_bytes_total", []string{"op", "write"}, n},
		{"dnnfs_bytes_total", []string{"op", "read"}, n},
		{"dnnfs_operations_total", []string{"op", "fsync"}, 1},
		{"dnnfs_fuse_request_duration_seconds_count", []string{"op", "create"}, 1},
		{"dnnfs_fuse_request_duration_seconds_count", []string{"op", "fsync"}, 1},
		{"dnnfs_fuse_request_duration_seconds_count", []string{"op", "mkdir"}, 1},
		{"dnnfs_fuse_request_duration_seconds_count", []string{"op", "rmdir"}, 1},
		{"dnnfs_fuse_errors_total", []string{"op", "write"}, 0},
		{"dnnfs_fuse_errors_total", []string{"op", "read"}, 0},
	} {
		if d := delta(t, before, after, c.name, c.labels...); d != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, d, c.want)
		}
	}
	// Each FUSE WRITE is one pool write; a READ at or past the end reads
	// nothing and is no pool read.
	writes := delta(t, before, after, "dnnfs_operations_total", "op", "write")
	if fw := delta(t, before, after, "dnnfs_fuse_request_duration_seconds_count", "op", "write"); writes < 4 || fw != writes {
		t.Errorf("%v FUSE writes and %v pool writes for %d bytes: want the same, at least 4 (1 MiB requests)", fw, writes, n)
	}
	if reads, fr := delta(t, before, after, "dnnfs_operations_total", "op", "read"),
		delta(t, before, after, "dnnfs_fuse_request_duration_seconds_count", "op", "read"); reads < 4 || fr < reads {
		t.Errorf("%v FUSE reads and %v pool reads of %d bytes: want at least 4 pool reads, and no fewer FUSE reads", fr, reads, n)
	}
	if d := delta(t, before, after, "dnnfs_fuse_request_duration_seconds_sum", "op", "write"); d <= 0 {
		t.Errorf("write latency sum moved by %v, want more than 0", d)
	}
	if d := delta(t, before, after, "dnnfs_journal_commits_total"); d < 1 {
		t.Errorf("dnnfs_journal_commits_total moved by %v for a create, an fsync, a mkdir and an rmdir", d)
	}
	if d := delta(t, before, after, "dnnfs_lock_acquired_total"); d < writes {
		t.Errorf("dnnfs_lock_acquired_total moved by %v, want at least one per write (%v)", d, writes)
	}
	// The lock gauges are not checked: a READ's lock is released after
	// its reply reaches the kernel, maybe after read(2) returned, and an
	// rmdir'ed directory is freed (under its lock) when the kernel
	// forgets it.
	if v := value(t, after, "dnnfs_sessions_open"); v != 0 {
		t.Errorf("dnnfs_sessions_open = %v with no session, want 0", v)
	}

	// Space: the gauges are what statfs(2) says.
	var st unix.Statfs_t
	if err := unix.Statfs(mt.mnt, &st); err != nil {
		t.Fatal(err)
	}
	now := mt.scrape(t)
	for _, c := range []struct {
		name string
		want uint64
	}{
		{"dnnfs_pool_blocks", st.Blocks}, {"dnnfs_pool_free_blocks", st.Bfree},
		{"dnnfs_pool_available_blocks", st.Bavail}, {"dnnfs_pool_block_size_bytes", uint64(st.Bsize)},
		{"dnnfs_pool_inodes", st.Files}, {"dnnfs_pool_free_inodes", st.Ffree},
	} {
		if v := value(t, now, c.name); v != float64(c.want) {
			t.Errorf("%s = %v, statfs says %d", c.name, v, c.want)
		}
	}
	if used := value(t, before, "dnnfs_pool_free_blocks") - value(t, now, "dnnfs_pool_free_blocks"); used < n/4096 {
		t.Errorf("free blocks fell by %v after writing %d bytes, want at least %d", used, n, n/4096)
	}

	// The open-file gauge returns to 0 when the kernel releases the file
	// (RELEASE is sent after close(2) returns).
	for deadline := time.Now().Add(30 * time.Second); ; {
		if v := value(t, mt.scrape(t), "dnnfs_fuse_open_files"); v == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Errorf("dnnfs_fuse_open_files = %v long after every file was closed", v)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestLockTotalsSurviveDelete: the lock counters are summed over the
// files, and a deleted file's stay in the sum (core.LockTotals), so a
// counter never goes back.
func TestLockTotalsSurviveDelete(t *testing.T) {
	mt := mountWithMetrics(t, false, true)
	path := filepath.Join(mt.mnt, "f")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	before := value(t, mt.scrape(t), "dnnfs_lock_acquired_total")
	if before < 1 {
		t.Fatalf("dnnfs_lock_acquired_total = %v after a write", before)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	// The inode is freed when the kernel forgets it, soon after the unlink.
	for deadline := time.Now().Add(30 * time.Second); mt.p.Inode(core.Ino(st.Ino)) != nil; {
		if time.Now().After(deadline) {
			t.Fatalf("inode %d still live long after its unlink", st.Ino)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if after := value(t, mt.scrape(t), "dnnfs_lock_acquired_total"); after < before {
		t.Errorf("dnnfs_lock_acquired_total went from %v to %v when the file was deleted", before, after)
	}
}

// TestSessionsOpen counts a segmented session from its start to its
// abandonment.
func TestSessionsOpen(t *testing.T) {
	mt := mountWithMetrics(t, false, true)
	path := filepath.Join(mt.mnt, "ckpt")
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setxattr(path, dfs.XattrSession, []byte("threads=2,size=1MiB"), 0); err != nil {
		t.Fatal(err)
	}
	if v := value(t, mt.scrape(t), "dnnfs_sessions_open"); v != 1 {
		t.Errorf("dnnfs_sessions_open = %v with one session open, want 1", v)
	}
	if err := unix.Removexattr(path, dfs.XattrSession); err != nil {
		t.Fatal(err)
	}
	if v := value(t, mt.scrape(t), "dnnfs_sessions_open"); v != 0 {
		t.Errorf("dnnfs_sessions_open = %v after the session was abandoned, want 0", v)
	}
}

// TestTierMovesWithIO: with an SSD tier, each size class and the device
// have their series, and a table's write and read move the class and
// device counters by what they asked for.
func TestTierMovesWithIO(t *testing.T) {
	mt := mountWithMetrics(t, true, true)
	before := mt.scrape(t)
	if v := value(t, before, "dnnfs_embedding_device_info", "device", "1", "dir", mt.ssdDir); v != 1 {
		t.Errorf("dnnfs_embedding_device_info = %v, want 1", v)
	}
	for _, class := range []string{"small", "medium", "large"} {
		for _, name := range []string{"dnnfs_embedding_queued_pieces", "dnnfs_embedding_requests_total",
			"dnnfs_embedding_request_seconds_count"} {
			if v := value(t, before, name, "class", class); v != 0 {
				t.Errorf("%s{class=%q} = %v on an idle tier, want 0", name, class, v)
			}
		}
		if v := value(t, before, "dnnfs_embedding_device_queued_pieces", "device", "1", "class", class); v != 0 {
			t.Errorf("dnnfs_embedding_device_queued_pieces{class=%q} = %v on an idle tier, want 0", class, v)
		}
	}
	for _, name := range []string{"dnnfs_embedding_compute_queued_requests", "dnnfs_embedding_compute_outstanding_requests",
		"dnnfs_embedding_compute_completions_total"} {
		if v := value(t, before, name, "element", "0", "kind", "cpu"); v != 0 {
			t.Errorf("%s{element=0,kind=cpu} = %v on an idle tier, want 0", name, v)
		}
	}

	// 4096 rows of 16 float32s (64 bytes): the whole table in one write
	// (a large request), then 64 rows in one read (small: <=128 rows).
	const rows, rowBytes = 4096, 64
	f, err := os.Create(filepath.Join(mt.mnt, "emb"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fsetxattr(int(f.Fd()), dfs.XattrTable, []byte("rows=4096,dim=16,dtype=f32"), 0); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rows*rowBytes)
	for i := range data {
		data[i] = byte(i % 253)
	}
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 64*rowBytes)
	if _, err := f.ReadAt(got, 100*rowBytes); err != nil {
		t.Fatal(err)
	}
	after := mt.scrape(t)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"dnnfs_embedding_requests_total", []string{"class", "large"}, 1},
		{"dnnfs_embedding_rows_total", []string{"class", "large"}, rows},
		{"dnnfs_embedding_bytes_total", []string{"class", "large"}, rows * rowBytes},
		{"dnnfs_embedding_requests_total", []string{"class", "small"}, 1},
		{"dnnfs_embedding_rows_total", []string{"class", "small"}, 64},
		{"dnnfs_embedding_bytes_total", []string{"class", "small"}, 64 * rowBytes},
		{"dnnfs_embedding_requests_total", []string{"class", "medium"}, 0},
		{"dnnfs_embedding_request_seconds_count", []string{"class", "small", "stage", "total"}, 1},
		{"dnnfs_embedding_useful_bytes_total", nil, 64 * rowBytes},
		{"dnnfs_embedding_device_write_bytes_total", []string{"device", "1"}, rows * rowBytes},
		{"dnnfs_embedding_failed_requests_total", []string{"class", "small"}, 0},
		{"dnnfs_embedding_device_errors_total", []string{"device", "1"}, 0},
	} {
		if d := delta(t, before, after, c.name, c.labels...); d != c.want {
			t.Errorf("%s%v moved by %v, want %v", c.name, c.labels, d, c.want)
		}
	}
	if d := delta(t, before, after, "dnnfs_embedding_device_read_bytes_total", "device", "1"); d < 64*rowBytes {
		t.Errorf("device read bytes moved by %v for a %d-byte read", d, 64*rowBytes)
	}
	if v := value(t, after, "dnnfs_embedding_tables"); v != 1 {
		t.Errorf("dnnfs_embedding_tables = %v, want 1", v)
	}
	if v := value(t, after, "dnnfs_embedding_device_used_bytes", "device", "1"); v < rows*rowBytes {
		t.Errorf("dnnfs_embedding_device_used_bytes = %v for a %d-byte table", v, rows*rowBytes)
	}
}
