package fs

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
)

// debugLog collects go-fuse's debug output of a mount.
type debugLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (d *debugLog) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.buf.Write(p)
}

// requestSizes returns the sizes of the op (READ or WRITE) requests logged
// so far.
func (d *debugLog) requestSizes(op string) []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	re := regexp.MustCompile(`rx \d+: ` + op + ` [in]\d+ \{Fh \d+ \[\d+ \+(\d+)\)`)
	var sizes []int
	for _, m := range re.FindAllStringSubmatch(d.buf.String(), -1) {
		n, _ := strconv.Atoi(m[1])
		sizes = append(sizes, n)
	}
	return sizes
}

// TestRequestSize: a large pwrite and pread on a direct-I/O handle reach
// the daemon as requests of the largest size the mount negotiated
// (MaxRequest: maxWrite, or less where the kernel's max_pages_limit is
// lower), not as go-fuse's 128 KiB default or the kernel's 32 pages.
func TestRequestSize(t *testing.T) {
	dl := &debugLog{}
	mnt, _ := mountPoolWith(t, false, func(o *gofs.Options) {
		o.Debug = true
		o.MountOptions.Logger = log.New(dl, "", 0)
	})
	want := MaxRequest()
	if want < 1<<20 {
		t.Fatalf("MaxRequest() = %d: this kernel allows at least 1 MiB (max_pages 256) since Linux 4.20", want)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 3*want/16)
	f, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := f.WriteAt(data, 0); err != nil || n != len(data) {
		t.Fatalf("WriteAt = %d, %v", n, err)
	}
	got := make([]byte, len(data))
	if n, err := f.ReadAt(got, 0); err != nil || n != len(got) {
		t.Fatalf("ReadAt = %d, %v", n, err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read back differs from what was written")
	}
	for _, op := range []string{"WRITE", "READ"} {
		sizes := dl.requestSizes(op)
		if fmt.Sprint(sizes) != fmt.Sprint([]int{want, want, want}) {
			t.Errorf("%s requests of a %d-byte call: %v, want 3 of %d", op, len(data), sizes, want)
		}
	}
}

// BenchmarkDataPath measures one pwrite or pread through the mount (the
// kernel, /dev/fuse and the daemon's handler, all in this process), and
// with -benchmem the daemon's allocations per request.
func BenchmarkDataPath(b *testing.B) {
	mnt, _ := mountPoolWith(b, false, nil)
	const fileSize = 64 << 20
	for _, c := range []struct {
		name  string
		size  int
		write bool
	}{
		{"write-1MiB", 1 << 20, true},
		{"read-1MiB", 1 << 20, false},
		{"write-4KiB", 4 << 10, true},
		{"read-4KiB", 4 << 10, false},
	} {
		// One file per case, written once (b.Run calls the function
		// again for each b.N it tries).
		f, err := os.OpenFile(filepath.Join(mnt, c.name), os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		buf := bytes.Repeat([]byte{0xa5}, 1<<20)
		for off := int64(0); off < fileSize; off += int64(len(buf)) {
			if _, err := f.WriteAt(buf, off); err != nil {
				b.Fatal(err)
			}
		}
		buf = buf[:c.size]
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(c.size))
			b.ReportAllocs()
			off := int64(0)
			for i := 0; i < b.N; i++ {
				if c.write {
					_, err = f.WriteAt(buf, off)
				} else {
					_, err = f.ReadAt(buf, off)
				}
				if err != nil {
					b.Fatal(err)
				}
				off = (off + int64(c.size)) % fileSize
			}
		})
		f.Close()
	}
}
