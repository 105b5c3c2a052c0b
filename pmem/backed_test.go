package pmem

import (
	"path/filepath"
	"testing"
)

// TestBacked: an emulated pool reports the ranges its file holds storage
// for, and none that Punch gave back.
func TestBacked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool")
	if err := Create(path, 16<<20, false); err != nil {
		t.Fatal(err)
	}
	m, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Kind() != Emulated {
		t.Skipf("medium is %v, not emulated", m.Kind())
	}
	backed := func() (got [][2]int64) {
		t.Helper()
		err := m.(*fileMedium).Backed(2<<20, 10<<20, func(off, n int64) { got = append(got, [2]int64{off, n}) })
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := backed(); len(got) != 0 {
		t.Fatalf("a new sparse pool: backed %v, want none", got)
	}
	buf := make([]byte, 2<<20) // 2 MiB pieces: a tmpfs may back a file in huge pages
	buf[0] = 1
	for _, off := range []int64{0, 4 << 20, 6 << 20, 14 << 20} {
		if err := m.WriteAt(buf, off); err != nil {
			t.Fatal(err)
		}
	}
	// [0, 2M) and [14M, 16M) lie outside the range asked about.
	if got := backed(); len(got) != 1 || got[0] != [2]int64{4 << 20, 4 << 20} {
		t.Fatalf("backed %v, want [4 MiB, 8 MiB) only", got)
	}
	if err := m.Punch(4<<20, 2<<20); err != nil {
		t.Fatal(err)
	}
	if got := backed(); len(got) != 1 || got[0] != [2]int64{6 << 20, 2 << 20} {
		t.Fatalf("after punching [4 MiB, 6 MiB): backed %v, want [6 MiB, 8 MiB)", got)
	}
}
