package fs

import (
	"bytes"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
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
// (MaxRequest: 1 MiB and a page, or less where the kernel's max_pages_limit is
// lower), not as go-fuse's 128 KiB default or the kernel's 32 pages.
func TestRequestSize(t *testing.T) {
	dl := &debugLog{}
	mnt, _ := mountPoolWith(t, false, false, func(o *gofs.Options) {
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

// TestUnalignedRequest: a 1 MiB pwrite and pread from a buffer 16 bytes
// into a page (glibc's large malloc blocks, fio's buffers) go as one
// request where fs.fuse.max_pages_limit allows 257 pages (MaxRequest asks
// for them), and as 1 MiB less 16 bytes then 16 where it does not.
func TestUnalignedRequest(t *testing.T) {
	dl := &debugLog{}
	mnt, _ := mountPoolWith(t, false, false, func(o *gofs.Options) {
		o.Debug = true
		o.MountOptions.Logger = log.New(dl, "", 0)
	})
	const n, skew = 1 << 20, 16
	want := []int{n}
	if limit, split := SplitsUnaligned(); split {
		t.Logf("fs.fuse.max_pages_limit is %d: the call goes as two requests", limit)
		want = []int{n - skew, skew}
	}
	mem, err := unix.Mmap(-1, 0, n+2*os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	buf := mem[skew : skew+n]
	for i := range buf {
		buf[i] = byte(i*7 + i>>12)
	}
	f, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if k, err := unix.Pwrite(int(f.Fd()), buf, 0); err != nil || k != n {
		t.Fatalf("pwrite = %d, %v", k, err)
	}
	wrote := slices.Clone(buf)
	clear(buf)
	if k, err := unix.Pread(int(f.Fd()), buf, 0); err != nil || k != n {
		t.Fatalf("pread = %d, %v", k, err)
	}
	if !bytes.Equal(buf, wrote) {
		t.Fatal("read back differs from what was written")
	}
	for _, op := range []string{"WRITE", "READ"} {
		if got := dl.requestSizes(op); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s requests of a 1 MiB call from a buffer %d bytes into a page: %v, want %v", op, skew, got, want)
		}
	}
}

// TestReadAhead: reads through the page cache (a read-only open with
// --read-cache, and mmap, which direct-I/O files allow too) reach the
// daemon as requests of the largest size (SetReadAhead), not of the
// kernel's 128 KiB default read-ahead window.
func TestReadAhead(t *testing.T) {
	for _, readCache := range []bool{true, false} {
		t.Run(fmt.Sprintf("readCache=%v", readCache), func(t *testing.T) {
			dl := &debugLog{}
			mnt, _ := mountPoolWith(t, false, readCache, func(o *gofs.Options) {
				o.Debug = true
				o.MountOptions.Logger = log.New(dl, "", 0)
			})
			want := MaxRequest()
			data := bytes.Repeat([]byte("0123456789abcdef"), 4*want/16)
			name := filepath.Join(mnt, "f")
			if err := os.WriteFile(name, data, 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(name)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if readCache {
				got := make([]byte, len(data))
				for p := 0; p < len(got); p += 1 << 20 {
					if n, err := f.Read(got[p:min(p+1<<20, len(got))]); err != nil || n != min(1<<20, len(got)-p) {
						t.Fatalf("Read at %d = %d, %v", p, n, err)
					}
				}
				if !bytes.Equal(got, data) {
					t.Fatal("read back differs from what was written")
				}
			}
			// A page fault waits for the daemon uninterruptibly: in this
			// process the Go runtime could not stop the faulting thread
			// for a collection while the daemon's threads wait for it.
			cmd := exec.Command(os.Args[0], "-test.run=^TestMmapReadHelper$")
			cmd.Env = append(os.Environ(), "DNNFS_TEST_MMAP_READ="+name)
			if out, err := cmd.CombinedOutput(); err != nil || !bytes.Contains(out, []byte(fmt.Sprintf("read %d bytes", len(data)))) {
				t.Fatalf("mmap read in a child: %v\n%s", err, out)
			}
			sizes := dl.requestSizes("READ")
			if len(sizes) == 0 {
				t.Fatal("no READ requests")
			}
			for i, n := range sizes {
				if n != want {
					t.Fatalf("READ request %d of %d is %d bytes, want %d: %v", i, len(sizes), n, want, sizes)
				}
			}
		})
	}
}

// TestMmapReadHelper is TestReadAhead's child process: it reads the file
// DNNFS_TEST_MMAP_READ names through a shared mapping, front to back.
func TestMmapReadHelper(t *testing.T) {
	name := os.Getenv("DNNFS_TEST_MMAP_READ")
	if name == "" {
		t.Skip("run by TestReadAhead")
	}
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	sum := 0
	for _, c := range m {
		sum += int(c)
	}
	fmt.Printf("read %d bytes (sum %d)\n", len(m), sum)
}

// BenchmarkDataPath measures one pwrite or pread through the mount (the
// kernel, /dev/fuse and the daemon's handler, all in this process), and
// with -benchmem the daemon's allocations per request.
func BenchmarkDataPath(b *testing.B) {
	mnt, _ := mountPoolWith(b, false, false, nil)
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
