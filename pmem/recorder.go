package pmem

import (
	"fmt"
	"sync"
)

// CacheLine is the unit a flush writes back.
const CacheLine = 64

// Recorder is a DRAM Medium that remembers what every fence made durable,
// so a test can rebuild what the media would hold had the machine died
// right after fence k (DESIGN §Persistence).
//
// It models two kinds of crash image, and says nothing beyond them:
//
//   - Image(k), the fence-only image: a store reaches it only through a
//     Flush followed by a Fence, and the flushes of one fence land
//     together. Code that fails here loses or tears what a fence promised.
//     Passing here is not enough: real hardware also writes lines back on
//     its own (cache eviction), so a store can reach media before its
//     flush, and a fence's flushes can land one line at a time.
//   - From NewTrackingRecorder, the eviction images of Crashes (pebble's
//     CrashClone idea): the image after fence k plus a random subset of
//     the cache lines that differ from it when fence k+1 is called
//     (stored but not flushed, or flushed but not fenced), each with the
//     content the CPU saw at that call. This shows a commit word or a
//     tail pointer that reached media before what it covers.
//
// What neither models: a crash between two stores other than at a fence
// call, a line evicted earlier with content later overwritten (an evicted
// line holds its content as of the crash point), and tearing inside a
// line: a line is evicted whole. The hardware promises only that an
// aligned 8-byte store is not torn, so code must not rely on two words of
// one line reaching media together; these images do not catch code that
// does. A flush copies whole cache lines, as the hardware does, so stores
// next to a flushed range can ride along with it.
//
// WriteAt is a store like any other (durable once flushed and fenced);
// Punch stores zeros and persists them (one fence), as it is durable on
// return on every medium; Fallocate makes nothing durable.
type Recorder struct {
	mu      sync.Mutex
	buf     []byte   // what the CPU sees
	initial []byte   // durable image before fence 1
	pending []span   // flushed, not yet fenced
	fences  [][]span // fences[i] holds what fence i+1 made durable

	// NewTrackingRecorder: seen is the CPU view at the last fence call,
	// and stores[i] the lines that changed between the calls of fence i
	// and fence i+1 (fence 0: the start, when the CPU view was initial).
	track  bool
	seen   []byte
	stores [][]span
}

type span struct {
	off  int64
	data []byte
}

// NewRecorder returns a Recorder whose contents and durable starting image
// are a copy of initial.
func NewRecorder(initial []byte) *Recorder {
	return &Recorder{
		buf:     append([]byte(nil), initial...),
		initial: append([]byte(nil), initial...),
	}
}

func (r *Recorder) Bytes() []byte { return r.buf }
func (r *Recorder) Size() int64   { return int64(len(r.buf)) }
func (r *Recorder) Kind() Kind    { return Memory }

// Close does nothing: the images stay available after the code under test
// closes its medium.
func (r *Recorder) Close() error { return nil }

// Flush snapshots the current bytes of the cache lines covering [off, off+n).
// They become durable at the next Fence.
func (r *Recorder) Flush(off, n int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	start, end, ok := clampRange(off, n, int64(len(r.buf)))
	if !ok {
		return nil
	}
	start &^= CacheLine - 1
	end = min((end+CacheLine-1)&^(CacheLine-1), int64(len(r.buf)))
	r.pending = append(r.pending, span{start, append([]byte(nil), r.buf[start:end]...)})
	return nil
}

// Fence makes the pending flushes durable as one numbered fence (1, 2, ...).
// A Fence with nothing pending still takes a number, so fence numbers count
// Fence calls and a test can name a crash point without knowing what was
// flushed before it.
func (r *Recorder) Fence() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.track {
		r.stores = append(r.stores, changedLines(r.seen, r.buf, true))
	}
	r.fences = append(r.fences, r.pending)
	r.pending = nil
	return nil
}

func (r *Recorder) Persist(off, n int64) error {
	r.Flush(off, n)
	return r.Fence()
}

// WriteAt stores p at off; it reaches crash images once flushed and fenced.
func (r *Recorder) WriteAt(p []byte, off int64) error {
	if err := checkRange(off, int64(len(p)), int64(len(r.buf))); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	copy(r.buf[off:], p)
	return nil
}

// Fallocate makes nothing durable: the Recorder's bytes always exist.
func (r *Recorder) Fallocate(off, n int64) error { return nil }

// Punch clears [off, off+n) and persists the zeros as one fence.
func (r *Recorder) Punch(off, n int64) error { return PunchByStores(r, off, n) }

// Fences returns how many fences have been issued.
func (r *Recorder) Fences() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.fences)
}

// Image returns a fresh copy of what the media would hold after a crash
// right after fence k: the initial image with the flushes of fences 1..k
// applied in order. Image(0) is the initial image; Image(Fences()) is all
// that has been persisted. It panics if k is out of range.
func (r *Recorder) Image(k int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	if k < 0 || k > len(r.fences) {
		panic(fmt.Sprintf("pmem: Recorder.Image(%d) out of range [0, %d]", k, len(r.fences)))
	}
	img := append([]byte(nil), r.initial...)
	for _, f := range r.fences[:k] {
		apply(img, f)
	}
	return img
}
