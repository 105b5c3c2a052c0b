package lock

// Benchmarks of one Acquire+Release pair, named for benchstat:
//
//	go test -run XXX -bench . -count 10 ./lock > new.txt
//	benchstat old.txt new.txt
//
//	BenchmarkAcquire/uncontended  one goroutine, idle file
//	BenchmarkAcquire/contended    2×GOMAXPROCS goroutines, one overlapping range (exclusive)
//	BenchmarkAcquire/disjoint     GOMAXPROCS goroutines, each on its own range

import (
	"context"
	"sync/atomic"
	"testing"
)

func BenchmarkAcquire(b *testing.B) {
	ctx := context.Background()

	b.Run("uncontended", func(b *testing.B) {
		var f File
		l := &Lock{TID: 1, Start: 0, End: 64 << 10, Mode: Exclusive}
		b.ReportAllocs()
		for b.Loop() {
			if err := f.Acquire(ctx, l, nil); err != nil {
				b.Fatal(err)
			}
			f.Release(l)
		}
	})

	b.Run("contended", func(b *testing.B) {
		var f File
		var ids atomic.Uint32
		b.SetParallelism(2) // at least 2 goroutines even with GOMAXPROCS=1
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			id := ids.Add(1)
			// Overlapping ranges: every pair conflicts.
			l := &Lock{TID: id, Start: uint64(id%4) * 4 << 10, End: 64 << 10, Mode: Exclusive}
			for pb.Next() {
				if err := f.Acquire(ctx, l, nil); err != nil {
					b.Fatal(err)
				}
				f.Release(l)
			}
		})
		_, _, st := f.Snapshot()
		if st.Acquired > 0 {
			b.ReportMetric(float64(st.Waits)/float64(st.Acquired), "waits/op")
		}
	})

	b.Run("disjoint", func(b *testing.B) {
		var f File
		var ids atomic.Uint32
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			id := ids.Add(1)
			l := &Lock{TID: id, Start: uint64(id) << 20, End: uint64(id)<<20 + 64<<10, Mode: Exclusive}
			for pb.Next() {
				if err := f.Acquire(ctx, l, nil); err != nil {
					b.Fatal(err)
				}
				f.Release(l)
			}
		})
		_, _, st := f.Snapshot()
		if st.Waits != 0 {
			b.Fatalf("disjoint ranges waited %d times", st.Waits)
		}
	})
}
