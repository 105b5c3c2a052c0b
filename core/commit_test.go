package core

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pmemtest"
	"github.com/dnnfs/dnnfs/pmem"
	"golang.org/x/sys/unix"
)

// recPool is a pool on a Recorder, opened with opts.
func recPool(t *testing.T, opts Options) (*FS, *pmem.Recorder) {
	t.Helper()
	rec := pmem.NewRecorder(make([]byte, 8<<20))
	pmemtest.Check(t, rec)
	return openCheckedPool(t, rec, opts), rec
}

// crashView mounts the image a machine crash right now would leave and
// returns inode ino's size and bytes there.
func crashView(t *testing.T, rec *pmem.Recorder, ino Ino) (uint64, []byte) {
	t.Helper()
	cfs, _, err := openImage(t, rec.Image(rec.Fences()), Options{CommitInterval: -1})
	if err != nil {
		t.Fatalf("crash image: %v", err)
	}
	in := cfs.Inode(ino)
	if in == nil {
		t.Fatalf("crash image: inode %d missing", ino)
	}
	return in.Attr().Size, fileBytes(t, cfs, in)
}

// Appends and writes into holes are committed by fsync, by a metadata
// change of the file, or by Close; until then a crash shows the file as
// last committed, and fsck finds the pool consistent.
func TestDelayedCommitPoints(t *testing.T) {
	fs, rec := recPool(t, Options{CommitInterval: -1})
	in, err := fs.Create(fs.Root(), "f", NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("append!"), 1000)
	var want []byte
	for i := 0; i < 10; i++ {
		if _, err := fs.Write(in, 0, data, true); err != nil {
			t.Fatal(err)
		}
		want = append(want, data...)
	}
	if n := fs.PendingFiles(); n != 1 {
		t.Fatalf("%d pending files, want 1", n)
	}
	if size, _ := crashView(t, rec, in.Ino); size != 0 {
		t.Fatalf("before any commit a crash shows size %d, want 0", size)
	}
	if probs := checkProblems(t, pmem.NewRecorder(rec.Image(rec.Fences()))); len(probs) > 0 {
		t.Fatalf("crash image before the commit: %v", probs)
	}
	if err := fs.Fsync(in); err != nil {
		t.Fatal(err)
	}
	if size, got := crashView(t, rec, in.Ino); size != uint64(len(want)) || !bytes.Equal(got, want) {
		t.Fatalf("after fsync a crash shows %d bytes (equal: %v), want %d", size, bytes.Equal(got, want), len(want))
	}
	if n := fs.PendingFiles(); n != 0 {
		t.Fatalf("%d pending files after fsync, want 0", n)
	}

	// A hole filled and the file grown, then a chmod: the chmod's
	// transaction commits them, data first.
	if _, err := fs.Write(in, int64(len(want))+3*bs, data, false); err != nil {
		t.Fatal(err)
	}
	want = append(want, make([]byte, 3*bs)...)
	want = append(want, data...)
	mode := uint32(0o600)
	if err := fs.Setattr(in, SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if size, got := crashView(t, rec, in.Ino); size != uint64(len(want)) || !bytes.Equal(got, want) {
		t.Fatalf("after chmod a crash shows %d bytes (equal: %v), want %d", size, bytes.Equal(got, want), len(want))
	}

	// Close commits what is left.
	if _, err := fs.Write(in, int64(len(want)), data, false); err != nil {
		t.Fatal(err)
	}
	want = append(want, data...)
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	if size, got := crashView(t, rec, in.Ino); size != uint64(len(want)) || !bytes.Equal(got, want) {
		t.Fatalf("after Close the pool shows %d bytes (equal: %v), want %d", size, bytes.Equal(got, want), len(want))
	}
	if probs := checkProblems(t, rec); len(probs) > 0 {
		t.Fatalf("after Close: %v", probs)
	}
}

// The committer commits files written without fsync every interval.
func TestDelayedCommitInterval(t *testing.T) {
	fs, rec := recPool(t, Options{CommitInterval: 10 * time.Millisecond})
	in, err := fs.Create(fs.Root(), "f", NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{7}, 3*bs+5)
	if _, err := fs.Write(in, 0, data, false); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); fs.PendingFiles() > 0; {
		if time.Now().After(deadline) {
			t.Fatal("the committer did not commit the file within 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if size, got := crashView(t, rec, in.Ino); size != uint64(len(data)) || !bytes.Equal(got, data) {
		t.Fatalf("after the committer ran a crash shows %d bytes (equal: %v), want %d", size, bytes.Equal(got, data), len(data))
	}
}

// An unlinked file with writes not committed stays an orphan with its
// size on media; a crash frees it, Close frees it, fsck stays clean.
func TestDelayedCommitOrphan(t *testing.T) {
	fs, rec := recPool(t, Options{CommitInterval: -1})
	in, err := fs.Create(fs.Root(), "f", NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	fs.Opened(in)
	if _, err := fs.Write(in, 0, bytes.Repeat([]byte{1}, 5*bs), false); err != nil {
		t.Fatal(err)
	}
	free := fs.Statfs().Free
	if err := fs.Unlink(fs.Root(), "f"); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(in, 5*bs, bytes.Repeat([]byte{2}, bs), false); err != nil {
		t.Fatal(err)
	}
	if probs := checkProblems(t, pmem.NewRecorder(rec.Image(rec.Fences()))); len(probs) > 0 {
		t.Fatalf("crash image with a pending orphan: %v", probs)
	}
	if err := fs.Released(in); err != nil {
		t.Fatal(err)
	}
	if got := fs.Statfs().Free; got != free+5 {
		t.Fatalf("%d free blocks after the orphan went, want %d", got, free+5)
	}
	if n := fs.PendingFiles(); n != 0 {
		t.Fatalf("%d pending files after the orphan was freed", n)
	}
}

// A write removes file capabilities, as the kernel's file_remove_privs
// does for every writer (xfstests generic/093); other xattrs stay.
func TestWriteRemovesCapabilities(t *testing.T) {
	fs, rec := recPool(t, Options{CommitInterval: -1})
	in, err := fs.Create(fs.Root(), "f", NewInode{Mode: format.ModeReg | 0o755})
	if err != nil {
		t.Fatal(err)
	}
	capv := []byte{1, 0, 0, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if err := fs.Setxattr(in, xattrCapability, capv, 0); err != nil {
		t.Fatal(err)
	}
	if err := fs.Setxattr(in, "trusted.name", []byte("kept"), 0); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(in, 0, []byte("data1\n"), true); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Getxattr(in, xattrCapability); err != ErrNoAttr {
		t.Fatalf("security.capability after a write: %v, want ErrNoAttr", err)
	}
	if v, err := fs.Getxattr(in, "trusted.name"); err != nil || string(v) != "kept" {
		t.Fatalf("trusted.name after a write: %q, %v", v, err)
	}
	// Durable with the write's transaction.
	cfs, _, err := openImage(t, rec.Image(rec.Fences()), Options{CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfs.Getxattr(cfs.Inode(in.Ino), xattrCapability); err != ErrNoAttr {
		t.Fatalf("crash image: security.capability: %v, want ErrNoAttr", err)
	}
}

// Dirty ranges of an emulated pool are flushed in few msyncs: merged
// across small gaps, never across large ones; other media flush them as
// they are.
func TestFlushGroups(t *testing.T) {
	// 100..107 and 107+flushGap merge (a gap of flushGap); the next is
	// one block further than that from its predecessor.
	far := Blk(107 + flushGap + 1 + flushGap + 1)
	r := []format.Extent{{Phys: far, Len: 2}, {Phys: 100, Len: 1}, {Phys: 103, Len: 4}, {Phys: 102, Len: 1}, {Phys: 107 + flushGap, Len: 1}}
	got := flushGroups(r, true)
	want := []format.Extent{{Phys: 100, Len: 7 + flushGap + 1}, {Phys: far, Len: 2}}
	if len(got) != len(want) {
		t.Fatalf("groups %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Phys != want[i].Phys || got[i].Len != want[i].Len {
			t.Fatalf("groups %v, want %v", got, want)
		}
	}
	if got := flushGroups(r, false); len(got) != len(r) {
		t.Fatalf("not emulated: %v, want the ranges as they are", got)
	}
}

// fallocate on a pool kept in a file backs the blocks in that file too:
// the space is what fallocate promises, and a later write into it
// allocates nothing in the file system under the pool. The pool file's
// allocated size grows by the fallocated range.
func TestFallocateBacksPoolFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pool")
	if err := pmem.Create(path, 64<<20, false); err != nil {
		t.Fatal(err)
	}
	m, err := pmem.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	pmemtest.Check(t, m)
	if m.Kind() != pmem.Emulated {
		t.Skipf("pool medium is %v, not emulated", m.Kind())
	}
	if err := Format(m, 0, 0); err != nil {
		t.Fatal(err)
	}
	fs, _, err := Open(m, Options{CommitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	in, err := fs.Create(fs.Root(), "f", NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	allocated := func() int64 {
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512
	}
	before := allocated()
	if err := fs.Fallocate(in, 0, 16<<20, 0); err != nil {
		t.Fatal(err)
	}
	if grew := allocated() - before; grew < 16<<20 {
		t.Fatalf("the pool file grew by %d bytes for a 16 MiB fallocate, want at least 16 MiB", grew)
	}
}
