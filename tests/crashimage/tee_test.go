package crashimage_test

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/pmem"
)

// tee passes every call to a medium (the script's pmem.Recorder, or a
// recovered image) and records the flushes the way pmem.Recorder does (whole cache lines, snapshot at Flush, durable at the next Fence), so
// that the images of consecutive fences can be built incrementally: the
// Recorder's Image(k) allocates and replays from scratch for every k, which
// under the race detector costs more than the checks themselves. The sweep
// compares the two at many fences.
type tee struct {
	pmem.Medium
	initial []byte

	mu      sync.Mutex
	pending []flushed
	fences  [][]flushed // fences[i]: what fence i+1 made durable
}

type flushed struct {
	off  int64
	data []byte
}

// newTee starts recording; m's current bytes are the durable starting image.
func newTee(m pmem.Medium) *tee {
	initial := getBuf(len(m.Bytes()))
	copy(initial, m.Bytes())
	return &tee{Medium: m, initial: initial}
}

// release returns the tee's buffers to the pool of image buffers.
func (t *tee) release() { putBuf(t.initial); t.initial = nil }

// Image-sized buffers are mapped outside the Go heap and reused: under
// the race detector every fresh multi-megabyte allocation, and every copy
// into Go memory, costs more than the checks of an image, and the
// detector does not shadow memory the Go runtime did not allocate. A
// buffer's bytes are whatever its last user left: callers overwrite it.
var bufs struct {
	sync.Mutex
	free [][]byte
}

func getBuf(n int) []byte {
	bufs.Lock()
	for i, b := range bufs.free {
		if len(b) == n {
			bufs.free = append(bufs.free[:i], bufs.free[i+1:]...)
			bufs.Unlock()
			return b
		}
	}
	bufs.Unlock()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(fmt.Sprintf("mapping a %d-byte image buffer: %v", n, err))
	}
	return b
}

func putBuf(b []byte) {
	if b != nil {
		bufs.Lock()
		bufs.free = append(bufs.free, b)
		bufs.Unlock()
	}
}

func (t *tee) Flush(off, n int64) error {
	size := int64(len(t.Bytes()))
	if n > 0 && off < size {
		start, end := max(off, 0), size
		if off < 0 || n <= size-off {
			end = min(off+n, size)
		}
		start &^= pmem.CacheLine - 1
		end = min((end+pmem.CacheLine-1)&^(pmem.CacheLine-1), size)
		if start < end {
			t.mu.Lock()
			t.pending = append(t.pending, flushed{start, append([]byte(nil), t.Bytes()[start:end]...)})
			t.mu.Unlock()
		}
	}
	return t.Medium.Flush(off, n)
}

func (t *tee) Fence() error {
	t.mu.Lock()
	t.fences = append(t.fences, t.pending)
	t.pending = nil
	t.mu.Unlock()
	return t.Medium.Fence()
}

func (t *tee) Persist(off, n int64) error {
	err := t.Flush(off, n)
	if ferr := t.Fence(); err == nil {
		err = ferr
	}
	return err
}

// Punch goes through t's own Persist, so the zeros are recorded here too.
func (t *tee) Punch(off, n int64) error { return pmem.PunchByStores(t, off, n) }

// images walks the crash images of consecutive fences.
type images struct {
	t    *tee
	k    int
	cur  []byte // the image after fence k
	work []byte // reused copy handed to checks
}

// imagesFrom starts at the image after fence k of the script.
func (s *script) imagesFrom(k int) *images { return s.tee.imagesFrom(k) }

// imagesFrom starts at the image after fence k.
func (t *tee) imagesFrom(k int) *images {
	im := &images{t: t, cur: getBuf(len(t.initial))}
	copy(im.cur, t.initial)
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.fences[:k] {
		for _, sp := range f {
			copy(im.cur[sp.off:], sp.data)
		}
	}
	im.k = k
	return im
}

// next advances to the following fence.
func (im *images) next() bool {
	im.t.mu.Lock()
	defer im.t.mu.Unlock()
	if im.k >= len(im.t.fences) {
		return false
	}
	for _, sp := range im.t.fences[im.k] {
		copy(im.cur[sp.off:], sp.data)
	}
	im.k++
	return true
}

// release returns the buffers to the pool; the images must not be used
// afterwards.
func (im *images) release() {
	putBuf(im.cur)
	putBuf(im.work)
	im.cur, im.work = nil, nil
}

// count returns how many fences have been recorded.
func (t *tee) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.fences)
}

// image returns a copy of the current image (valid until the next call).
func (im *images) image() []byte {
	if im.work == nil {
		im.work = getBuf(len(im.cur))
	}
	copy(im.work, im.cur)
	return im.work
}
