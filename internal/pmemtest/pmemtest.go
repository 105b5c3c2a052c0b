// Package pmemtest gives tests pool media that are checked when the test
// ends: recovery.Check runs on them at cleanup and fails the test for
// every problem it finds (CONTRIBUTING.md: every test pool is checked).
//
// What it owns: making and checking test media. What it must not do:
// import core (core's own tests use it; internal/pooltest adds the
// formatted, opened pool on top), or be imported by non-test code.
package pmemtest

import (
	"testing"

	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

// NewMemory returns an in-memory medium of size bytes, checked at
// cleanup (see Check).
func NewMemory(t testing.TB, size int64) pmem.Medium {
	t.Helper()
	m := pmem.NewMemory(size)
	Check(t, m)
	return m
}

// Check registers a recovery.Check of m at cleanup. Cleanups run last
// registered first, so everything registered after this call (closing
// the file system on m, a test's own Cleanup) has run by then; a test's
// deferred calls run before any cleanup. The check fails t for every
// problem found; a medium that is not a pool (never formatted) fails it
// too, unless the test was skipped.
func Check(t testing.TB, m pmem.Medium) {
	t.Helper()
	t.Cleanup(func() {
		if t.Skipped() {
			return // possibly before the pool was made
		}
		CheckNow(t, m)
	})
}

// CheckNow runs recovery.Check on m and fails t for every problem found.
func CheckNow(t testing.TB, m pmem.Medium) {
	t.Helper()
	rep, err := recovery.Check(m)
	if err != nil {
		t.Errorf("recovery.Check of the test pool: %v", err)
		return
	}
	for _, p := range rep.Problems {
		t.Errorf("recovery.Check of the test pool: %v", p)
	}
}
