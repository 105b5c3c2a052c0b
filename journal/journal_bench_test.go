package journal

// Benchmarks of one metadata transaction commit (journal append: records
// into the transaction area, persist, commit word, apply, retire), named
// for benchstat:
//
//	go test -run XXX -bench Commit -count 10 ./journal > new.txt
//	benchstat old.txt new.txt
//
//	BenchmarkCommit/memory/256B    DRAM medium: the CPU cost of the commit protocol
//	BenchmarkCommit/memory/4KiB
//	BenchmarkCommit/emulated/256B  pool file in TMPDIR: every Persist is an msync
//	BenchmarkCommit/emulated/4KiB

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

const benchPoolSize = 64 << 20

// formatted writes a fresh file-system geometry and an empty journal onto m
// (the journal only needs the superblock's regions, not a root directory).
func formatted(b *testing.B, m pmem.Medium) *format.Superblock {
	b.Helper()
	sb, err := format.Geometry(m.Size())
	if err != nil {
		b.Fatal(err)
	}
	Format(m, &sb)
	return &sb
}

func BenchmarkCommit(b *testing.B) {
	media := []struct {
		name string
		open func(b *testing.B) pmem.Medium
	}{
		{"memory", func(b *testing.B) pmem.Medium { return pmem.NewMemory(benchPoolSize) }},
		{"emulated", func(b *testing.B) pmem.Medium {
			path := filepath.Join(b.TempDir(), "pool")
			if err := pmem.Create(path, benchPoolSize, false); err != nil {
				b.Fatal(err)
			}
			m, err := pmem.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { m.Close() })
			return m
		}},
	}
	for _, md := range media {
		for _, sz := range []struct {
			name string
			n    int
		}{{"256B", 256}, {"4KiB", 4 << 10}} {
			b.Run(md.name+"/"+sz.name, func(b *testing.B) {
				m := md.open(b)
				sb := formatted(b, m)
				j, err := Open(m, sb)
				if err != nil {
					b.Fatal(err)
				}
				data := make([]byte, sz.n)
				// Targets cycle through the first MiB of the data region, like
				// inode and extent updates landing in different blocks.
				base := sb.DataStart.Off()
				const span = 1 << 20
				b.SetBytes(int64(sz.n))
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					data[0] = byte(i)
					tx := j.Begin()
					tx.Write(base+format.Off((i*sz.n)%span), data)
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkCommitParallel: N goroutines each committing small transactions
// (an inode-sized record of their own and a 64-byte record all of them
// share, as creates in one directory rewrite its inode) on a pool file on
// disk (/var/tmp) and in /dev/shm. commits/s is the figure to compare;
// tx/batch is how many transactions shared a journal flush on average.
//
//	go test -run XXX -bench CommitParallel -count 5 ./journal
func BenchmarkCommitParallel(b *testing.B) {
	for _, dir := range []struct{ name, path string }{{"disk", "/var/tmp"}, {"shm", "/dev/shm"}} {
		for _, n := range []int{1, 4, 16} {
			b.Run(fmt.Sprintf("%s/N=%d", dir.name, n), func(b *testing.B) {
				tmp, err := os.MkdirTemp(dir.path, "journal-bench")
				if err != nil {
					b.Skip(err)
				}
				b.Cleanup(func() { os.RemoveAll(tmp) })
				path := filepath.Join(tmp, "pool")
				if err := pmem.Create(path, benchPoolSize, false); err != nil {
					b.Fatal(err)
				}
				m, err := pmem.Open(path)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { m.Close() })
				sb := formatted(b, m)
				j, err := Open(m, sb)
				if err != nil {
					b.Fatal(err)
				}
				base := sb.DataStart.Off()
				shared := base + 1<<20
				var next atomic.Int64
				var wg sync.WaitGroup
				errs := make(chan error, n)
				b.ResetTimer()
				start := time.Now()
				for g := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						own := make([]byte, format.InodeSize)
						dir := make([]byte, 64)
						for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
							own[0], dir[0] = byte(i), byte(g)
							tx := j.Begin()
							tx.Write(base+format.Off(g*format.InodeSize), own)
							tx.Write(shared, dir)
							if err := tx.Commit(); err != nil {
								errs <- err
								return
							}
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "commits/s")
				if bs := j.Batches(); bs.Batches > 0 {
					c, _ := j.Stats()
					b.ReportMetric(float64(c)/float64(bs.Batches), "tx/batch")
				}
				close(errs)
				for err := range errs {
					b.Fatal(err)
				}
			})
		}
	}
}
