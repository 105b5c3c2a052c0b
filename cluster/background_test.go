package cluster

import (
	"context"
	"runtime"
	"testing"
)

// TestBackgroundFailuresCounted: work no caller waits for reports its
// failures: a holder record that could not be dropped after a commit is
// counted in the status, and a recheck at the last close that etcd could
// not answer says so.
func TestBackgroundFailuresCounted(t *testing.T) {
	w, n, in := sharedFile(t, "bg", testData(testCS, 23))
	ctx := context.Background()
	w.set(func(w *world) { w.dropFails = true })
	h, err := n.Open(ctx, in, true, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.p.Write(in, 0, []byte("v2"), false); err != nil {
		t.Fatal(err)
	}
	n.Wrote(in, 0, 2)
	n.Release(h) // commits version 2: version 1's holder record goes in the background
	for n.Status().Background.HolderDrops == 0 {
		runtime.Gosched() // the drop runs in its own goroutine
	}
	w.set(func(w *world) { w.etcdDown = true })
	if err := n.recheck(h.f); err == nil {
		t.Fatal("a recheck with etcd away reported nothing")
	}
}
