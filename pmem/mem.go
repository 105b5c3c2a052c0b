package pmem

import "fmt"

// NewMemory returns a DRAM medium of size bytes, for unit tests. Flush,
// Fence and Fallocate do nothing and nothing survives Close.
func NewMemory(size int64) Medium {
	return &memMedium{b: make([]byte, size)}
}

// MemoryOver returns a DRAM medium over b itself (no copy), for tests that
// open a crash image in place: stores change b, Flush and Fence do nothing.
func MemoryOver(b []byte) Medium { return &memMedium{b: b} }

type memMedium struct{ b []byte }

func (m *memMedium) Bytes() []byte                { return m.b }
func (m *memMedium) Size() int64                  { return int64(len(m.b)) }
func (m *memMedium) Flush(off, n int64) error     { return nil }
func (m *memMedium) Fence() error                 { return nil }
func (m *memMedium) Fallocate(off, n int64) error { return nil }
func (m *memMedium) Persist(off, n int64) error   { return nil }
func (m *memMedium) Kind() Kind                   { return Memory }
func (m *memMedium) Close() error                 { return nil }

func (m *memMedium) WriteAt(p []byte, off int64) error {
	if err := checkRange(off, int64(len(p)), int64(len(m.b))); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	copy(m.b[off:], p)
	return nil
}

func (m *memMedium) Punch(off, n int64) error {
	if start, end, ok := clampRange(off, n, int64(len(m.b))); ok {
		clear(m.b[start:end])
	}
	return nil
}

// clampRange clips [off, off+n) to [0, size). ok is false when nothing is
// left, including for n <= 0.
func clampRange(off, n, size int64) (start, end int64, ok bool) {
	if n <= 0 || off >= size {
		return 0, 0, false
	}
	if off > 0 && n > size-off { // off+n would pass size, or overflow
		end = size
	} else {
		end = min(off+n, size)
	}
	start = max(off, 0)
	return start, end, start < end
}
