package pmem

import (
	"bytes"
	"fmt"
	"math/bits"
	"math/rand/v2"

	"golang.org/x/sys/unix"
)

// Eviction images of a Recorder (see the Recorder's comment for what they
// model). Code under test stores through Bytes() directly, so the
// Recorder cannot see stores: at every fence call it compares the CPU view
// with the one at the previous call, line by line, and logs the lines
// that changed. Crashes replays that log beside the fences to know, at
// each crash point, which lines the CPU holds differently from the media.

// pageSize is the unit compared first: most of a pool is unchanged
// between two fences, and one comparison of a page skips 64 lines.
const pageSize = 4096

// NewTrackingRecorder is NewRecorder for a Recorder that also logs the
// lines stored into at every fence call, so that Crashes can build
// eviction images. A fence then reads the whole mapping: no store may run
// concurrently with it (the crash sweeps run one operation at a time).
// Its mapping and the copy it compares with live outside the Go heap, as
// a real pool's mapping does: the race detector does not shadow them (it
// would make every fence's comparison cost a shadow pass over the pool).
// They are never unmapped, since Bytes may be in use until the process
// ends.
func NewTrackingRecorder(initial []byte) *Recorder {
	r := &Recorder{buf: mapAnon(len(initial)), initial: bytes.Clone(initial), track: true, seen: mapAnon(len(initial))}
	copy(r.buf, initial)
	copy(r.seen, initial)
	return r
}

// mapAnon maps n bytes of anonymous memory, or panics: it is for tests.
func mapAnon(n int) []byte {
	b, err := unix.Mmap(-1, 0, max(n, 1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		panic(fmt.Sprintf("pmem: mapping %d bytes: %v", n, err))
	}
	return b[:n]
}

// changedLines returns the whole cache lines where cur differs from old,
// as spans of consecutive lines holding cur's bytes. With update, old
// takes cur's bytes where they differ.
func changedLines(old, cur []byte, update bool) []span {
	var out []span
	for p := 0; p < len(cur); p += pageSize {
		pe := min(p+pageSize, len(cur))
		if bytes.Equal(old[p:pe], cur[p:pe]) {
			continue
		}
		for l := p; l < pe; l += CacheLine {
			le := min(l+CacheLine, pe)
			if bytes.Equal(old[l:le], cur[l:le]) {
				continue
			}
			if n := len(out); n > 0 && out[n-1].off+int64(len(out[n-1].data)) == int64(l) {
				out[n-1].data = append(out[n-1].data, cur[l:le]...)
			} else {
				out = append(out, span{int64(l), append([]byte(nil), cur[l:le]...)})
			}
			if update {
				copy(old[l:le], cur[l:le])
			}
		}
	}
	return out
}

// Line is one cache line of an eviction image: its pool offset and the
// bytes the CPU held there at the crash point.
type Line struct {
	Off  int64
	Data []byte
}

// Crashes walks the crash points of a Recorder that tracks stores, in
// fence order. At position k it holds the image after fence k (Image) and
// the lines that are dirty when fence k+1 is called (after the last
// fence: when the walk began): stored or flushed after fence k, and
// different from the image.
// An eviction image of the crash between fence k and fence k+1 is Image
// with a subset of them laid over it (Evicted); the operations it may
// show are those a crash right after fence k may show, plus the stores of
// the one in flight, as for Image(k).
type Crashes struct {
	r       *Recorder
	seed    uint64
	k       int
	fd      int      // memfd holding Image(k), so images can be copy-on-write
	durable []byte   // Image(k): fd's shared mapping
	cpu     []byte   // the CPU view at fence k+1's call (mapped)
	dirty   []uint64 // bit per line: cpu and durable differ there
	tail    []span   // the stores after the last fence, as of Crashes
}

// Crashes starts a walk at fence from (0 <= from <= Fences()); seed fixes
// the subsets Evicted picks. It panics unless r came from
// NewTrackingRecorder. Stores made after this call are not seen. Close it
// when done.
func (r *Recorder) Crashes(from int, seed uint64) *Crashes {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.track {
		panic("pmem: Recorder.Crashes of a Recorder that does not track stores (NewTrackingRecorder)")
	}
	if from < 0 || from > len(r.fences) {
		panic(fmt.Sprintf("pmem: Recorder.Crashes(%d) out of range [0, %d]", from, len(r.fences)))
	}
	fd, durable, err := sharedImage(len(r.initial))
	if err != nil {
		panic(fmt.Sprintf("pmem: Recorder.Crashes: %v", err))
	}
	copy(durable, r.initial)
	c := &Crashes{
		r:       r,
		seed:    seed,
		k:       from,
		fd:      fd,
		durable: durable,
		cpu:     mapAnon(len(r.initial)), // outside the Go heap, as durable
		dirty:   make([]uint64, (len(r.buf)/CacheLine+64)/64),
		tail:    changedLines(r.seen, r.buf, false),
	}
	copy(c.cpu, r.initial)
	for _, f := range r.fences[:from] {
		apply(c.durable, f)
	}
	for i := 0; i <= from; i++ {
		apply(c.cpu, c.storesLocked(i))
	}
	c.markDirty([]span{{0, c.cpu}})
	return c
}

// storesLocked is what the CPU stored between the calls of fence i and
// fence i+1 (after the last fence: until Crashes was called).
// Precondition: c.r.mu is held.
func (c *Crashes) storesLocked(i int) []span {
	if i < len(c.r.stores) {
		return c.r.stores[i]
	}
	return c.tail
}

// Next moves to the next fence; it returns false after the last one.
func (c *Crashes) Next() bool {
	c.r.mu.Lock()
	defer c.r.mu.Unlock()
	if c.k >= len(c.r.fences) {
		return false
	}
	f := c.r.fences[c.k]
	c.k++
	s := c.storesLocked(c.k)
	apply(c.durable, f)
	apply(c.cpu, s)
	c.markDirty(f)
	c.markDirty(s)
	return true
}

// Fence is k: Image is the image after fence k.
func (c *Crashes) Fence() int { return c.k }

// Image is the fence-only image after fence k. It is the walk's own
// buffer: do not change it, and copy it to keep it past Next or Close.
func (c *Crashes) Image() []byte { return c.durable }

// markDirty recomputes the dirty bit of the lines the spans cover.
func (c *Crashes) markDirty(spans []span) {
	for _, s := range spans {
		for l := s.off &^ (CacheLine - 1); l < s.off+int64(len(s.data)); l += CacheLine {
			le := min(l+CacheLine, int64(len(c.cpu)))
			i := l / CacheLine
			if bytes.Equal(c.cpu[l:le], c.durable[l:le]) {
				c.dirty[i/64] &^= 1 << (i % 64)
			} else {
				c.dirty[i/64] |= 1 << (i % 64)
			}
		}
	}
}

// Dirty is how many lines the crash between fence k and fence k+1 may
// show evicted.
func (c *Crashes) Dirty() int {
	n := 0
	for _, w := range c.dirty {
		n += bits.OnesCount64(w)
	}
	return n
}

// evictOdds is the chance that each dirty line is in a subset, taken in
// turn by the subsets of a crash point and from one crash point to the
// next: half of them, a few (one pointer ahead of what it covers), or
// nearly all (one line lagging).
var evictOdds = [...]float64{0.5, 0.125, 0.875}

// Evicted returns subset j of the dirty lines, each with the bytes the
// CPU held at the crash point: lay them over Image for eviction image j.
// The subset depends only on the seed, k and j. The lines share the
// walk's buffers: do not change them, and use them before Next. A
// negative j is the empty subset.
func (c *Crashes) Evicted(j int) []Line {
	if j < 0 {
		return nil
	}
	rng := rand.New(rand.NewPCG(c.seed, uint64(c.k)<<16|uint64(j)))
	p := evictOdds[(c.k+j)%len(evictOdds)]
	var out []Line
	for wi, w := range c.dirty {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			w &^= 1 << b
			if rng.Float64() >= p {
				continue
			}
			off := int64(wi*64+b) * CacheLine
			out = append(out, Line{off, c.cpu[off:min(off+CacheLine, int64(len(c.cpu)))]})
		}
	}
	return out
}

// EvictedImage returns eviction image j (negative: the fence-only image)
// as a private copy-on-write mapping of Image: only the pages it or its
// user writes are copied, and the race detector does not shadow it, so a
// sweep of many images of a large pool stays cheap. Call release before
// Next.
func (c *Crashes) EvictedImage(j int) (img []byte, release func()) {
	return c.imageWith(c.Evicted(j))
}

// imageWith is EvictedImage for the subset lines.
func (c *Crashes) imageWith(lines []Line) (img []byte, release func()) {
	img, err := unix.Mmap(c.fd, 0, len(c.durable), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		panic(fmt.Sprintf("pmem: Crashes.EvictedImage: %v", err))
	}
	for _, l := range lines {
		copy(img[l.Off:], l.Data)
	}
	return img, func() { unix.Munmap(img) }
}

// Sweep walks on to the last fence and calls check with each crash image
// from the current fence on: with subsets 0 the fence-only image of each
// crash point (j = -1), else its eviction images 0 .. subsets-1 that
// evict at least one line (an empty subset is the fence-only image). It
// returns how many images it passed to check and the errors check
// returned, each prefixed with where.
func (c *Crashes) Sweep(subsets int, check func(k, j int, img []byte) error) (int, []error) {
	var errs []error
	n := 0
	for ok := true; ok; ok = c.Next() {
		for j := min(subsets, 1) - 1; j < subsets; j++ {
			lines := c.Evicted(j)
			if j >= 0 && len(lines) == 0 {
				continue
			}
			n++
			img, release := c.imageWith(lines)
			err := check(c.k, j, img)
			release()
			if err != nil {
				errs = append(errs, fmt.Errorf("crash after fence %d (%d of %d dirty lines evicted, subset %d): %w",
					c.k, len(lines), c.Dirty(), j, err))
			}
		}
	}
	return n, errs
}

// Close releases the walk's image.
func (c *Crashes) Close() {
	unix.Munmap(c.durable)
	unix.Munmap(c.cpu)
	unix.Close(c.fd)
	c.durable, c.cpu = nil, nil
}

// sharedImage is an anonymous file of size bytes and its shared mapping.
func sharedImage(size int) (int, []byte, error) {
	fd, err := imageFile()
	if err != nil {
		return -1, nil, err
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	b, err := unix.Mmap(fd, 0, max(size, 1), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return -1, nil, err
	}
	return fd, b[:size], nil
}

// apply lays spans over img, in order.
func apply(img []byte, spans []span) {
	for _, s := range spans {
		copy(img[s.off:], s.data)
	}
}
