package sessioncrash_test

import (
	"bytes"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/tests/sessioncrash/srcdata"
)

// hookMedium calls onFlush before each Flush of the wrapped medium.
type hookMedium struct {
	pmem.Medium
	mu      sync.Mutex
	onFlush func(off, n int64)
}

func (h *hookMedium) Flush(off, n int64) error {
	h.mu.Lock()
	f := h.onFlush
	h.mu.Unlock()
	if f != nil {
		f(off, n)
	}
	return h.Medium.Flush(off, n)
}

func (h *hookMedium) Persist(off, n int64) error {
	err := h.Flush(off, n)
	if ferr := h.Medium.Fence(); err == nil {
		err = ferr
	}
	return err
}

// Punch goes through h's own Persist, so its hook sees the flush.
func (h *hookMedium) Punch(off, n int64) error { return pmem.PunchByStores(h, off, n) }

func (h *hookMedium) setFlush(f func(off, n int64)) {
	h.mu.Lock()
	h.onFlush = f
	h.mu.Unlock()
}

// TestAbandonDuringTailPersist: AbandonSession (setfattr -x
// user.dnnfs.session) frees the F_log and P_log blocks while a write of
// the session may be inside persistTail, between flushing its data and
// storing Tail_ptr. AbandonSession takes neither the file's data lock
// nor anything persistTail holds across the store, and persistTail does
// not look at s.closed again, so the 8-byte Tail_ptr store lands in a
// block that is free, or already another file's. Here the pool is full,
// so the freed P_log block is the next file's first data block, and the
// late tail store overwrites that file's first 8 bytes.
func TestAbandonDuringTailPersist(t *testing.T) {
	h := &hookMedium{Medium: pmem.NewMemory(16 << 20)}
	if err := core.Format(h, 0, 0); err != nil {
		t.Fatal(err)
	}
	// No metadata reserve: the freed log blocks must be the only free ones.
	p, _, err := core.Open(h, core.Options{TailInterval: 64 << 10, NoReserve: true})
	if err != nil {
		t.Fatal(err)
	}
	root := p.Root()
	f, err := p.Create(root, "f", core.NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.StartSession(f, 1, sessSize, format.SessionWrite); err != nil {
		t.Fatal(err)
	}
	// Fill the pool: after the abandon, the session's two log blocks are
	// the only free blocks.
	filler, err := p.Create(root, "filler", core.NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Fallocate(filler, 0, p.Statfs().Free*blk, 0); err != nil {
		t.Fatal(err)
	}
	if free := p.Statfs().Free; free != 0 {
		t.Fatalf("%d blocks still free", free)
	}
	g, err := p.Create(root, "g", core.NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	// The segment's first write records its Pid (a journal commit).
	if _, err := p.Write(f, 0, srcdata.Bytes(1, 0, ioChunk), false); err != nil {
		t.Fatal(err)
	}
	// The next write moves the tail by a tail interval: persistTail
	// flushes the data, and there it is held.
	inFlush := make(chan struct{})
	proceed := make(chan struct{})
	var once sync.Once
	h.setFlush(func(off, n int64) {
		once.Do(func() {
			close(inFlush)
			<-proceed
		})
	})
	wrote := make(chan error, 1)
	go func() {
		_, err := p.Write(f, ioChunk, srcdata.Bytes(1, ioChunk, 64<<10), false)
		wrote <- err
	}()
	select {
	case <-inFlush:
	case err := <-wrote:
		t.Fatalf("the write returned (%v) without flushing", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the write never flushed")
	}
	h.setFlush(nil)
	// The abandon must wait for the tail store in flight: it may not free
	// the log regions under it. (A wrong abandon returns at once; this
	// can only pass wrongly under extreme load, never fail wrongly.)
	abandoned := make(chan error, 1)
	go func() { abandoned <- p.AbandonSession(f) }()
	select {
	case err := <-abandoned:
		t.Fatalf("AbandonSession returned (%v) while a tail store was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	close(proceed)
	if err := <-abandoned; err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	want := srcdata.Bytes(99, 0, 2*blk)
	if _, err := p.Write(g, 0, want, false); err != nil { // takes the freed F_log and P_log blocks
		t.Fatal(err)
	}
	// Writes to the abandoned file must not store into the freed logs.
	if _, err := p.Write(f, ioChunk+64<<10, srcdata.Bytes(1, ioChunk+64<<10, 64<<10), false); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(want))
	if _, err := p.ReadAt(g, got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for got[i] == want[i] {
			i++
		}
		t.Fatalf("another file's data was overwritten by a session that had been abandoned: g byte %d is %#x, want %#x (g[%d:%d] = % x)",
			i, got[i], want[i], i&^7, i&^7+8, got[i&^7:i&^7+8])
	}
}

// TestOtherProcessIOIsNotProgress: a session's tails record how far the
// job's threads got (DESIGN.md §Two-layer log: the tail is the offset up to which
// the segment's bytes are complete); I/O of
// another application (another process: lockData routes it to the
// whole-file lock) is not the job's progress. sessionProgress counts
// every read or write of the file whoever made it (and TID 0 too), so a
// `cat` of a parameter file during a read session finishes the session
// for the job, and a crash then makes the job skip what it never read;
// in a write session, another process's write ahead of the job's tail
// moves the tail over bytes the job never wrote, and a crash then leaves
// the other process's bytes in the job's file.
func TestOtherProcessIOIsNotProgress(t *testing.T) {
	other := exec.Command("sleep", "60") // another process: its pid is a thread of another application
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { other.Process.Kill(); other.Wait() }()
	otherCaller := core.Caller{TID: uint32(other.Process.Pid)}

	for _, mode := range []uint32{format.SessionRead, format.SessionWrite} {
		name := map[uint32]string{format.SessionRead: "read", format.SessionWrite: "write"}[mode]
		t.Run(name, func(t *testing.T) {
			p, _, err := openMemPool(16 << 20)
			if err != nil {
				t.Fatal(err)
			}
			f, err := p.Create(p.Root(), "f", core.NewInode{Mode: format.ModeReg | 0o644})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Write(f, 0, srcdata.Bytes(5, 0, sessSize), false); err != nil {
				t.Fatal(err)
			}
			if err := p.StartSession(f, 4, sessSize, mode); err != nil {
				t.Fatal(err)
			}
			job := newWorker()
			defer close(job.ch)
			// The job's thread does the first I/O: its process owns the session.
			job.do(func() {
				if mode == format.SessionRead {
					r, err := p.ReadAs(job.caller(), f, 0, ioChunk)
					if err != nil {
						t.Error(err)
						return
					}
					r.Done()
				} else if _, err := p.WriteAs(job.caller(), f, 0, srcdata.Bytes(6, 0, ioChunk), false); err != nil {
					t.Error(err)
				}
			})
			// Another application reads (or writes) the whole file.
			if mode == format.SessionRead {
				r, err := p.ReadAs(otherCaller, f, 0, sessSize)
				if err != nil {
					t.Fatal(err)
				}
				r.Done()
			} else if _, err := p.WriteAs(otherCaller, f, 0, make([]byte, sessSize), false); err != nil {
				t.Fatal(err)
			}
			info, ok := p.Session(f)
			if !ok {
				t.Fatalf("another process's %s of the file finished and closed the job's %s session (the job did %d of %d bytes)",
					name, name, ioChunk, sessSize)
			}
			for i, sg := range info.Segments {
				want := sg.Start
				if i == 0 {
					want = ioChunk
				}
				if sg.Tail > want {
					t.Errorf("segment %d: tail %d after another process's %s; the job got to %d", i, sg.Tail, name, want)
				}
			}
		})
	}
}

// openMemPool formats a DRAM pool of size bytes and opens it.
func openMemPool(size int64) (*core.FS, *core.MountReport, error) {
	m := pmem.NewMemory(size)
	if err := core.Format(m, 0, 0); err != nil {
		return nil, nil, err
	}
	return core.Open(m, core.Options{TailInterval: 64 << 10})
}
