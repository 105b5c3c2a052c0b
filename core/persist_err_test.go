package core

import (
	"bytes"
	"errors"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/pmemtest"
	"github.com/dnnfs/dnnfs/pmem"
)

var errMedia = errors.New("injected media write-back failure")

// faultyPool formats a pool onto a Recorder (so a test can see what is
// durable) and mounts it through a Faulty wrapper.
func faultyPool(t *testing.T) (*FS, *pmem.Faulty, *pmem.Recorder, *observer.ObservedLogs) {
	t.Helper()
	return faultyPoolOf(t, 32<<20)
}

// faultyPoolOf is faultyPool of size bytes.
func faultyPoolOf(t *testing.T, size int64) (*FS, *pmem.Faulty, *pmem.Recorder, *observer.ObservedLogs) {
	t.Helper()
	m := pmem.NewMemory(size)
	if err := Format(m, 0, 0); err != nil {
		t.Fatal(err)
	}
	rec := pmem.NewRecorder(m.Bytes())
	pmemtest.Check(t, rec)
	f := pmem.NewFaulty(rec)
	core, logs := observer.New(zapcore.ErrorLevel)
	fs, _, err := Open(f, Options{Log: zap.New(core), CommitInterval: -1}) // commits only where the test makes them
	if err != nil {
		t.Fatal(err)
	}
	// Whatever the test injected, the pool must be consistent once the
	// medium heals and the pool closes. Close may fail (data the faults
	// lost and nobody rewrote): that is the test's business, not damage.
	t.Cleanup(func() {
		f.Heal()
		_ = fs.Close()
	})
	return fs, f, rec, logs
}

// fileWith creates name holding data, made durable.
func fileWith(t *testing.T, fs *FS, name string, data []byte) *Inode {
	t.Helper()
	in, err := fs.Create(fs.Root(), name, NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Write(in, 0, data, false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Fsync(in); err != nil {
		t.Fatalf("fsync before any fault: %v", err)
	}
	return in
}

// poolOff is the pool byte offset of file byte off.
func poolOff(t *testing.T, in *Inode, off int64) int64 {
	t.Helper()
	in.mu.Lock()
	defer in.mu.Unlock()
	phys, _, ok := in.lookupLocked(uint64(off) / bs)
	if !ok {
		t.Fatalf("file byte %d is not mapped", off)
	}
	return int64(phys.Off()) + off%bs
}

// A failed flush fails the fsync that covers it with EIO, and every later
// fsync of the file until the range is rewritten, even once the medium
// works again; other files are not affected; the failure is logged with
// the file's path and offset.
func TestFsyncReportsFailedFlushUntilRewritten(t *testing.T) {
	fs, f, _, logs := faultyPool(t)
	a := fileWith(t, fs, "a", bytes.Repeat([]byte{1}, 4*bs))
	b := fileWith(t, fs, "b", bytes.Repeat([]byte{2}, 4*bs))

	// Overwrite block 2 of a (no new blocks: persisted by fsync only).
	if _, err := fs.Write(a, 2*bs+100, []byte("new bytes"), false); err != nil {
		t.Fatal(err)
	}
	f.FailFlushRange(poolOff(t, a, 2*bs), bs, errMedia)
	if _, err := fs.Write(b, 0, []byte("b's bytes"), false); err != nil {
		t.Fatal(err)
	}
	err := fs.Fsync(a)
	if !errors.Is(err, ErrIO) {
		t.Fatalf("fsync after a failed flush: %v, want ErrIO", err)
	}
	if f.FlushFailures() == 0 {
		t.Fatal("the injected fault never fired")
	}
	if err := fs.Fsync(b); err != nil {
		t.Fatalf("fsync of another file: %v", err)
	}
	if err := fs.Fsync(a); !errors.Is(err, ErrIO) {
		t.Fatalf("second fsync: %v, want ErrIO again", err)
	}
	f.Heal()
	if err := fs.Fsync(a); !errors.Is(err, ErrIO) {
		t.Fatalf("fsync once the medium works, bytes not rewritten: %v, want ErrIO", err)
	}
	// Rewriting another block does not clear it.
	if _, err := fs.Write(a, 0, []byte("elsewhere"), false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Fsync(a); !errors.Is(err, ErrIO) {
		t.Fatalf("fsync after rewriting another block: %v, want ErrIO", err)
	}
	if _, err := fs.Write(a, 2*bs, bytes.Repeat([]byte{3}, bs), false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Fsync(a); err != nil {
		t.Fatalf("fsync after the range was rewritten: %v", err)
	}
	if err := fs.Fsync(a); err != nil {
		t.Fatalf("fsync again: %v", err)
	}

	got := logs.FilterField(zap.String("path", "/a")).All()
	if len(got) != 1 {
		t.Fatalf("%d log entries for /a, want 1 (logged once per failure): %v", len(got), logs.All())
	}
	fields := got[0].ContextMap()
	if fields["offset"] != int64(2*bs) || fields["length"] != int64(bs) || fields["ino"] != uint64(a.Ino) {
		t.Fatalf("log fields %v, want offset %d length %d ino %d", fields, 2*bs, bs, a.Ino)
	}
}

// Truncating away the failed range leaves nothing unpersisted.
func TestFsyncLostRangeTruncatedAway(t *testing.T) {
	fs, f, _, _ := faultyPool(t)
	a := fileWith(t, fs, "a", bytes.Repeat([]byte{1}, 4*bs))
	if _, err := fs.Write(a, 3*bs, []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	f.FailFlushRange(poolOff(t, a, 3*bs), bs, errMedia)
	if err := fs.Fsync(a); !errors.Is(err, ErrIO) {
		t.Fatalf("fsync: %v, want ErrIO", err)
	}
	f.Heal()
	if err := fs.Truncate(a, 2*bs); err != nil {
		t.Fatal(err)
	}
	if err := fs.Fsync(a); err != nil {
		t.Fatalf("fsync after truncating the lost range away: %v", err)
	}
}

// The medium reports a write-back failure without saying where (msync of
// the pool file): every file with data unflushed at the time fails its
// next fsync; a file that was clean does not.
func TestFsyncUnattributedWritebackError(t *testing.T) {
	fs, f, _, _ := faultyPool(t)
	a := fileWith(t, fs, "a", bytes.Repeat([]byte{1}, 2*bs))
	b := fileWith(t, fs, "b", bytes.Repeat([]byte{2}, 2*bs))
	c := fileWith(t, fs, "c", bytes.Repeat([]byte{3}, 2*bs))
	for _, in := range []*Inode{a, b} {
		if _, err := fs.Write(in, 10, []byte("dirty"), false); err != nil {
			t.Fatal(err)
		}
	}
	f.InjectWritebackError(errMedia)
	if err := fs.Fsync(a); !errors.Is(err, ErrIO) {
		t.Fatalf("fsync of the file whose flush got the error: %v, want ErrIO", err)
	}
	if err := fs.Fsync(b); !errors.Is(err, ErrIO) {
		t.Fatalf("fsync of another file with unflushed data: %v, want ErrIO", err)
	}
	if err := fs.Fsync(c); err != nil {
		t.Fatalf("fsync of a clean file: %v", err)
	}
	if _, err := fs.Write(b, 0, bytes.Repeat([]byte{4}, bs), false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Fsync(b); err != nil {
		t.Fatalf("fsync after rewriting: %v", err)
	}
}

// A write that allocates blocks is committed later, its data flushed
// first (DESIGN.md §Delayed commit). If that flush fails, fsync fails, no
// other transaction of the file commits the blocks either, and the media
// keep the file as last committed until the bytes are rewritten.
func TestDelayedCommitFailsWhenNewBlocksDoNotPersist(t *testing.T) {
	fs, f, rec, _ := faultyPool(t)
	a := fileWith(t, fs, "a", bytes.Repeat([]byte{1}, bs))
	sb := fs.Superblock()
	crashSize := func() uint64 {
		t.Helper()
		cfs, _, err := openImage(t, rec.Image(rec.Fences()), Options{})
		if err != nil {
			t.Fatalf("crash image: %v", err)
		}
		return cfs.Inode(a.Ino).Attr().Size
	}
	f.FailFlushRange(int64(sb.DataStart.Off()), fs.m.Size(), errMedia)
	if _, err := fs.Write(a, bs, bytes.Repeat([]byte{2}, 3*bs), false); err != nil {
		t.Fatalf("extending write: %v (it is committed later)", err)
	}
	if got := a.Attr().Size; got != 4*bs {
		t.Fatalf("size %d after the write, want %d", got, 4*bs)
	}
	if err := fs.Fsync(a); !errors.Is(err, ErrIO) {
		t.Fatalf("fsync: %v, want ErrIO", err)
	}
	mode := uint32(0o600)
	if err := fs.Setattr(a, SetAttr{Mode: &mode}); !errors.Is(err, ErrIO) {
		t.Fatalf("chmod, which would commit the unpersisted blocks: %v, want ErrIO", err)
	}
	if err := fs.CommitPending(); !errors.Is(err, ErrIO) {
		t.Fatalf("the committer: %v, want ErrIO", err)
	}
	if got := crashSize(); got != bs {
		t.Fatalf("a crash now shows size %d, want %d (as last committed)", got, bs)
	}
	f.Heal()
	if _, err := fs.Write(a, bs, bytes.Repeat([]byte{2}, 3*bs), false); err != nil {
		t.Fatal(err)
	}
	if err := fs.Fsync(a); err != nil {
		t.Fatal(err)
	}
	if got := crashSize(); got != 4*bs {
		t.Fatalf("after rewrite and fsync a crash shows size %d, want %d", got, 4*bs)
	}
}

// A journal commit whose records or commit word fail to persist fails the
// operation and leaves DRAM as it was; a failure after the commit point
// leaves the operation durable (the next commit, or a mount, finishes it).
func TestJournalPersistFailure(t *testing.T) {
	fs, f, rec, _ := faultyPool(t)
	root := fs.Root()
	j := int64(fs.sb.JournalStart.Off())
	inodesBefore := fs.Statfs().FFree

	create := func(name string) error {
		_, err := fs.Create(root, name, NewInode{Mode: format.ModeReg | 0o644})
		return err
	}
	unchanged := func(step, name string) {
		t.Helper()
		if _, err := fs.Lookup(root, name); !errors.Is(err, ErrNotFound) {
			t.Fatalf("%s: lookup of %q after the failed create: %v, want ErrNotFound", step, name, err)
		}
		if got := fs.Statfs().FFree; got != inodesBefore {
			t.Fatalf("%s: %d free inodes, want %d", step, got, inodesBefore)
		}
	}

	// Step 1: the records.
	f.FailFlushRange(j+format.BlockSize, format.BlockSize, errMedia)
	if err := create("x"); !errors.Is(err, ErrIO) {
		t.Fatalf("create with the journal records failing: %v, want ErrIO", err)
	}
	unchanged("records", "x")
	f.Heal()

	// Step 2: the commit word (and taking it back) fail; the journal
	// stays unusable until the word is known durable as 0.
	f.FailFlushRange(j+format.JHCommit, 8, errMedia)
	if err := create("y"); !errors.Is(err, ErrIO) {
		t.Fatalf("create with the commit word failing: %v, want ErrIO", err)
	}
	unchanged("commit word", "y")
	if err := create("y"); !errors.Is(err, ErrIO) {
		t.Fatalf("create while the journal is unsettled: %v, want ErrIO", err)
	}
	unchanged("unsettled", "y")
	f.Heal()
	if err := create("y"); err != nil {
		t.Fatalf("create once the medium works: %v", err)
	}
	inodesBefore--

	// Step 3: applying fails after the commit point. The create is
	// durable through the journal: it succeeds, and a crash now replays it.
	f.FailFlushRange(int64(fs.sb.InodeStart.Off()), int64(fs.sb.InodeCount)*format.InodeSize, errMedia)
	if err := create("z"); err != nil {
		t.Fatalf("create failing after the commit point: %v, want success", err)
	}
	inodesBefore--
	crashed := rec.Image(rec.Fences())
	// The next commit has to finish it first, and fails while it cannot.
	if err := create("w"); !errors.Is(err, ErrIO) {
		t.Fatalf("create while the last transaction cannot be applied: %v, want ErrIO", err)
	}
	unchanged("apply", "w")
	f.Heal()
	if err := create("w"); err != nil {
		t.Fatalf("create once the medium works: %v", err)
	}
	for _, name := range []string{"y", "z", "w"} {
		if _, err := fs.Lookup(root, name); err != nil {
			t.Fatalf("lookup %q: %v", name, err)
		}
	}
	if err := fs.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}

	// The crash image taken while z's apply had failed still has z.
	after, rep, err := openImage(t, crashed, Options{})
	if err != nil {
		t.Fatalf("mount of the crash image: %v", err)
	}
	if rep.ReplayedRecs == 0 {
		t.Fatal("the crash image had no transaction to replay")
	}
	for _, name := range []string{"y", "z"} {
		if _, err := after.Lookup(after.Root(), name); err != nil {
			t.Fatalf("crash image: lookup %q: %v", name, err)
		}
	}
	for _, name := range []string{"x", "w"} {
		if _, err := after.Lookup(after.Root(), name); !errors.Is(err, ErrNotFound) {
			t.Fatalf("crash image: lookup %q: %v, want ErrNotFound", name, err)
		}
	}
}
