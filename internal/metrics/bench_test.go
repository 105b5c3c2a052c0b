package metrics

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/core"
	dfs "github.com/dnnfs/dnnfs/fs"
	"github.com/dnnfs/dnnfs/internal/pmemtest"
	"github.com/dnnfs/dnnfs/pmem"
)

// rawFile is a file of a pool opened through the FUSE file system in this
// process, with no kernel in between: requests are method calls, so a
// benchmark sees the cost of timing them with nothing else added.
type rawFile struct {
	raw      fuse.RawFileSystem
	nodeID   uint64
	fh       uint64
	closePfn func()
}

func openRaw(b *testing.B, timed bool) *rawFile {
	b.Helper()
	dir := b.TempDir()
	poolPath := filepath.Join(dir, "pool")
	if err := pmem.Create(poolPath, 64<<20, false); err != nil {
		b.Fatal(err)
	}
	m, err := pmem.Open(poolPath)
	if err != nil {
		b.Fatal(err)
	}
	if err := core.Format(m, 0, 0); err != nil {
		b.Fatal(err)
	}
	p, _, err := core.Open(m, core.Options{Log: zap.NewNop()})
	if err != nil {
		b.Fatal(err)
	}
	opts := dfs.MountOptions(poolPath, false, zap.NewNop())
	raw := dfs.NewRawFS(dfs.Root(p, dfs.Options{Log: zap.NewNop()}), p, opts, zap.NewNop())
	var mx *Server
	if timed {
		if mx, err = Listen("127.0.0.1:0", nil); err != nil {
			b.Fatal(err)
		}
		raw = mx.FUSE(raw)
	}
	var out fuse.CreateOut
	in := &fuse.CreateIn{InHeader: fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}, Flags: uint32(os.O_RDWR), Mode: 0o644}
	if s := raw.Create(nil, in, "f", &out); s != fuse.OK {
		b.Fatalf("create: %v", s)
	}
	f := &rawFile{raw: raw, nodeID: out.NodeId, fh: out.Fh}
	f.closePfn = func() {
		raw.Release(nil, &fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: f.nodeID}, Fh: f.fh})
		_ = mx.Close()
		if err := p.Close(); err != nil {
			b.Error(err)
		}
		pmemtest.CheckNow(b, m)
		m.Close()
	}
	b.Cleanup(f.closePfn)
	return f
}

func (f *rawFile) write(b *testing.B, data []byte, off uint64) {
	in := &fuse.WriteIn{InHeader: fuse.InHeader{NodeId: f.nodeID}, Fh: f.fh, Offset: off, Size: uint32(len(data))}
	if n, s := f.raw.Writev(nil, in, [][]byte{data}); s != fuse.OK || int(n) != len(data) {
		b.Fatalf("write: %d, %v", n, s)
	}
}

func (f *rawFile) read(b *testing.B, buf []byte, off uint64) {
	in := &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: f.nodeID}, Fh: f.fh, Offset: off, Size: uint32(len(buf))}
	r, s := f.raw.Read(nil, in, buf)
	if s != fuse.OK || r.Size() != len(buf) {
		b.Fatalf("read: %v", s)
	}
	r.Done()
}

// paired measures op on a plain and a timed file system side by side:
// each b.Loop iteration is one round of batch operations on each (the
// order alternating), and the medians over rounds are reported as
// plain-ns/op, timed-ns/op, overhead-ns/op and overhead-% (the median of
// the rounds' ratios), so a noisy machine slows both alike.
func paired(b *testing.B, batch int, plain, timed func(i int)) {
	b.Helper()
	var p, t, ratio []float64
	run := func(op func(int)) float64 {
		start := time.Now()
		for i := range batch {
			op(i)
		}
		return float64(time.Since(start).Nanoseconds()) / float64(batch)
	}
	for round := 0; b.Loop(); round++ {
		var a, c float64
		if round%2 == 0 {
			a = run(plain)
			c = run(timed)
		} else {
			c = run(timed)
			a = run(plain)
		}
		p, t, ratio = append(p, a), append(t, c), append(ratio, c/a)
	}
	diff := make([]float64, len(p))
	for i := range p {
		diff[i] = t[i] - p[i]
	}
	b.ReportMetric(median(p), "plain-ns/op")
	b.ReportMetric(median(t), "timed-ns/op")
	b.ReportMetric(median(diff), "overhead-ns/op")
	b.ReportMetric(100*(median(ratio)-1), "overhead-%")
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkRawOp is a 4 KiB FUSE read or write request answered in
// process, without (plain) and with (timed) the request metrics: the
// difference is what timing costs a request, with no kernel round trip
// to hide it.
func BenchmarkRawOp(b *testing.B) {
	const size = 4096
	for _, op := range []string{"read", "write"} {
		b.Run(op, func(b *testing.B) {
			plain, timed := openRaw(b, false), openRaw(b, true)
			buf := make([]byte, size)
			plain.write(b, make([]byte, 1<<20), 0)
			timed.write(b, make([]byte, 1<<20), 0)
			do := func(f *rawFile) func(int) {
				return func(i int) {
					off := uint64(i%256) * size
					if op == "read" {
						f.read(b, buf, off)
					} else {
						f.write(b, buf, off)
					}
				}
			}
			paired(b, 1000, do(plain), do(timed))
		})
	}
}

// BenchmarkMountPread is a 4 KiB pread(2) on a mount without (plain) and
// with (timed) the request metrics: the whole path, kernel round trip
// included.
func BenchmarkMountPread(b *testing.B) {
	const size = 4096
	open := func(timed bool) int {
		mt := mountWithMetrics(b, false, timed)
		path := filepath.Join(mt.mnt, "f")
		if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
			b.Fatal(err)
		}
		fd, err := unix.Open(path, unix.O_RDONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	plain, timed := open(false), open(true)
	buf := make([]byte, size)
	pread := func(fd int) func(int) {
		return func(i int) {
			if n, err := unix.Pread(fd, buf, int64(i%256)*size); err != nil || n != size {
				b.Fatalf("pread: %d, %v", n, err)
			}
		}
	}
	paired(b, 200, pread(plain), pread(timed))
}

// BenchmarkRecord is what a request pays besides its two clock reads:
// one histogram observation (and the error check).
func BenchmarkRecord(b *testing.B) {
	m := newFuseMetrics()
	t := time.Now()
	for b.Loop() {
		m.done(opRead, t, fuse.OK)
	}
}

// BenchmarkClock is a request's two clock reads (time.Now, time.Since).
func BenchmarkClock(b *testing.B) {
	var d time.Duration
	for b.Loop() {
		t := time.Now()
		d += time.Since(t)
	}
	_ = d
}
