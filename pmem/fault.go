package pmem

import (
	"errors"
	"sync"
)

// ErrInjected is a panic value for crash callbacks: recover can tell an
// injected crash from a real failure.
var ErrInjected = errors.New("pmem: injected fault")

// Faulty wraps a Medium to inject faults; wrap a Recorder to get both a
// crash point and its crash image. It changes nothing until armed.
type Faulty struct {
	Medium

	mu              sync.Mutex
	fences, crashAt int
	crash           func()
}

// NewFaulty wraps m.
func NewFaulty(m Medium) *Faulty { return &Faulty{Medium: m} }

// CrashAfterFences arranges for fn to be called once, right after the n-th
// fence (counting Fence and Persist calls since NewFaulty) has reached the
// underlying medium. fn typically panics with ErrInjected to stop the code
// under test dead.
func (f *Faulty) CrashAfterFences(n int, fn func()) {
	f.mu.Lock()
	f.crashAt, f.crash = n, fn
	f.mu.Unlock()
}

// Fences returns how many fences have passed through f.
func (f *Faulty) Fences() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fences
}

func (f *Faulty) Fence() {
	f.Medium.Fence()
	f.mu.Lock()
	f.fences++
	var fn func()
	if f.crash != nil && f.fences >= f.crashAt {
		fn, f.crash = f.crash, nil
	}
	f.mu.Unlock()
	if fn != nil {
		fn() // outside the lock: it may panic
	}
}

// Persist goes through f.Fence so that it counts as a fence.
func (f *Faulty) Persist(off, n int64) {
	f.Medium.Flush(off, n)
	f.Fence()
}
