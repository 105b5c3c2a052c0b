package core

// Benchmarks of the data path below FUSE (no kernel round trip), on a DRAM
// medium so they measure dnnfs's own CPU cost: locking, extent lookup,
// allocation and the copy. Named for benchstat:
//
//	go test -run XXX -bench 'Write|ReadAt' -count 10 ./core > new.txt
//	benchstat old.txt new.txt
//
//	BenchmarkWrite/overwrite/4KiB   rewrite mapped blocks (no allocation, no journal)
//	BenchmarkWrite/overwrite/1MiB
//	BenchmarkWrite/append/4KiB      extend the file: allocation, delayed commit (DESIGN.md §Delayed commit)
//	BenchmarkWrite/append/1MiB
//	BenchmarkFill/sparse/4KiB       fill a truncated (sparse) file: allocation, delayed commit
//	BenchmarkFill/fallocated/4KiB   fill a fallocated file: unwritten blocks become written
//	BenchmarkReadAt/4KiB            copy out of a mapped file
//	BenchmarkReadAt/1MiB

import (
	"fmt"
	"testing"

	"github.com/dnnfs/dnnfs/format"
)

const benchFileSize = 64 << 20 // the working file of overwrite and read

var benchSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"1MiB", 1 << 20}}

// benchFS formats a memory pool of size bytes, opens it (closed and
// checked at cleanup) and creates one regular file in the root.
func benchFS(b *testing.B, size int64) (*FS, *Inode) {
	b.Helper()
	fs, _ := openTestPoolWith(b, size, Options{})
	in, err := fs.Create(fs.Root(), "f", NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		b.Fatal(err)
	}
	return fs, in
}

// filled writes benchFileSize bytes to in, so later writes and reads hit
// mapped blocks.
func filled(b *testing.B, fs *FS, in *Inode) {
	b.Helper()
	chunk := make([]byte, 1<<20)
	for off := int64(0); off < benchFileSize; off += int64(len(chunk)) {
		if _, err := fs.Write(in, off, chunk, false); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWrite(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run("overwrite/"+sz.name, func(b *testing.B) {
			fs, in := benchFS(b, 2*benchFileSize)
			filled(b, fs, in)
			data := make([]byte, sz.n)
			slots := benchFileSize / int64(sz.n)
			b.SetBytes(int64(sz.n))
			b.ReportAllocs()
			for i := int64(0); b.Loop(); i++ {
				if _, err := fs.Write(in, (i%slots)*int64(sz.n), data, false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, sz := range benchSizes {
		b.Run("append/"+sz.name, func(b *testing.B) {
			// The file restarts (truncate to 0, freeing its blocks) whenever
			// it reaches limit, so the pool never fills.
			const limit = 64 << 20
			fs, in := benchFS(b, 4*limit)
			data := make([]byte, sz.n)
			b.SetBytes(int64(sz.n))
			b.ReportAllocs()
			off := int64(0)
			for b.Loop() {
				if off+int64(sz.n) > limit {
					b.StopTimer()
					if err := fs.Truncate(in, 0); err != nil {
						b.Fatal(err)
					}
					off = 0
					b.StartTimer()
				}
				if _, err := fs.Write(in, off, data, false); err != nil {
					b.Fatal(fmt.Errorf("write at %d: %w", off, err))
				}
				off += int64(sz.n)
			}
		})
	}
}

// benchFill measures writes of n bytes filling a file of limit bytes
// that prep (truncate or fallocate) made before each pass; the file is
// committed (fsync) and truncated to 0 between passes, untimed.
func benchFill(b *testing.B, n int, prep func(fs *FS, in *Inode, size uint64) error) {
	const limit = 64 << 20
	fs, in := benchFS(b, 4*limit)
	data := make([]byte, n)
	b.SetBytes(int64(n))
	b.ReportAllocs()
	off := int64(limit)
	for b.Loop() {
		if off+int64(n) > limit {
			b.StopTimer()
			if err := fs.Truncate(in, 0); err != nil {
				b.Fatal(err)
			}
			if err := prep(fs, in, limit); err != nil {
				b.Fatal(err)
			}
			off = 0
			b.StartTimer()
		}
		if _, err := fs.Write(in, off, data, false); err != nil {
			b.Fatal(fmt.Errorf("write at %d: %w", off, err))
		}
		off += int64(n)
	}
}

// BenchmarkFill: writes into a truncated (sparse) file and into a
// fallocated one: a fallocated file must be no slower to fill than a
// sparse one (DESIGN.md §The FUSE data path, §Delayed commit).
func BenchmarkFill(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run("sparse/"+sz.name, func(b *testing.B) {
			benchFill(b, sz.n, func(fs *FS, in *Inode, size uint64) error { return fs.Truncate(in, size) })
		})
		b.Run("fallocated/"+sz.name, func(b *testing.B) {
			benchFill(b, sz.n, func(fs *FS, in *Inode, size uint64) error { return fs.Fallocate(in, 0, size, 0) })
		})
	}
}

func BenchmarkReadAt(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			fs, in := benchFS(b, 2*benchFileSize)
			filled(b, fs, in)
			buf := make([]byte, sz.n)
			slots := benchFileSize / int64(sz.n)
			b.SetBytes(int64(sz.n))
			b.ReportAllocs()
			for i := int64(0); b.Loop(); i++ {
				n, err := fs.ReadAt(in, buf, (i%slots)*int64(sz.n))
				if err != nil || n != sz.n {
					b.Fatalf("read: %d bytes, %v", n, err)
				}
			}
		})
	}
}
