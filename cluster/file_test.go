package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// notes is a Notifier that records the kernel invalidations asked for.
type notes struct {
	mu      sync.Mutex
	inodes  []uint64
	entries []string
}

func (r *notes) InodeNotify(ino uint64, off, length int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inodes = append(r.inodes, ino)
}

func (r *notes) EntryNotify(parent uint64, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, fmt.Sprintf("%d/%s", parent, name))
}

func (r *notes) sawInode(ino core.Ino) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.inodes, uint64(ino))
}

func (r *notes) sawEntry(dir core.Ino, name string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.entries, fmt.Sprintf("%d/%s", dir, name))
}

// TestCommitOrder: a commit PUTs the changed chunks, then the manifest,
// then makes the one namespace transaction; a later commit PUTs only the
// chunks written since (DESIGN §Cluster, "Writing").
func TestCommitOrder(t *testing.T) {
	w := newWorld()
	n := testNode(t, w, "a")
	ctx := context.Background()
	data := testData(2*testCS+100, 7)
	in, h := newLocalWriter(t, n, "c", data)
	defer closeWriter(t, n, in, h)
	if err := n.Flush(ctx, h); err != nil {
		t.Fatal(err)
	}
	id := string(h.f.id)
	want := []string{"writer " + id, "put " + id + "/1/0", "put " + id + "/1/1", "put " + id + "/1/2", "put manifest " + id + "/1", "commit c v1"}
	if got := w.callLog(); !slices.Equal(got, want) {
		t.Fatalf("first commit: %q, want %q", got, want)
	}
	if _, err := n.p.Write(in, testCS+1, []byte("x"), false); err != nil {
		t.Fatal(err)
	}
	n.Wrote(in, testCS+1, 1)
	if err := n.Fsync(ctx, in); err != nil {
		t.Fatal(err)
	}
	got := w.callLog()
	want = []string{"put " + id + "/2/1", "put manifest " + id + "/2", "commit c v2"}
	if !slices.Equal(got[:3], want) {
		t.Fatalf("second commit: %q, want %q first", got, want)
	}
	if err := n.Flush(ctx, h); err != nil || len(w.callLog()) > 1 {
		t.Fatalf("a flush with nothing changed: %v", err) // at most the async holder drop
	}
}

// TestCommitFailureStaysLocal: a commit that S3 or etcd refuses is
// ErrCluster and names nothing; the changes stay and the next commit that
// works makes them visible.
func TestCommitFailureStaysLocal(t *testing.T) {
	w := newWorld()
	n := testNode(t, w, "a")
	ctx := context.Background()
	in, h := newLocalWriter(t, n, "d", testData(testCS/2, 8))
	defer closeWriter(t, n, in, h)
	for _, down := range []func(w *world, on bool){
		func(w *world, on bool) { w.s3Down = on },
		func(w *world, on bool) { w.etcdDown = on },
	} {
		w.set(func(w *world) { down(w, true) })
		if err := n.Flush(ctx, h); !errors.Is(err, ErrCluster) {
			t.Fatalf("commit with a service down: %v, want ErrCluster", err)
		}
		w.set(func(w *world) { down(w, false) })
		if _, err := n.ns.Lookup(ctx, "d"); err == nil {
			t.Fatal("a failed commit named the file")
		}
	}
	if err := n.Flush(ctx, h); err != nil {
		t.Fatal(err)
	}
	if _, err := n.ns.Lookup(ctx, "d"); err != nil {
		t.Fatalf("after the services came back: %v", err)
	}
}

// TestWriterBusy: an open for writing while another node holds the
// writer lock is ErrWriterBusy at once; a reader opens.
func TestWriterBusy(t *testing.T) {
	w, n, in := sharedFile(t, "e", testData(testCS, 9))
	w.set(func(w *world) { w.writers[n.fileOf(in).id] = "b" })
	ctx := context.Background()
	if _, err := n.Open(ctx, in, true, false); !errors.Is(err, ErrWriterBusy) {
		t.Fatalf("open for writing: %v, want ErrWriterBusy", err)
	}
	h, err := n.Open(ctx, in, false, false)
	if err != nil {
		t.Fatalf("open for reading: %v", err)
	}
	n.Release(h)
	// A chmod of the file would change the record under the writer.
	if err := n.MetaChanged(ctx, in); !errors.Is(err, ErrWriterBusy) {
		t.Fatalf("chmod while b writes: %v, want ErrWriterBusy", err)
	}
}

// TestReadFillsFromPeer: a placeholder has the record's size and no
// chunk; a read fetches the chunks from the node holding them, and this
// node holds them after.
func TestReadFillsFromPeer(t *testing.T) {
	w := newWorld()
	serveObjects(t, w, "b")
	data := testData(3*testCS-1, 10)
	id, _, _ := w.commitAs("b", "dir/r", data)
	n := testNode(t, w, "a")
	ctx := context.Background()
	d := lookup(t, n, "dir")
	if !d.IsDir() {
		t.Fatal("a directory implied by names below it is not a directory")
	}
	in, err := n.Lookup(ctx, d, "r")
	if err != nil {
		t.Fatal(err)
	}
	if in.Attr().Size != uint64(len(data)) {
		t.Fatalf("placeholder size %d, want %d", in.Attr().Size, len(data))
	}
	if got := readAll(t, n, in); !bytes.Equal(got, data) {
		t.Fatal("read other bytes than committed")
	}
	held := n.ns.Held()[namespace.FileVersion{File: id, Ver: 1}]
	if held.String() != "0-2" {
		t.Fatalf("holds %q after the read, want 0-2", held.String())
	}
	if s := n.peer.Stats(); s.Peer.Hits == 0 {
		t.Fatalf("fetch stats %+v: no chunk from the peer", s)
	}
}

// TestFileEventResetsIdleCopy: a commit on another node makes an idle
// local copy the placeholder of the new version and invalidates the
// kernel's attributes; an open copy waits for its last close.
func TestFileEventResetsIdleCopy(t *testing.T) {
	w, n, in := sharedFile(t, "v", testData(2*testCS, 11))
	var nt notes
	n.SetNotifier(&nt)
	readAll(t, n, in)
	ctx := context.Background()
	h, err := n.Open(ctx, in, false, false)
	if err != nil {
		t.Fatal(err)
	}
	id, rec, rev := w.commitAs("b", "v", testData(testCS, 12))
	ev := namespace.FileEvent{ID: id, Record: rec, Rev: rev}
	n.fileEvent(ev)
	h.f.mu.Lock()
	ver, pending := h.f.ver, h.f.pending
	h.f.mu.Unlock()
	if ver != 1 || !pending {
		t.Fatalf("open copy: version %d pending %v, want 1 and pending", ver, pending)
	}
	h.f.mu.Lock()
	h.f.pending = false // the last close's recheck is not what this test waits for
	h.f.mu.Unlock()
	n.Release(h)
	n.fileEvent(ev)
	h.f.mu.Lock()
	ver, present := h.f.ver, h.f.present.Len()
	h.f.mu.Unlock()
	if ver != 2 || present != 0 || in.Attr().Size != testCS {
		t.Fatalf("idle copy after the event: version %d, %d chunks, size %d", ver, present, in.Attr().Size)
	}
	if !nt.sawInode(in.Ino) {
		t.Fatal("the kernel's attributes were not invalidated")
	}
	if got := readAll(t, n, in); !bytes.Equal(got, testData(testCS, 12)) {
		t.Fatal("read after the reset is not version 2")
	}
}

// TestNameEventDropsIdleCopy: a name removed on another node goes here
// too (an idle committed copy), and the kernel forgets the entry.
func TestNameEventDropsIdleCopy(t *testing.T) {
	w, n, _ := sharedFile(t, "x", testData(testCS, 13))
	var nt notes
	n.SetNotifier(&nt)
	other := &fakeNS{w: w, self: "b"}
	if err := other.Remove(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	n.nameEvent(namespace.NameEvent{Path: "x", Deleted: true})
	root := n.p.Root()
	if _, err := n.p.Lookup(root, "x"); !errors.Is(err, core.ErrNotFound) {
		t.Fatalf("local copy after its name went elsewhere: %v", err)
	}
	if !nt.sawEntry(root.Ino, "x") {
		t.Fatal("the kernel's entry was not invalidated")
	}
}

// TestUnlinkRenameCommitted: unlink and rename of a committed file change
// the namespace first; with etcd away they fail with ErrCluster and the
// pool keeps its name.
func TestUnlinkRenameCommitted(t *testing.T) {
	w := newWorld()
	n := testNode(t, w, "a")
	ctx := context.Background()
	in, h := newLocalWriter(t, n, "u", testData(100, 14))
	closeWriter(t, n, in, h) // commits at release
	root := n.p.Root()
	rename := func(from, to string) error {
		return n.Rename(ctx, root, from, root, to, func() error { return n.p.Rename(root, from, root, to, 0) })
	}
	unlink := func(name string) error {
		return n.Unlink(ctx, root, name, func() error { return n.p.Unlink(root, name) })
	}
	w.set(func(w *world) { w.etcdDown = true })
	if err := rename("u", "u2"); !errors.Is(err, ErrCluster) {
		t.Fatalf("rename with etcd away: %v, want ErrCluster", err)
	}
	if err := unlink("u"); !errors.Is(err, ErrCluster) {
		t.Fatalf("unlink with etcd away: %v, want ErrCluster", err)
	}
	if _, err := n.p.Lookup(root, "u"); err != nil {
		t.Fatalf("the pool's name after refused changes: %v", err)
	}
	w.set(func(w *world) { w.etcdDown = false })
	if err := rename("u", "u2"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.ns.Lookup(ctx, "u2"); err != nil {
		t.Fatalf("namespace after the rename: %v", err)
	}
	if err := unlink("u2"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.ns.Lookup(ctx, "u2"); !errors.Is(err, namespace.ErrNotFound) {
		t.Fatalf("namespace after the unlink: %v", err)
	}
}

// TestAttachedReadOnly: an attached object's file refuses every change
// with ErrReadOnly (EROFS at the FUSE boundary) and still reads.
func TestAttachedReadOnly(t *testing.T) {
	data := testData(testCS+3, 18)
	_, n, in := sharedFile(t, "o", data)
	h := n.fileOf(in)
	h.mu.Lock()
	h.src = attachPrefix + "etag:bucket:key"
	h.mu.Unlock()
	ctx := context.Background()
	if _, err := n.Open(ctx, in, true, false); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("open for writing: %v, want ErrReadOnly", err)
	}
	if err := n.Truncate(ctx, in, 0, func() error { t.Fatal("truncated the pool"); return nil }); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("truncate: %v, want ErrReadOnly", err)
	}
	if err := n.MetaChanged(ctx, in); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("chmod: %v, want ErrReadOnly", err)
	}
	if got := readAll(t, n, in); !bytes.Equal(got, data) {
		t.Fatal("read other bytes than the object's")
	}
}

// TestSyncDirAndSymlinks: a listing makes placeholders for the names the
// namespace has below a directory (a directory for a name with names
// below it); a symlink made here is shared, and one whose name another
// node's file has is core.ErrExist.
func TestSyncDirAndSymlinks(t *testing.T) {
	w := newWorld()
	serveObjects(t, w, "b")
	w.commitAs("b", "ck/step-1", testData(10, 19))
	w.commitAs("b", "ck/sub/x", testData(10, 20))
	n := testNode(t, w, "a")
	ctx := context.Background()
	ck := lookup(t, n, "ck")
	n.SyncDir(ctx, ck)
	if in, err := n.p.Lookup(ck, "step-1"); err != nil || in.Attr().Size != 10 {
		t.Fatalf("placeholder step-1: %v", err)
	}
	if in, err := n.p.Lookup(ck, "sub"); err != nil || !in.IsDir() {
		t.Fatalf("directory sub: %v", err)
	}
	link := func(name string) error {
		in, err := n.p.Create(ck, name, core.NewInode{Mode: format.ModeLnk | 0o777, Target: "step-1"})
		if err != nil {
			t.Fatal(err)
		}
		return n.Symlinked(ctx, ck, name, in)
	}
	if err := link("latest"); err != nil {
		t.Fatalf("symlink: %v", err)
	}
	other := &fakeNS{w: w, self: "b"}
	if _, rec, _, err := other.Stat(ctx, "ck/latest"); err != nil || rec.Target != "step-1" {
		t.Fatalf("the shared link: %+v %v", rec, err)
	}
	w.commitAs("b", "ck/taken", testData(10, 21))
	if err := link("taken"); !errors.Is(err, core.ErrExist) {
		t.Fatalf("a link over another node's name: %v, want core.ErrExist", err)
	}
}

// TestWarm: warm-up describes the committed version, skips chunks some
// pool holds (without bringing them here), and refuses a local file with
// ErrNotShared.
func TestWarm(t *testing.T) {
	data := testData(2*testCS+1, 22)
	_, n, in := sharedFile(t, "wm", data)
	ctx := context.Background()
	wi, err := n.WarmInfo(ctx, in)
	if err != nil || wi.Version != 1 || wi.Size != int64(len(data)) || wi.Chunks != 3 || wi.ChunkSize != testCS {
		t.Fatalf("WarmInfo %+v %v", wi, err)
	}
	for i := int64(0); i < wi.Chunks; i++ {
		if err := n.Warm(ctx, in, i); err != nil {
			t.Fatalf("warm chunk %d held by b: %v", i, err)
		}
	}
	f := n.fileOf(in)
	f.mu.Lock()
	present := f.present.Len()
	f.mu.Unlock()
	if present != 0 {
		t.Fatalf("warm-up brought %d chunks here", present)
	}
	if err := n.Warm(ctx, in, 3); !errors.Is(err, ErrNotShared) {
		t.Fatalf("warm a chunk past the end: %v, want ErrNotShared", err)
	}
	local, err := n.p.Create(n.p.Root(), "local", core.NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.WarmInfo(ctx, local); !errors.Is(err, ErrNotShared) {
		t.Fatalf("WarmInfo of a local file: %v, want ErrNotShared", err)
	}
}
