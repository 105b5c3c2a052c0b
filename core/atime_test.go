package core

import (
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/format"
)

// TestNeedsAtime checks the kernel's relatime rules, the 24-hour one
// included (an end-to-end test cannot wait a day).
func TestNeedsAtime(t *testing.T) {
	now := time.Now().UnixNano()
	h := int64(time.Hour)
	cases := []struct {
		name                string
		atime, mtime, ctime int64
		relatime, strict    bool
	}{
		{"atime older than mtime", now - 2*h, now - h, now - 3*h, true, true},
		{"atime equal to mtime", now - h, now - h, now - 3*h, true, true},
		{"atime older than ctime", now - 2*h, now - 3*h, now - h, true, true},
		{"atime newest, recent", now - h, now - 2*h, now - 2*h, false, true},
		{"atime newest, 23h59m old", now - 24*h + int64(time.Minute), now - 25*h, now - 25*h, false, true},
		{"atime newest, 24h old", now - 24*h, now - 25*h, now - 25*h, true, true},
		{"atime newest, 2 days old", now - 48*h, now - 49*h, now - 49*h, true, true},
		{"atime is now", now, now - h, now - h, false, false},
	}
	for _, c := range cases {
		d := format.Inode{Atime: c.atime, Mtime: c.mtime, Ctime: c.ctime}
		if got := AtimeRelative.needsAtime(&d, now); got != c.relatime {
			t.Errorf("%s: relatime updates: %v, want %v", c.name, got, c.relatime)
		}
		if got := AtimeStrict.needsAtime(&d, now); got != c.strict {
			t.Errorf("%s: strictatime updates: %v, want %v", c.name, got, c.strict)
		}
		if AtimeNever.needsAtime(&d, now) {
			t.Errorf("%s: noatime updates", c.name)
		}
	}
}

// TestReadAtime: a read updates atime by the mount's rule in DRAM only,
// without a journal commit, and unmount persists it.
func TestReadAtime(t *testing.T) {
	for _, mode := range []AtimeMode{AtimeRelative, AtimeNever, AtimeStrict} {
		t.Run(mode.String(), func(t *testing.T) {
			fs, m := openTestPoolWith(t, 16<<20, Options{Atime: mode})
			in, err := fs.Create(fs.Root(), "f", NewInode{Mode: format.ModeReg | 0o644})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fs.Write(in, 0, []byte("data"), false); err != nil {
				t.Fatal(err)
			}
			old := time.Now().Add(-48 * time.Hour)
			if err := fs.Setattr(in, SetAttr{Atime: &old, Mtime: &old}); err != nil {
				t.Fatal(err)
			}
			commits, _ := fs.j.Stats()
			buf := make([]byte, 4)
			if _, err := fs.ReadAt(in, buf, 0); err != nil {
				t.Fatal(err)
			}
			if c, _ := fs.j.Stats(); c != commits {
				t.Errorf("a read committed %d journal transactions", c-commits)
			}
			a := in.Attr().Atime
			if changed := !a.Equal(old); changed != (mode != AtimeNever) {
				t.Errorf("atime after a read: %v (was %v)", a, old)
			}
			if err := fs.Close(); err != nil {
				t.Fatal(err)
			}
			fs, _, err = Open(m, Options{Atime: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer fs.Close()
			in2, err := fs.Lookup(fs.Root(), "f")
			if err != nil {
				t.Fatal(err)
			}
			if got := in2.Attr().Atime; !got.Equal(a) {
				t.Errorf("atime after remount %v, before %v", got, a)
			}
		})
	}
}
