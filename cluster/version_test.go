package cluster

import (
	"context"
	"testing"

	"github.com/dnnfs/dnnfs/core"
)

// TestChmodWhileWriterOpens: a chmod of a committed file that no handle
// here writes, with a writer opening on this node between the chmod's look
// at the writers and its SetMeta, fails no commit of that writer (DESIGN
// §Cluster, "Writing"; §Lock order, lockMu). Else the writer's commit,
// whose base was read before the SetMeta moved the record on, conflicts
// with it and fails with EIO.
func TestChmodWhileWriterOpens(t *testing.T) {
	w, n, in := sharedFile(t, "c", testData(2*testCS, 17))
	ctx := context.Background()
	f := n.fileOf(in)
	started, release := w.holdPuts()
	data := []byte("written")
	opened, done := make(chan struct{}), make(chan error, 1)
	writer := func() {
		h, err := n.Open(ctx, in, true, false)
		if err != nil {
			close(opened)
			done <- err
			return
		}
		close(opened)
		if _, err := n.p.Write(in, 0, data, false); err != nil {
			t.Error(err)
		}
		n.Wrote(in, 0, int64(len(data)))
		err = n.Flush(ctx, h)
		n.Release(h)
		done <- err
	}
	testHookMetaChecked = func() {
		testHookMetaChecked = nil
		// A writer that can open now (nothing orders it after this
		// chmod) opens, and its commit reads its base and uploads
		// before the SetMeta; one that cannot waits for the chmod.
		free := f.lockMu.TryLock()
		if free {
			f.lockMu.Unlock()
		}
		go writer()
		if free {
			<-opened
			<-started
		}
	}
	t.Cleanup(func() { testHookMetaChecked = nil })
	mode := uint32(0o600)
	if err := n.p.Setattr(in, core.SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if err := n.MetaChanged(ctx, in); err != nil {
		t.Fatalf("chmod: %v", err)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the writer's commit: %v (calls %q)", err, w.callLog())
	}
	rec, _, err := n.ns.File(ctx, f.id)
	if err != nil || rec.Version != 2 || rec.Mode&0o777 != mode {
		t.Fatalf("the committed record: version %d, mode %#o (%v), want version 2, mode %#o (calls %q)", rec.Version, rec.Mode&0o777, err, mode, w.callLog())
	}
}
