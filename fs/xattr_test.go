package fs

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pooltest"
)

// TestListxattrRacesSetxattr lists a file's attribute names into a buffer
// sized exactly for them while another goroutine adds and removes a longer
// name. A listing must fit the buffer it was sized against or answer
// ERANGE: one that sized against one snapshot of the names and copied
// another wrote past the kernel's buffer and panicked the FUSE server.
func TestListxattrRacesSetxattr(t *testing.T) {
	p := memPool(t)
	in, err := p.Create(p.Root(), "f", core.NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Setxattr(in, "user.a", []byte("v"), 0); err != nil {
		t.Fatal(err)
	}
	n := newNode(p, in, format.ModeReg, &Options{}).(gofs.NodeListxattrer)

	const rounds = 20000
	long := "user." + strings.Repeat("x", 200)
	var wg sync.WaitGroup
	done := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := p.Setxattr(in, long, nil, 0); err != nil {
				t.Error(err)
				return
			}
			if err := p.Removexattr(in, long); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(done); wg.Wait() }()
	// Eight listers keep the inode's lock busy, so the writer waits long
	// enough for the mutex to hand it the lock between a lister's two
	// acquisitions (sync.Mutex starvation mode), where the race was.
	const listers = 8
	errs := make(chan error, listers)
	for range listers {
		go func() {
			for i := range rounds {
				if err := listExact(n); err != nil {
					errs <- fmt.Errorf("round %d: %w", i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range listers {
		if err := <-errs; err != nil {
			t.Error(err) // after the other listers are done: the pool closes at cleanup
		}
	}
}

// listExact asks for the size of the name list, then lists into a buffer
// of exactly that size, turning a panic into an error.
func listExact(n gofs.NodeListxattrer) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("Listxattr panicked: %v", r)
		}
	}()
	size, e := n.Listxattr(context.Background(), nil)
	if e != 0 && e != syscall.ERANGE {
		return fmt.Errorf("sizing: %v", e)
	}
	dest := make([]byte, size)
	k, e := n.Listxattr(context.Background(), dest)
	if e != 0 && e != syscall.ERANGE {
		return fmt.Errorf("listing: %v", e)
	}
	if e == 0 && int(k) > len(dest) {
		return fmt.Errorf("listed %d bytes into %d", k, len(dest))
	}
	return nil
}

// memPool is a 64 MiB in-memory pool, closed and checked at cleanup.
func memPool(t *testing.T) *core.FS {
	t.Helper()
	p, _ := pooltest.MustOpen(t, pooltest.Options{Size: 64 << 20})
	return p
}
