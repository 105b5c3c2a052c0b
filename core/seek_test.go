package core

import (
	"bytes"
	"errors"
	"testing"
)

// TestUnwrittenExtents: fallocate's blocks are unwritten (holes to
// SeekData, zeros to reads) until a write reaches them, block by block;
// the flags survive a remount.
func TestUnwrittenExtents(t *testing.T) {
	fs, m := openTestPool(t)
	in, err := fs.Create(fs.Root(), "f", NewInode{Mode: 0o100644})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Fallocate(in, 0, 4*bs, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(in, bs+5, []byte{7}, false); err != nil {
		t.Fatal(err)
	}
	check := func(when string, in *Inode) {
		t.Helper()
		type q struct {
			off  uint64
			hole bool
			want uint64
			err  error
		}
		for _, c := range []q{
			{0, false, bs, nil}, {0, true, 0, nil}, {bs, true, 2 * bs, nil},
			{2 * bs, false, 0, ErrNoSuchOffset}, {3 * bs, true, 3 * bs, nil}, {4 * bs, true, 0, ErrNoSuchOffset},
		} {
			got, err := fs.SeekData(in, c.off, c.hole)
			if got != c.want || !errors.Is(err, c.err) {
				t.Errorf("%s: SeekData(%d, hole=%v) = %d, %v; want %d, %v", when, c.off, c.hole, got, err, c.want, c.err)
			}
		}
		want := make([]byte, 4*bs)
		want[bs+5] = 7
		got := make([]byte, 4*bs)
		if n, err := fs.ReadAt(in, got, 0); n != len(got) || err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: read %d bytes, %v; content differs: %v", when, n, err, !bytes.Equal(got, want))
		}
		in.mu.Lock()
		var flags []bool
		for _, e := range in.exts {
			for k := uint64(0); k < e.Len; k++ {
				flags = append(flags, e.Unwritten)
			}
		}
		in.mu.Unlock()
		if len(flags) != 4 || !flags[0] || flags[1] || !flags[2] || !flags[3] {
			t.Errorf("%s: unwritten flags by block %v, want [true false true true]", when, flags)
		}
	}
	check("after the write", in)
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	fs, _, err = Open(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	in, err = fs.Lookup(fs.Root(), "f")
	if err != nil {
		t.Fatal(err)
	}
	check("after a remount", in)
}
