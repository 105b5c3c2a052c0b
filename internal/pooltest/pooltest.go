// Package pooltest opens checked test pools, in the shape of bbolt's
// btesting.MustCreateDB: MustOpen makes and formats an in-memory medium,
// opens the pool on it and registers, at cleanup, closing the pool and
// then recovery.Check of the medium (internal/pmemtest), failing the test
// for anything the check finds.
//
// What it owns: the test pool of packages above core. What it must not
// do: be imported by core's own tests (core's openTestPool wraps
// pmemtest instead: this package imports core) or by non-test code.
package pooltest

import (
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/internal/pmemtest"
	"github.com/dnnfs/dnnfs/pmem"
)

// DefaultSize is the medium size MustOpen uses when Options.Size is 0.
const DefaultSize = 32 << 20

// Options of a test pool.
type Options struct {
	Size     int64  // bytes; 0 is DefaultSize
	UID, GID uint32 // owner of the root directory
	Core     core.Options
}

// MustOpen returns an open pool on a fresh in-memory medium. At cleanup
// the pool is closed (a second Close by the test is harmless) and the
// medium checked.
func MustOpen(t testing.TB, opts Options) (*core.FS, pmem.Medium) {
	t.Helper()
	if opts.Size == 0 {
		opts.Size = DefaultSize
	}
	m := pmemtest.NewMemory(t, opts.Size)
	if err := core.Format(m, opts.UID, opts.GID); err != nil {
		t.Fatalf("formatting the test pool: %v", err)
	}
	fs, _, err := core.Open(m, opts.Core)
	if err != nil {
		t.Fatalf("opening the test pool: %v", err)
	}
	t.Cleanup(func() {
		if err := fs.Close(); err != nil {
			t.Errorf("closing the test pool: %v", err)
		}
	})
	return fs, m
}
