package core

import (
	"bytes"
	"errors"
	"testing"
)

// TestPunchOnFullPool: punching holes into a file of a full pool splits
// its extent each time, and the growing extent list needs overflow blocks;
// the metadata reserve lets every punch succeed (xfstests generic/256),
// while writes stop short of it and statfs does not count it as free.
func TestPunchOnFullPool(t *testing.T) {
	fs, _ := openTestPool(t)
	root := fs.Root()
	const holes = 300
	f, err := fs.Create(root, "f", NewInode{Mode: 0o100644})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(f, 0, bytes.Repeat([]byte{1}, 3*holes*bs), false); err != nil {
		t.Fatal(err)
	}
	// Fill the pool.
	fill, err := fs.Create(root, "fill", NewInode{Mode: 0o100644})
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte{2}, 64*bs)
	var off int64
	for {
		n, err := fs.Write(fill, off, chunk, false)
		off += int64(n)
		if errors.Is(err, ErrNoSpace) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for len(chunk) > bs { // the last blocks one at a time
		chunk = chunk[:len(chunk)/2]
		for {
			n, err := fs.Write(fill, off, chunk, false)
			off += int64(n)
			if err != nil {
				break
			}
		}
	}
	if got := fs.Statfs().Avail; got != 0 {
		t.Fatalf("statfs shows %d free blocks after writes hit ENOSPC", got)
	}
	if fs.alloc.Free() != fs.reserve || fs.reserve == 0 {
		t.Fatalf("%d blocks left after writes hit ENOSPC, want the reserve (%d)", fs.alloc.Free(), fs.reserve)
	}
	// Punch a block out of every three: each punch adds an extent.
	for i := uint64(0); i < holes; i++ {
		if err := fs.Fallocate(f, 3*i*bs+bs, bs, FallocPunchHole|FallocKeepSize); err != nil {
			t.Fatalf("punch %d of %d on a full pool: %v", i+1, holes, err)
		}
		// Take the freed block back, as generic/256 does: the pool stays full.
		if _, err := fs.Write(fill, off, make([]byte, bs), false); err == nil {
			off += bs
		}
	}
	if len(f.exts) < holes {
		t.Fatalf("%d extents after %d punches", len(f.exts), holes)
	}
}
