package namespace_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/tests/clusterenv"
)

// childEnv makes the test binary a node process that registers, holds a
// chunk and a writer lock, says "ready" and waits to be killed (-9).
const childEnv = "DNNFS_NS_TEST_CHILD"

func TestMain(m *testing.M) {
	if eps := os.Getenv(childEnv); eps != "" {
		child(strings.Split(eps, ","))
		return
	}
	os.Exit(m.Run())
}

func child(eps []string) {
	ctx := context.Background()
	ns, err := namespace.Open(ctx, cfg(eps, "killed"))
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	id := namespace.FileID(os.Getenv(childEnv + "_ID"))
	ns.AddHolding(id, 1, 0, 1, 2)
	if err := ns.Flush(ctx); err != nil {
		fmt.Println("flush:", err)
		os.Exit(1)
	}
	if _, err := ns.AcquireWriter(ctx, id); err != nil {
		fmt.Println("writer:", err)
		os.Exit(1)
	}
	fmt.Println("ready")
	select {}
}

// cfg is a node's configuration with short timings: the tests wait for
// leases to expire.
func cfg(eps []string, node string) namespace.Config {
	return namespace.Config{
		Endpoints:   eps,
		Node:        namespace.NodeID(node),
		PeerURL:     "http://127.0.0.1:1/" + node,
		LeaseTTL:    time.Second,
		OpTimeout:   3 * time.Second,
		DialTimeout: 3 * time.Second,
		ChunkSize:   1 << 20,
	}
}

func open(t *testing.T, eps []string, node string) *namespace.NS {
	t.Helper()
	ns, err := namespace.Open(context.Background(), cfg(eps, node))
	if err != nil {
		t.Fatalf("Open %s: %v", node, err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

// eventually waits for cond, failing after a bound that only guards
// against a hang (the conditions follow lease expiry and watches).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still not %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func nodeIDs(nodes []namespace.NodeInfo) string {
	var s []string
	for _, n := range nodes {
		s = append(s, string(n.ID))
	}
	return strings.Join(s, ",")
}

func rec(ver namespace.Version, size int64) namespace.FileRecord {
	return namespace.FileRecord{Version: ver, Size: size, ChunkSize: 1 << 20, Manifest: fmt.Sprintf("m/%d", ver), Mode: 0o644, Mtime: time.Now().UnixNano()}
}

func TestOpenFSIDAndDuplicateNode(t *testing.T) {
	e := clusterenv.StartEtcd(t, 1)
	a := open(t, e.Endpoints(), "a")
	if err := a.FSID().Valid(); err != nil {
		t.Fatal(err)
	}
	if a.ChunkSize() != 1<<20 {
		t.Fatalf("chunk size %d", a.ChunkSize())
	}
	_, err := namespace.Open(context.Background(), cfg(e.Endpoints(), "a"))
	if !errors.Is(err, namespace.ErrDuplicateNode) || !strings.Contains(err.Error(), fmt.Sprint(os.Getpid())) {
		t.Fatalf("second Open as a: %v, want ErrDuplicateNode naming pid %d", err, os.Getpid())
	}
	t.Log(err)
	c := cfg(e.Endpoints(), "b")
	c.ChunkSize = 4 << 20 // the existing record's wins
	b, err := namespace.Open(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.FSID() != a.FSID() || b.ChunkSize() != 1<<20 {
		t.Fatalf("b sees fsid %s chunk %d, a %s", b.FSID(), b.ChunkSize(), a.FSID())
	}
	eventually(t, "a sees a,b", func() bool { return nodeIDs(a.Nodes()) == "a,b" })
	var mu sync.Mutex
	var seen []string
	a.OnNodesChange(func(n []namespace.NodeInfo) {
		mu.Lock()
		seen = append(seen, nodeIDs(n))
		mu.Unlock()
	})
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	// Close revokes the lease: b is gone at once, not after its TTL.
	eventually(t, "a sees b leave", func() bool { return nodeIDs(a.Nodes()) == "a" })
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 || seen[0] != "a,b" || seen[len(seen)-1] != "a" {
		t.Fatalf("OnNodesChange saw %q", seen)
	}
	for _, bad := range []string{"", "A", "a/b", "a b", strings.Repeat("x", 65), ".."} {
		if _, err := namespace.Open(context.Background(), cfg(e.Endpoints(), bad)); !errors.Is(err, namespace.ErrInvalid) {
			t.Errorf("node id %q: %v, want ErrInvalid", bad, err)
		}
	}
}

// TestKilledNodeRecordsVanish kills (-9) a node process holding a node
// record, a holder record and a writer lock: all three vanish when its
// lease expires, and the lock can be taken.
func TestKilledNodeRecordsVanish(t *testing.T) {
	e := clusterenv.StartEtcd(t, 1)
	a := open(t, e.Endpoints(), "a")
	id := namespace.NewFileID()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join(e.Endpoints(), ","), childEnv+"_ID="+string(id))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() { syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); <-exited })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("child: %q", line)
	}
	eventually(t, "a sees the child", func() bool { return nodeIDs(a.Nodes()) == "a,killed" })
	hs, err := a.Holders(context.Background(), id, 1, 2)
	if err != nil || len(hs) != 1 || hs[0].ID != "killed" || hs[0].PID != cmd.Process.Pid {
		t.Fatalf("holders of chunk 2: %v %v", hs, err)
	}
	if hs, _ := a.Holders(context.Background(), id, 1, 3); len(hs) != 0 {
		t.Fatalf("holders of chunk 3 (not held): %v", hs)
	}
	if _, err := a.AcquireWriter(context.Background(), id); !errors.Is(err, namespace.ErrWriterHeld) || !strings.Contains(err.Error(), "node killed") {
		t.Fatalf("AcquireWriter while the child holds it: %v", err)
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	eventually(t, "the killed node gone from Nodes", func() bool { return nodeIDs(a.Nodes()) == "a" })
	all, err := a.HoldersOf(context.Background(), id, 1)
	if err != nil || len(all) != 0 {
		t.Fatalf("holder records after the lease expired: %v %v", all, err)
	}
	w, err := a.AcquireWriter(context.Background(), id)
	if err != nil {
		t.Fatalf("AcquireWriter after the holder died: %v", err)
	}
	if err := w.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestCommitConflict(t *testing.T) {
	e := clusterenv.StartEtcd(t, 1)
	a := open(t, e.Endpoints(), "a")
	b := open(t, e.Endpoints(), "b")
	ctx := context.Background()
	id := namespace.NewFileID()
	rev, err := a.Commit(ctx, "ckpt/step1.pt", id, 0, rec(1, 3<<20), namespace.ChunkRange(0, 3))
	if err != nil {
		t.Fatal(err)
	}
	got := mustLookup(t, b, "ckpt/step1.pt")
	if got != id {
		t.Fatalf("b looks up %s, a committed %s", got, id)
	}
	r, brev, err := b.File(ctx, got)
	if err != nil || brev != rev || r.Version != 1 || r.Size != 3<<20 {
		t.Fatalf("b reads %+v rev %d (%v), a committed rev %d", r, brev, err, rev)
	}
	if sid, sr, srev, err := b.Stat(ctx, "ckpt/step1.pt"); err != nil || sid != id || sr != r || srev != rev {
		t.Fatalf("Stat: %s %+v %d %v", sid, sr, srev, err)
	}
	if _, _, _, err := b.Stat(ctx, "ckpt"); !errors.Is(err, namespace.ErrIsDir) {
		t.Fatalf("Stat of a directory: %v", err)
	}
	hs, err := b.Holders(ctx, id, 1, 2)
	if err != nil || len(hs) != 1 || hs[0].ID != "a" {
		t.Fatalf("holders after commit: %v %v", hs, err)
	}
	// Both read version 1 at rev; a commits first, b's commit must fail
	// and leave a's record.
	if _, err := a.Commit(ctx, "ckpt/step1.pt", id, rev, rec(2, 4<<20), namespace.NewChunks(0)); err != nil {
		t.Fatal(err)
	}
	_, err = b.Commit(ctx, "ckpt/step1.pt", id, rev, rec(2, 5<<20), namespace.NewChunks(0))
	if !errors.Is(err, namespace.ErrConflict) {
		t.Fatalf("b's racing commit: %v, want ErrConflict", err)
	}
	t.Log(err)
	if r, _, _ := b.File(ctx, id); r.Version != 2 || r.Size != 4<<20 {
		t.Fatalf("after the conflict: %+v, want a's version 2", r)
	}
	if hs, _ := b.HoldersOf(ctx, id, 2); len(hs) != 1 || !hs["a"].Has(0) {
		t.Fatalf("holders of version 2: %v (b's failed commit must add none)", hs)
	}
	// Two new files at one path: the second is refused.
	_, err = b.Commit(ctx, "ckpt/step1.pt", namespace.NewFileID(), 0, rec(1, 1), namespace.Chunks{})
	if !errors.Is(err, namespace.ErrExists) {
		t.Fatalf("a new file at a taken path: %v, want ErrExists", err)
	}
	// A path under a file, a file over a directory.
	if _, err := b.Commit(ctx, "ckpt/step1.pt/x", namespace.NewFileID(), 0, rec(1, 1), namespace.Chunks{}); !errors.Is(err, namespace.ErrNotDir) {
		t.Fatalf("a file under a file: %v, want ErrNotDir", err)
	}
	if _, err := b.Commit(ctx, "ckpt", namespace.NewFileID(), 0, rec(1, 1), namespace.Chunks{}); !errors.Is(err, namespace.ErrIsDir) {
		t.Fatalf("a file over a directory: %v, want ErrIsDir", err)
	}
	// A commit of a removed file fails.
	if err := a.Remove(ctx, "ckpt/step1.pt"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, "ckpt/step1.pt", id, rev, rec(2, 1), namespace.Chunks{}); !errors.Is(err, namespace.ErrConflict) {
		t.Fatalf("commit after remove: %v, want ErrConflict", err)
	}
}

func mustLookup(t *testing.T, ns *namespace.NS, path string) namespace.FileID {
	t.Helper()
	id, err := ns.Lookup(context.Background(), path)
	if err != nil {
		t.Fatalf("Lookup %s: %v", path, err)
	}
	return id
}

func TestNames(t *testing.T) {
	e := clusterenv.StartEtcd(t, 1)
	a := open(t, e.Endpoints(), "a")
	ctx := context.Background()
	ids := map[string]namespace.FileID{}
	for _, p := range []string{"top", "d/x", "d/y", "d/sub/z", "d/sub/deeper/w", "d0", "d.x", "e/f"} {
		ids[p] = namespace.NewFileID()
		if _, err := a.Commit(ctx, p, ids[p], 0, rec(1, 1), namespace.Chunks{}); err != nil {
			t.Fatalf("commit %s: %v", p, err)
		}
	}
	list := func(dir string) string {
		t.Helper()
		es, err := a.List(ctx, dir)
		if err != nil {
			t.Fatalf("List %q: %v", dir, err)
		}
		var s []string
		for _, e := range es {
			if e.Dir {
				s = append(s, e.Name+"/")
			} else {
				if want, ok := ids[strings.TrimPrefix(dir+"/"+e.Name, "/")]; ok && e.ID != want {
					t.Errorf("List %q: %s has id %s", dir, e.Name, e.ID)
				}
				s = append(s, e.Name)
			}
		}
		return strings.Join(s, " ")
	}
	if got := list(""); got != "d/ d.x d0 e/ top" {
		t.Fatalf("root: %q", got)
	}
	if got := list("d"); got != "sub/ x y" {
		t.Fatalf("d: %q", got)
	}
	if _, err := a.List(ctx, "nope"); !errors.Is(err, namespace.ErrNotFound) {
		t.Fatalf("List of a missing directory: %v", err)
	}
	if _, err := a.List(ctx, "top"); !errors.Is(err, namespace.ErrNotDir) {
		t.Fatalf("List of a file: %v", err)
	}
	if err := a.Rename(ctx, "d", "d"); err != nil {
		t.Fatalf("rename of a directory onto itself: %v", err)
	}
	if _, err := a.Lookup(ctx, "d/sub"); !errors.Is(err, namespace.ErrIsDir) {
		t.Fatalf("Lookup of a directory: %v", err)
	}
	if _, err := a.Lookup(ctx, "d/nope"); !errors.Is(err, namespace.ErrNotFound) {
		t.Fatalf("Lookup of a missing file: %v", err)
	}
	for _, bad := range []string{"/abs", "a//b", "a/./b", "a/..", "trailing/"} {
		if _, err := a.Lookup(ctx, bad); !errors.Is(err, namespace.ErrInvalid) {
			t.Errorf("Lookup %q: %v, want ErrInvalid", bad, err)
		}
	}
	// Rename keeps the id; onto an existing file replaces it and drops
	// its record.
	if err := a.Rename(ctx, "d/x", "e/moved"); err != nil {
		t.Fatal(err)
	}
	if id := mustLookup(t, a, "e/moved"); id != ids["d/x"] {
		t.Fatalf("renamed file has id %s, want %s", id, ids["d/x"])
	}
	if err := a.Rename(ctx, "e/moved", "d/y"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.File(ctx, ids["d/y"]); !errors.Is(err, namespace.ErrNotFound) {
		t.Fatalf("replaced file's record: %v, want ErrNotFound", err)
	}
	if err := a.Rename(ctx, "d/sub", "q"); err != nil {
		t.Fatalf("rename of a directory: %v", err)
	}
	if got := list("q"); got != "deeper/ z" {
		t.Fatalf("q: %q", got)
	}
	if err := a.Rename(ctx, "q", "d/sub"); err != nil {
		t.Fatalf("rename of a directory back: %v", err)
	}
	if err := a.Rename(ctx, "top", "d"); !errors.Is(err, namespace.ErrIsDir) {
		t.Fatalf("rename onto a directory: %v", err)
	}
	if err := a.Rename(ctx, "top", "d0/x"); !errors.Is(err, namespace.ErrNotDir) {
		t.Fatalf("rename under a file: %v", err)
	}
	if err := a.Rename(ctx, "gone", "x"); !errors.Is(err, namespace.ErrNotFound) {
		t.Fatalf("rename of a missing file: %v", err)
	}
	if err := a.Remove(ctx, "d/y"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.File(ctx, ids["d/x"]); !errors.Is(err, namespace.ErrNotFound) {
		t.Fatalf("removed file's record: %v", err)
	}
	if got := list("d"); got != "sub/" {
		t.Fatalf("d after: %q", got)
	}
	// A directory wider than one List page, with a subtree between.
	for i := 0; i < 600; i++ {
		p := fmt.Sprintf("wide/f%04d", i)
		if i == 300 {
			p = "wide/f0300/inner"
		}
		ids[p] = namespace.NewFileID()
		if _, err := a.Commit(ctx, p, ids[p], 0, rec(1, 1), namespace.Chunks{}); err != nil {
			t.Fatal(err)
		}
	}
	es, err := a.List(ctx, "wide")
	if err != nil || len(es) != 600 || !es[300].Dir || es[300].Name != "f0300" || es[599].Name != "f0599" {
		t.Fatalf("wide: %d entries (%v)", len(es), err)
	}
	if err := a.Rename(ctx, "wide", "wider"); !errors.Is(err, namespace.ErrTooLarge) {
		t.Fatalf("rename of 600 files: %v, want ErrTooLarge", err)
	}
	// A directory of 64 files (128 operations, etcd's default limit)
	// moves in one transaction, with its subdirectories.
	for i := 0; i < 64; i++ {
		p := fmt.Sprintf("ckpt.tmp/shard%02d", i)
		if i%2 == 1 {
			p = fmt.Sprintf("ckpt.tmp/opt/shard%02d", i)
		}
		ids[p] = namespace.NewFileID()
		if _, err := a.Commit(ctx, p, ids[p], 0, rec(1, 1), namespace.Chunks{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Rename(ctx, "ckpt.tmp", "top"); !errors.Is(err, namespace.ErrNotDir) {
		t.Fatalf("rename of a directory onto a file: %v, want ErrNotDir", err)
	}
	if err := a.Rename(ctx, "ckpt.tmp", "e"); !errors.Is(err, namespace.ErrNotEmpty) {
		t.Fatalf("rename of a directory onto a directory: %v, want ErrNotEmpty", err)
	}
	if err := a.Rename(ctx, "ckpt.tmp", "top/x"); !errors.Is(err, namespace.ErrNotDir) {
		t.Fatalf("rename of a directory under a file: %v, want ErrNotDir", err)
	}
	if err := a.Rename(ctx, "ckpt.tmp", "runs/ckpt"); err != nil {
		t.Fatalf("rename of a 64-file directory: %v", err)
	}
	if _, err := a.List(ctx, "ckpt.tmp"); !errors.Is(err, namespace.ErrNotFound) {
		t.Fatalf("the old directory after the rename: %v", err)
	}
	for i := 0; i < 64; i++ {
		old, now := fmt.Sprintf("ckpt.tmp/shard%02d", i), fmt.Sprintf("runs/ckpt/shard%02d", i)
		if i%2 == 1 {
			old, now = fmt.Sprintf("ckpt.tmp/opt/shard%02d", i), fmt.Sprintf("runs/ckpt/opt/shard%02d", i)
		}
		if id := mustLookup(t, a, now); id != ids[old] {
			t.Fatalf("%s has id %s, %s had %s", now, id, old, ids[old])
		}
	}
}

func TestWatchAndWriterLock(t *testing.T) {
	e := clusterenv.StartEtcd(t, 1)
	a := open(t, e.Endpoints(), "a")
	b := open(t, e.Endpoints(), "b")
	ctx := context.Background()
	events := make(chan namespace.FileEvent, 16)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := b.WatchFiles(wctx, func(ev namespace.FileEvent) { events <- ev }); err != nil {
		t.Fatal(err)
	}
	id := namespace.NewFileID()
	w, err := a.AcquireWriter(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AcquireWriter(ctx, id); !errors.Is(err, namespace.ErrWriterHeld) {
		t.Fatalf("b's AcquireWriter while a writes: %v", err)
	}
	if _, err := a.AcquireWriter(ctx, id); !errors.Is(err, namespace.ErrWriterHeld) {
		t.Fatalf("a's second AcquireWriter: %v", err)
	}
	rev, err := a.Commit(ctx, "w", id, 0, rec(1, 10), namespace.Chunks{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, "w", id, rev, rec(2, 20), namespace.Chunks{}); err != nil {
		t.Fatal(err)
	}
	for want := namespace.Version(1); want <= 2; want++ {
		ev := <-events
		if ev.ID != id || ev.Deleted || ev.Record.Version != want {
			t.Fatalf("event %+v, want version %d of %s", ev, want, id)
		}
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wb, err := b.AcquireWriter(ctx, id)
	if err != nil {
		t.Fatalf("b's AcquireWriter after a released: %v", err)
	}
	_ = wb
	// The lock ends with its holder's lease: b closes without releasing.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AcquireWriter(ctx, id); err != nil {
		t.Fatalf("a's AcquireWriter after b's lease ended: %v", err)
	}
	if err := a.Remove(ctx, "w"); err != nil {
		t.Fatal(err)
	}
}

func TestDropSuperseded(t *testing.T) {
	e := clusterenv.StartEtcd(t, 1)
	a := open(t, e.Endpoints(), "a")
	b := open(t, e.Endpoints(), "b")
	ctx := context.Background()
	id, gone := namespace.NewFileID(), namespace.NewFileID()
	rev, err := a.Commit(ctx, "f", id, 0, rec(1, 1), namespace.NewChunks(0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, "g", gone, 0, rec(1, 1), namespace.NewChunks(0)); err != nil {
		t.Fatal(err)
	}
	b.AddHolding(id, 1, 0)
	b.AddHolding(gone, 1, 0)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Commit(ctx, "f", id, rev, rec(2, 1), namespace.NewChunks(0)); err != nil {
		t.Fatal(err)
	}
	if err := a.Remove(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	b.AddHolding(id, 2, 0)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	stale, err := b.DropSuperseded(ctx)
	if err != nil || len(stale) != 2 {
		t.Fatalf("DropSuperseded: %v %v, want both version-1 holdings", stale, err)
	}
	for _, fv := range stale {
		if fv.Ver != 1 {
			t.Fatalf("dropped %v", fv)
		}
	}
	if hs, _ := a.HoldersOf(ctx, id, 1); len(hs) != 1 || hs["a"].Len() != 1 {
		t.Fatalf("holders of the old version: %v (only a's, which a did not drop)", hs)
	}
	if hs, _ := a.HoldersOf(ctx, id, 2); len(hs) != 2 {
		t.Fatalf("holders of the current version: %v, want a and b", hs)
	}
	// Chunks leaving the pool: the record shrinks, and goes with the last.
	b.AddHolding(id, 2, 1, 2)
	b.RemoveHolding(id, 2, 0, 2)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if hs, _ := a.HoldersOf(ctx, id, 2); hs["b"].String() != "1" {
		t.Fatalf("b's record after removing chunks 0 and 2: %v", hs)
	}
	b.RemoveHolding(id, 2, 1)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if hs, _ := a.HoldersOf(ctx, id, 2); len(hs) != 1 || len(b.Held()) != 0 {
		t.Fatalf("after b's last chunk left: records %v, b holds %v", hs, b.Held())
	}
}

// TestMemberLoss runs three etcd members, kills the one listed first in
// every client's endpoints, and checks that commits, lookups, locks and
// watches go on.
func TestMemberLoss(t *testing.T) {
	e := clusterenv.StartEtcd(t, 3)
	a := open(t, e.Endpoints(), "a")
	b := open(t, e.Endpoints(), "b")
	ctx := context.Background()
	events := make(chan namespace.FileEvent, 16)
	if err := b.WatchFiles(ctx, func(ev namespace.FileEvent) { events <- ev }); err != nil {
		t.Fatal(err)
	}
	id := namespace.NewFileID()
	rev, err := a.Commit(ctx, "f", id, 0, rec(1, 1), namespace.NewChunks(0))
	if err != nil {
		t.Fatal(err)
	}
	<-events
	for i := 0; i < 2; i++ {
		e.Kill(i)
		// Every member alive once; two of three killed only after the
		// first came back, so the quorum stays.
		c, cancel := context.WithTimeout(ctx, 20*time.Second)
		rev, err = a.Commit(c, "f", id, rev, rec(namespace.Version(2+i), 1), namespace.NewChunks(0))
		cancel()
		if err != nil {
			t.Fatalf("commit with member %d down: %v", i, err)
		}
		if ev := <-events; ev.Record.Version != namespace.Version(2+i) {
			t.Fatalf("b's watch with member %d down: %+v", i, ev)
		}
		if got, err := b.Lookup(ctx, "f"); err != nil || got != id {
			t.Fatalf("lookup with member %d down: %v", i, err)
		}
		w, err := b.AcquireWriter(ctx, id)
		if err != nil {
			t.Fatalf("writer lock with member %d down: %v", i, err)
		}
		if err := w.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if nodeIDs(a.Nodes()) != "a,b" || a.Lease() == 0 {
			t.Fatalf("a with member %d down: nodes %s lease %x", i, nodeIDs(a.Nodes()), a.Lease())
		}
		e.Restart(i)
	}
}

// TestAllMembersDown: with no etcd member up every call returns
// ErrUnavailable by its deadline, Open names the endpoint it could not
// reach, and once the members are back the node registers again.
func TestAllMembersDown(t *testing.T) {
	e := clusterenv.StartEtcd(t, 3)
	ctx := context.Background()
	ca := cfg(e.Endpoints(), "a")
	ca.OpTimeout = time.Second
	a, err := namespace.Open(ctx, ca)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	id := namespace.NewFileID()
	if _, err := a.Commit(ctx, "f", id, 0, rec(1, 1), namespace.NewChunks(0)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		e.Kill(i)
	}
	c, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := a.Lookup(c, "f"); !errors.Is(err, namespace.ErrUnavailable) {
		t.Fatalf("Lookup: %v", err)
	}
	// No deadline of the caller's: OpTimeout bounds it.
	_, err = a.Commit(ctx, "f", id, 1, rec(2, 1), namespace.Chunks{})
	if !errors.Is(err, namespace.ErrUnavailable) || !strings.Contains(err.Error(), e.Endpoint(0)) {
		t.Fatalf("Commit: %v, want ErrUnavailable naming the endpoints", err)
	}
	t.Log(err)
	if _, err := a.AcquireWriter(c, id); !errors.Is(err, namespace.ErrUnavailable) {
		t.Fatalf("AcquireWriter: %v", err)
	}
	cb := cfg(e.Endpoints()[:1], "b")
	cb.DialTimeout = time.Second
	_, err = namespace.Open(ctx, cb)
	if !errors.Is(err, namespace.ErrUnavailable) || !strings.Contains(err.Error(), e.Endpoint(0)) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("Open: %v, want ErrUnavailable naming the refused endpoint", err)
	}
	t.Log(err)
	// The lease outlives no TTL without etcd: a registers again when the
	// members come back, and its holder record is written again.
	eventually(t, "a's lease lost", func() bool { return a.Lease() == 0 })
	old := a.Held()
	for i := 0; i < 3; i++ {
		e.StartMember(i)
	}
	for i := 0; i < 3; i++ {
		e.WaitHealthy(i)
	}
	eventually(t, "a registered again", func() bool { return a.Lease() != 0 })
	b := open(t, e.Endpoints(), "b")
	eventually(t, "b sees a", func() bool { return nodeIDs(b.Nodes()) == "a,b" })
	eventually(t, "a's holder record back", func() bool {
		hs, err := b.HoldersOf(ctx, id, 1)
		return err == nil && len(hs) == 1 && hs["a"].Equal(old[namespace.FileVersion{File: id, Ver: 1}])
	})
}

// TestSymlinkRecords: a symlink's record carries its target and no chunks;
// records mixing the two kinds are refused before any transaction.
func TestSymlinkRecords(t *testing.T) {
	e := clusterenv.StartEtcd(t, 1)
	a := open(t, e.Endpoints(), "a")
	b := open(t, e.Endpoints(), "b")
	ctx := context.Background()
	link := namespace.FileRecord{Version: 1, Size: 8, Mode: namespace.ModeSymlink | 0o777, Target: "step-100"}
	id := namespace.NewFileID()
	if _, err := a.Commit(ctx, "runs/latest", id, 0, link, namespace.Chunks{}); err != nil {
		t.Fatal(err)
	}
	sid, got, _, err := b.Stat(ctx, "runs/latest")
	if err != nil || sid != id || !got.IsSymlink() || got.Target != "step-100" || got.Chunks() != 0 {
		t.Fatalf("Stat of the link: %s %+v %v", sid, got, err)
	}
	for name, bad := range map[string]namespace.FileRecord{
		"no target":           {Version: 1, Mode: namespace.ModeSymlink | 0o777},
		"size not target's":   {Version: 1, Size: 3, Mode: namespace.ModeSymlink | 0o777, Target: "step-100"},
		"symlink with chunks": {Version: 1, Size: 8, ChunkSize: 1 << 20, Mode: namespace.ModeSymlink | 0o777, Target: "step-100"},
		"file with a target":  {Version: 1, Size: 8, ChunkSize: 1 << 20, Mode: 0o644, Target: "step-100"},
		"a device":            {Version: 1, Size: 0, ChunkSize: 1 << 20, Mode: 0o020644},
	} {
		if _, err := a.Commit(ctx, "runs/"+strings.ReplaceAll(name, " ", "-"), namespace.NewFileID(), 0, bad, namespace.Chunks{}); !errors.Is(err, namespace.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
