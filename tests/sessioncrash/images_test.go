package sessioncrash_test

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/pmem"
)

// Crash images, cheaply. pmem.Recorder.Image(k) copies the whole pool
// (32 MiB) for every k, and under the race detector every such copy of Go
// memory costs about a second of shadow-memory work. So the tests also
// trace the fences (tracer, the same capture rule as the Recorder: a
// Flush snapshots whole cache lines, a Fence makes the pending ones
// durable), replay them in order into a memfd, and hand each check a
// MAP_PRIVATE mapping of it: a copy-on-write image that costs only the
// pages the check writes, and that the race detector does not shadow. The
// traced images are compared with Recorder.Image(k) (every k without the
// race detector, a sample with it).

type span struct {
	off  int64
	data []byte
}

// tracer forwards to a Medium and records what each fence made durable.
type tracer struct {
	pmem.Medium
	mu      sync.Mutex
	pending []span
	fences  [][]span
	// drop, when set, makes Flush forget ranges it returns true for (on
	// the wrapped medium too): the self-test's broken persist order.
	drop func(off, n int64) bool
}

func (t *tracer) Flush(off, n int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.drop != nil && t.drop(off, n) {
		return nil
	}
	size := t.Medium.Size()
	if n > 0 && off < size {
		start := max(off, 0) &^ (pmem.CacheLine - 1)
		end := min((min(off+n, size)+pmem.CacheLine-1)&^(pmem.CacheLine-1), size)
		t.pending = append(t.pending, span{start, append([]byte(nil), t.Medium.Bytes()[start:end]...)})
	}
	return t.Medium.Flush(off, n)
}

func (t *tracer) Fence() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.fences = append(t.fences, t.pending)
	t.pending = nil
	return t.Medium.Fence()
}

func (t *tracer) Persist(off, n int64) error {
	err := t.Flush(off, n)
	if ferr := t.Fence(); err == nil {
		err = ferr
	}
	return err
}

// Punch goes through t's own Persist, so the zeros are traced too.
func (t *tracer) Punch(off, n int64) error { return pmem.PunchByStores(t, off, n) }

func (t *tracer) Fences() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.fences)
}

// memImage is a pool image in a memfd: shared is its writable shared
// mapping; Private maps a copy-on-write view of it.
type memImage struct {
	fd     int
	size   int
	shared []byte
}

func newMemImage(size int) (*memImage, error) {
	fd, err := unix.MemfdCreate("dnnfs-crash-image", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, err
	}
	b, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &memImage{fd: fd, size: size, shared: b}, nil
}

// Private returns a copy-on-write mapping of the image. Unmap it (with
// unix.Munmap) before the image changes: pages it has not written yet
// follow the file.
func (m *memImage) Private() ([]byte, error) {
	return unix.Mmap(m.fd, 0, m.size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
}

func (m *memImage) Close() {
	unix.Munmap(m.shared)
	unix.Close(m.fd)
}

// imager replays traced fences into a memImage, in order.
type imager struct {
	img     *memImage
	fences  [][]span
	applied int
}

// advance makes the image the state after fence k (k >= the current one).
func (im *imager) advance(k int) {
	if k < im.applied {
		panic(fmt.Sprintf("imager: fence %d is behind the image's %d", k, im.applied))
	}
	for ; im.applied < k; im.applied++ {
		for _, s := range im.fences[im.applied] {
			copy(im.img.shared[s.off:], s.data)
		}
	}
}
