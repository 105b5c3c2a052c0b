package namespace_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/tests/clusterenv"
)

// cutter is a TCP relay between a node and one etcd member that can cut
// the node off (close every connection and refuse new ones) and let it
// back: a network partition on one machine.
type cutter struct {
	l      net.Listener
	target string
	mu     sync.Mutex
	cut    bool
	conns  map[net.Conn]bool
}

func newCutter(t *testing.T, target string) *cutter {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &cutter{l: l, target: target, conns: map[net.Conn]bool{}}
	t.Cleanup(func() { l.Close(); c.setCut(true) })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			c.mu.Lock()
			if c.cut {
				c.mu.Unlock()
				in.Close()
				continue
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				c.mu.Unlock()
				in.Close()
				continue
			}
			c.conns[in], c.conns[out] = true, true
			c.mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
	return c
}

func (c *cutter) endpoint() string { return "http://" + c.l.Addr().String() }

func (c *cutter) setCut(cut bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cut = cut
	if cut {
		for conn := range c.conns {
			conn.Close()
		}
		c.conns = map[net.Conn]bool{}
	}
}

// TestPartitionedNodeRejoins cuts a node off etcd for longer than its
// lease: its records vanish for the others, its commits fail with
// ErrUnavailable, and when it is let back it registers under a new lease,
// writes its holder records again, and a commit under the writer lock it
// lost fails with ErrWriterLost.
func TestPartitionedNodeRejoins(t *testing.T) {
	e := clusterenv.StartEtcd(t, 1)
	cut := newCutter(t, e.Endpoint(0)[len("http://"):])
	a := open(t, []string{cut.endpoint()}, "a")
	b := open(t, e.Endpoints(), "b")
	ctx := context.Background()
	id := namespace.NewFileID()
	w, err := a.AcquireWriter(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	rev, err := a.Commit(ctx, "f", id, 0, rec(1, 1), namespace.NewChunks(0))
	if err != nil {
		t.Fatal(err)
	}
	a.AddHolding(id, 1, 1)
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	lease := a.Lease()
	cut.setCut(true)
	eventually(t, "b sees a leave", func() bool { return nodeIDs(b.Nodes()) == "b" })
	if hs, err := b.HoldersOf(ctx, id, 1); err != nil || len(hs) != 0 {
		t.Fatalf("a's holder records while a is cut off: %v %v", hs, err)
	}
	if _, err := a.Commit(ctx, "f", id, rev, rec(2, 1), namespace.Chunks{}); !errors.Is(err, namespace.ErrUnavailable) {
		t.Fatalf("commit while cut off: %v, want ErrUnavailable", err)
	}
	// b takes the writer lock a lost.
	wb, err := b.AcquireWriter(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	cut.setCut(false)
	eventually(t, "a registered again", func() bool { return a.Lease() != 0 })
	if a.Lease() == lease {
		t.Fatalf("a kept lease %x, which etcd expired", lease)
	}
	eventually(t, "b sees a back", func() bool { return nodeIDs(b.Nodes()) == "a,b" })
	eventually(t, "a's holder record back", func() bool {
		hs, err := b.HoldersOf(ctx, id, 1)
		return err == nil && hs["a"].Equal(namespace.NewChunks(0, 1))
	})
	if _, err := a.Commit(ctx, "f", id, rev, rec(2, 1), namespace.Chunks{}); !errors.Is(err, namespace.ErrWriterLost) {
		t.Fatalf("commit under the lost lock: %v, want ErrWriterLost", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AcquireWriter(ctx, id); !errors.Is(err, namespace.ErrWriterHeld) {
		t.Fatalf("a's AcquireWriter while b holds it: %v (a's stale Release must not free b's lock)", err)
	}
	if _, err := a.Commit(ctx, "f", id, rev, rec(2, 1), namespace.Chunks{}); !errors.Is(err, namespace.ErrWriterHeld) {
		t.Fatalf("a's commit without the lock while b holds it: %v, want ErrWriterHeld", err)
	}
	if err := wb.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWatchResync: a watcher cut off while etcd compacted the history it
// missed gets a Resync and the current records, names included.
func TestWatchResync(t *testing.T) {
	e := clusterenv.StartEtcd(t, 1)
	cut := newCutter(t, e.Endpoint(0)[len("http://"):])
	a := open(t, e.Endpoints(), "a")
	c := cfg([]string{cut.endpoint()}, "b")
	c.LeaseTTL = 10 * time.Second // b stays registered while cut off
	b, err := namespace.Open(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx := context.Background()
	files := make(chan namespace.FileEvent, 64)
	names := make(chan namespace.NameEvent, 64)
	if err := b.WatchFiles(ctx, func(ev namespace.FileEvent) { files <- ev }); err != nil {
		t.Fatal(err)
	}
	if err := b.WatchNames(ctx, func(ev namespace.NameEvent) { names <- ev }); err != nil {
		t.Fatal(err)
	}
	id := namespace.NewFileID()
	rev, err := a.Commit(ctx, "f", id, 0, rec(1, 1), namespace.Chunks{})
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-files; ev.ID != id || ev.Record.Version != 1 {
		t.Fatalf("file event %+v", ev)
	}
	if ev := <-names; ev.Path != "f" || ev.ID != id || ev.Deleted {
		t.Fatalf("name event %+v", ev)
	}
	cut.setCut(true)
	if _, err := a.Commit(ctx, "f", id, rev, rec(2, 1), namespace.Chunks{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Rename(ctx, "f", "g"); err != nil {
		t.Fatal(err)
	}
	raw, err := clientv3.New(clientv3.Config{Endpoints: e.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	st, err := raw.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Compact(ctx, st.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	cut.setCut(false)
	if ev := <-files; !ev.Resync || ev.ID != "" {
		t.Fatalf("first file event after the compaction: %+v, want a bare Resync", ev)
	}
	if ev := <-files; !ev.Resync || ev.ID != id || ev.Record.Version != 2 {
		t.Fatalf("file event after the compaction: %+v, want version 2 of %s", ev, id)
	}
	if ev := <-names; !ev.Resync || ev.Path != "" {
		t.Fatalf("first name event after the compaction: %+v", ev)
	}
	if ev := <-names; !ev.Resync || ev.Path != "g" || ev.ID != id {
		t.Fatalf("name event after the compaction: %+v, want g", ev)
	}
	// And on from there as usual.
	if err := a.Remove(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if ev := <-files; ev.Resync || ev.ID != id || !ev.Deleted {
		t.Fatalf("file event after the resync: %+v", ev)
	}
	if ev := <-names; ev.Resync || ev.Path != "g" || !ev.Deleted {
		t.Fatalf("name event after the resync: %+v", ev)
	}
}
