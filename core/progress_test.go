package core

import (
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pmemtest"
)

// TestFormatProgress: FormatProgress reports the metadata it clears, in
// steps of at most its chunk, from 0 to all of it, and makes a pool that
// mounts.
func TestFormatProgress(t *testing.T) {
	m := pmemtest.NewMemory(t, 64<<20) // 1 MiB of journal, 256 KiB of inodes: 13 chunks
	const chunk = 100 << 10
	var dones []int64
	var total int64
	err := formatChunks(m, 0, 0, func(step string, done, tot int64) {
		dones = append(dones, done)
		total = tot
	}, chunk)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := format.Geometry(m.Size())
	if err != nil {
		t.Fatal(err)
	}
	want := int64(sb.DataStart.Off() - sb.JournalStart.Off())
	if total != want || len(dones) != int((want+chunk-1)/chunk)+1 || dones[0] != 0 || dones[len(dones)-1] != want {
		t.Fatalf("progress %v of %d, want 0 .. %d", dones, total, want)
	}
	for i := 1; i < len(dones); i++ {
		if d := dones[i] - dones[i-1]; d <= 0 || d > chunk {
			t.Errorf("progress step %d: %d bytes, want 1..%d", i, d, chunk)
		}
	}
	fs, _, err := Open(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestPathsOf: one walk names every inode asked for (the first name of a
// hard-linked one), and none for an unlinked one.
func TestPathsOf(t *testing.T) {
	fs, _ := openTestPoolWith(t, 16<<20, Options{})
	defer fs.Close()
	reg, dir := NewInode{Mode: format.ModeReg | 0o644}, NewInode{Mode: format.ModeDir | 0o755}
	must := func(in *Inode, err error) *Inode {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	a := must(fs.Create(fs.Root(), "a", dir))
	b := must(fs.Create(a, "b", dir))
	f := must(fs.Create(b, "f", reg))
	g := must(fs.Create(fs.Root(), "g", reg))
	gone := must(fs.Create(a, "gone", reg))
	if err := fs.Unlink(a, "gone"); err != nil {
		t.Fatal(err)
	}
	got := fs.PathsOf(map[Ino]bool{f.Ino: true, g.Ino: true, b.Ino: true, fs.Root().Ino: true, gone.Ino: true})
	want := map[Ino]string{f.Ino: "/a/b/f", g.Ino: "/g", b.Ino: "/a/b", fs.Root().Ino: "/"}
	if len(got) != len(want) {
		t.Errorf("PathsOf = %v, want %v", got, want)
	}
	for ino, p := range want {
		if got[ino] != p {
			t.Errorf("PathsOf[%d] = %q, want %q", ino, got[ino], p)
		}
	}
}
