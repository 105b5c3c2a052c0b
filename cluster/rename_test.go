package cluster

import (
	"context"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// newLocalWriter creates name in the pool's root, opens it for writing on
// n and writes data (not committed yet).
func newLocalWriter(t *testing.T, n *Node, name string, data []byte) (*core.Inode, *Handle) {
	t.Helper()
	in, err := n.p.Create(n.p.Root(), name, core.NewInode{Mode: format.ModeReg | 0o644})
	if err != nil {
		t.Fatal(err)
	}
	h, err := n.Open(context.Background(), in, true, true)
	if err != nil {
		t.Fatalf("open for writing: %v", err)
	}
	n.p.Opened(in) // as fs: the handle keeps an unlinked inode alive
	if _, err := n.p.Write(in, 0, data, false); err != nil {
		t.Fatal(err)
	}
	n.Wrote(in, 0, int64(len(data)))
	return in, h
}

// closeWriter ends a handle of newLocalWriter, as fs's RELEASE.
func closeWriter(t *testing.T, n *Node, in *core.Inode, h *Handle) {
	t.Helper()
	n.Release(h)
	if err := n.p.Released(in); err != nil {
		t.Fatal(err)
	}
}

// flushHeld starts h's first commit and returns once it waits in S3 (its
// chunks' PUT), with the function that lets it go on and waits for its
// outcome.
func flushHeld(t *testing.T, w *world, n *Node, h *Handle) (finish func() error) {
	t.Helper()
	started, release := w.holdPuts()
	done := make(chan error, 1)
	go func() { done <- n.Flush(context.Background(), h) }()
	<-started
	return func() error {
		release()
		return <-done
	}
}

// TestNameChangeDuringFirstCommit: a file unlinked or renamed on this
// node while its first commit uploads is committed under the name it has
// when the commit reaches the namespace: none after an unlink, the new one
// after a rename (DESIGN §Cluster, "Writing": name changes go through the
// namespace first, so the namespace never keeps a name the pool dropped).
func TestNameChangeDuringFirstCommit(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(n *Node, root *core.Inode) error
		want   string // the name committed, "" for none
	}{
		{"Unlink", func(n *Node, root *core.Inode) error {
			return n.Unlink(context.Background(), root, "g", func() error { return n.p.Unlink(root, "g") })
		}, ""},
		{"Rename", func(n *Node, root *core.Inode) error {
			return n.Rename(context.Background(), root, "g", root, "h", func() error { return n.p.Rename(root, "g", root, "h", 0) })
		}, "h"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld()
			n := testNode(t, w, "a")
			in, h := newLocalWriter(t, n, "g", testData(testCS+10, 3))
			finish := flushHeld(t, w, n, h)
			if err := tc.change(n, n.p.Root()); err != nil {
				t.Fatal(err)
			}
			if err := finish(); err != nil {
				t.Fatalf("commit: %v", err)
			}
			closeWriter(t, n, in, h)
			ctx := context.Background()
			if _, err := n.ns.Lookup(ctx, "g"); err == nil {
				t.Fatalf("the old name g is in the namespace (calls %q)", w.callLog())
			}
			if _, err := n.ns.Lookup(ctx, tc.want); tc.want != "" && err != nil {
				t.Fatalf("the new name %s: %v (calls %q)", tc.want, err, w.callLog())
			}
		})
	}
}
