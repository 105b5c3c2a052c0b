// Package cluster_test runs real dnnfs daemons as one cluster (DESIGN
// §Cluster): a real 3-member etcd cluster and a real versitygw
// S3 server (tests/clusterenv), and three or four dnnfs daemons with their
// own pools, their chunk servers on 127.0.0.1, .2, .3 (and .4).
//
// Run with:
//
//	go build -race -o bin/dnnfs-race ./cmd/dnnfs && mkdir -p /dev/shm/dnnfs-test-cluster &&
//	DNNFS_BIN=$PWD/bin/dnnfs-race TMPDIR=/dev/shm/dnnfs-test-cluster go test -race -count=1 ./tests/cluster/
package cluster_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/cluster"
	"github.com/dnnfs/dnnfs/cluster/namespace"
	dfs "github.com/dnnfs/dnnfs/fs"
	"github.com/dnnfs/dnnfs/internal/metrics"
	"github.com/dnnfs/dnnfs/tests/clusterenv"
	"github.com/dnnfs/dnnfs/tests/harness"
)

func TestMain(m *testing.M) {
	// The race runtime's 1 s sleep at exit would be paid by every command.
	if _, ok := os.LookupEnv("GORACE"); !ok {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	code := m.Run()
	harness.RemoveBuiltBinary()
	os.Exit(code)
}

const chunk = 16 << 20

// env is one cluster: etcd, S3, a token and the daemons.
type env struct {
	etcd   *clusterenv.Etcd
	s3     *clusterenv.S3
	token  string
	prefix string
	nodes  map[string]*harness.FS
	args   map[string][]string
	top    *testing.T // the test the daemons belong to
	pool   string     // mkfs size of the nodes' pools (700MiB unless set)
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{etcd: clusterenv.StartEtcd(t, 3), s3: clusterenv.StartS3(t), prefix: "/dnnfs-test",
		nodes: map[string]*harness.FS{}, args: map[string][]string{}, top: t}
	t.Setenv("AWS_ACCESS_KEY_ID", e.s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", e.s3.SecretKey)
	t.Setenv("AWS_REGION", e.s3.Region)
	e.token = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(e.token, []byte("s3cr3t-cluster-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// freeAddr returns a free TCP address on ip.
func freeAddr(t *testing.T, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", ip, err)
	}
	defer l.Close()
	return l.Addr().String()
}

// clusterArgs are the mount flags of node id with its chunk server on ip.
func (e *env) clusterArgs(t *testing.T, id, ip string) []string {
	return []string{"--etcd", strings.Join(e.etcd.Endpoints(), ","), "--etcd-prefix", e.prefix,
		"--s3-endpoint", e.s3.Endpoint, "--s3-bucket", e.s3.Bucket, "--node-id", id,
		"--peer-listen", freeAddr(t, ip), "--cluster-token-file", e.token, "--peer-insecure", "--chunk-size", "16MiB"}
}

// mount starts node id on a fresh pool, with extra mount flags.
func (e *env) mount(t *testing.T, id, ip string, extra ...string) *harness.FS {
	t.Helper()
	size := e.pool
	if size == "" {
		size = "700MiB"
	}
	pool := harness.Mkfs(t, size)
	args := append(e.clusterArgs(t, id, ip), extra...)
	e.args[id] = args
	f := harness.Mount(t, pool, args...)
	e.nodes[id] = f
	return f
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("create %s: %v", path, err)
	}
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := f.Write(data[off:min(off+1<<20, len(data))]); err != nil {
			t.Fatalf("write %s: %v", path, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close %s (the commit): %v", path, err)
	}
}

func checkFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes, sha256 %x; want %d bytes, sha256 %x", path, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
}

// status reads a node's `dnnfs status --json` cluster section.
func status(t *testing.T, f *harness.FS) *cluster.Status {
	t.Helper()
	out, stderr, code := harness.Run(t, "status", "--json", f.Mnt)
	if code != 0 {
		t.Fatalf("dnnfs status --json %s: exit %d: %s", f.Mnt, code, stderr)
	}
	var st dfs.StatusJSON
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status JSON: %v\n%s", err, out)
	}
	if st.Cluster == nil {
		t.Fatalf("status --json of %s has no cluster section:\n%s", f.Mnt, out)
	}
	return st.Cluster
}

// waitFor polls cond (a state another node or etcd reaches in its own
// time: a lease expiring, a watch delivered) until it holds or 30 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestCluster runs the cluster's behaviours on one set of engines and
// daemons (starting them is most of the time), the destructive ones last.
func TestCluster(t *testing.T) {
	e := newEnv(t)
	a := e.mount(t, "a", "127.0.0.1")
	b := e.mount(t, "b", "127.0.0.2")
	// Node c is mounted through -o options, as mount(8) hands them over.
	pool := harness.Mkfs(t, "700MiB")
	cargs := e.clusterArgs(t, "c", "127.0.0.3")
	var opts []string
	for i := 0; i < len(cargs); i += 2 {
		if cargs[i] == "--peer-insecure" {
			opts = append(opts, "peer-insecure")
			i--
			continue
		}
		opts = append(opts, strings.TrimPrefix(cargs[i], "--")+"="+cargs[i+1])
	}
	c := harness.Mount(t, pool, "-o", strings.Join(opts, ","))
	e.nodes["c"] = c

	t.Run("BadConfig", func(t *testing.T) { testBadConfig(t, e) })
	t.Run("WriteOnAReadOnBC", func(t *testing.T) { testWriteReadElsewhere(t, e, a, b, c) })
	t.Run("ConflictingWriters", func(t *testing.T) { testConflictingWriters(t, a, b) })
	t.Run("RenameUnlink", func(t *testing.T) { testRenameUnlink(t, a, b) })
	t.Run("Symlinks", func(t *testing.T) { testSymlinks(t, a, b, c) })
	t.Run("SetattrTravels", func(t *testing.T) { testSetattr(t, a, b, c) })
	t.Run("KillHolderDuringRead", func(t *testing.T) { testKillHolder(t, e, a, b, c) })
	t.Run("Evict", func(t *testing.T) { testEvict(t, e) })
	t.Run("RejoinDropsSuperseded", func(t *testing.T) { testRejoin(t, e) })
	t.Run("EtcdMemberLoss", func(t *testing.T) { testEtcdMemberLoss(t, e) })
	t.Run("S3Stopped", func(t *testing.T) { testS3Stopped(t, e) })
	t.Run("EtcdUnreachable", func(t *testing.T) { testEtcdUnreachable(t, e) })
}

// testBadConfig: each bad configuration is a one-line error, a non-zero
// exit, and a pool byte for byte as before.
func testBadConfig(t *testing.T, e *env) {
	pool := harness.Mkfs(t, "64MiB")
	before, err := os.ReadFile(pool)
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	dead := freeAddr(t, "127.0.0.1") // nothing listens there
	good := func(id string) []string { return e.clusterArgs(t, id, "127.0.0.5") }
	set := func(args []string, flag, val string) []string {
		out := append([]string(nil), args...)
		for i := range out {
			if out[i] == flag {
				out[i+1] = val
				return out
			}
		}
		return append(out, flag, val)
	}
	cases := []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"etcd unreachable", set(good("x1"), "--etcd", "http://"+dead), nil, dead},
		{"bad credentials", good("x2"), []string{"AWS_SECRET_ACCESS_KEY=wrong"}, "credentials"},
		{"wrong bucket", set(good("x3"), "--s3-bucket", "no-such-bucket"), nil, "bucket"},
		{"duplicate node id", good("a"), nil, "already registered"},
		{"missing token file", set(good("x4"), "--cluster-token-file", filepath.Join(mnt, "none")), nil, "token"},
		{"S3 unreachable", set(good("x5"), "--s3-endpoint", "http://"+dead), nil, "unreachable"},
		{"bad cache watermark", set(good("x6"), "--cluster-cache-min-free", "100%"), nil, "--cluster-cache-min-free"},
	}
	// The cases wait for timeouts (an unreachable endpoint): at once.
	var wg sync.WaitGroup
	for _, tc := range cases {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(harness.Binary(t), append([]string{"mount", "--pool", pool, mnt, "-f"}, tc.args...)...)
			cmd.Env = append(os.Environ(), tc.env...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() == 0 {
				t.Errorf("%s: dnnfs mount: %v, want a non-zero exit", tc.name, err)
				return
			}
			msg := strings.TrimSpace(stderr.String())
			if strings.Count(msg, "\n") != 0 || !strings.Contains(msg, tc.want) {
				t.Errorf("%s: stderr %q: want one line naming %q", tc.name, msg, tc.want)
			}
		}()
	}
	wg.Wait()
	after, err := os.ReadFile(pool)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatalf("the pool changed")
	}
}

// testWriteReadElsewhere: a file written on a is read byte-exact on b and
// c, from a's pool (peer), and a new version is seen at the next open.
func testWriteReadElsewhere(t *testing.T, e *env, a, b, c *harness.FS) {
	data := randomBytes(2*chunk+12345, 1)
	writeFile(t, a.Path("ckpt", "w1.bin"), data)
	checkFile(t, b.Path("ckpt", "w1.bin"), data)
	checkFile(t, c.Path("ckpt", "w1.bin"), data)
	ents, err := os.ReadDir(c.Path("ckpt"))
	if err != nil || len(ents) != 1 || ents[0].Name() != "w1.bin" {
		t.Fatalf("ls ckpt on c: %v %v", ents, err)
	}
	st := status(t, b)
	if st.Node != "b" || len(st.Nodes) != 3 {
		t.Errorf("status of b: node %q, live %v; want b and 3 live nodes", st.Node, st.Nodes)
	}
	if st.Fetch.Peer.Bytes+st.Fetch.Home.Bytes < int64(len(data)) || st.Fetch.S3.Hits != 0 {
		t.Errorf("b fetched peer %d + home %d bytes, %d chunks from S3; want the whole file from peers, none from S3",
			st.Fetch.Peer.Bytes, st.Fetch.Home.Bytes, st.Fetch.S3.Hits)
	}
	if len(st.Held) == 0 {
		t.Errorf("b holds no chunks after reading the file")
	}
	// Version 2, written on b: a's next open sees it whole.
	v2 := randomBytes(chunk+999, 2)
	writeFile(t, b.Path("ckpt", "w1.bin"), v2)
	// The file watch brings a's idle copy (its kernel-cached size too) to
	// version 2 by itself; an open would anyway.
	waitFor(t, "a to see version 2's size", func() bool {
		fi, err := os.Stat(a.Path("ckpt", "w1.bin"))
		return err == nil && fi.Size() == int64(len(v2))
	})
	checkFile(t, a.Path("ckpt", "w1.bin"), v2)
	checkFile(t, c.Path("ckpt", "w1.bin"), v2)

	// A partial rewrite on c keeps the chunks it did not touch.
	f, err := os.OpenFile(c.Path("ckpt", "w1.bin"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("patched"), 100); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync (commit) on c: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	copy(v2[100:], "patched")
	checkFile(t, a.Path("ckpt", "w1.bin"), v2)
	checkFile(t, b.Path("ckpt", "w1.bin"), v2)

	// An append on a, past a chunk boundary.
	f, err = os.OpenFile(a.Path("ckpt", "w1.bin"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	tail := randomBytes(chunk, 14)
	if _, err := f.Write(tail); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("close (commit) of the append: %v", err)
	}
	v2 = append(v2, tail...)
	checkFile(t, c.Path("ckpt", "w1.bin"), v2)

	// An empty file, a deep directory, a mode.
	if err := os.MkdirAll(b.Path("x", "y", "z"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, b.Path("x", "y", "z", "empty"), nil)
	if err := os.WriteFile(b.Path("x", "y", "z", "ro"), []byte("r"), 0o400); err != nil {
		t.Fatal(err)
	}
	checkFile(t, c.Path("x", "y", "z", "empty"), nil)
	fi, err := os.Stat(a.Path("x", "y", "z", "ro"))
	if err != nil || fi.Mode().Perm() != 0o400 || fi.Size() != 1 {
		t.Errorf("x/y/z/ro on a: %v %v, want mode 0400 and 1 byte", fi, err)
	}
}

// testConflictingWriters: a second writer on another node gets EBUSY while
// the first has the file open for writing.
func testConflictingWriters(t *testing.T, a, b *harness.FS) {
	writeFile(t, a.Path("conflict.bin"), []byte("v1"))
	fa, err := os.OpenFile(a.Path("conflict.bin"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = os.OpenFile(b.Path("conflict.bin"), os.O_WRONLY, 0)
	if !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("second writer on b: %v, want EBUSY", err)
	}
	// Readers are not writers.
	checkFile(t, b.Path("conflict.bin"), []byte("v1"))
	if _, err := fa.WriteAt([]byte("v2"), 0); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil {
		t.Fatal(err)
	}
	// The lock goes with the kernel's RELEASE, which follows close(2)
	// asynchronously.
	waitFor(t, "b to get the writer lock a gave up", func() bool {
		fb, err := os.OpenFile(b.Path("conflict.bin"), os.O_WRONLY, 0)
		if errors.Is(err, syscall.EBUSY) {
			return false
		}
		if err != nil {
			t.Fatalf("writer on b after a closed: %v", err)
		}
		fb.Close()
		return true
	})
	checkFile(t, b.Path("conflict.bin"), []byte("v2"))
}

// testRenameUnlink: renames and unlinks on one node show on the others.
func testRenameUnlink(t *testing.T, a, b *harness.FS) {
	data := randomBytes(1000, 3)
	writeFile(t, a.Path("tmp-ckpt", "x.bin"), data)
	checkFile(t, b.Path("tmp-ckpt", "x.bin"), data)
	if err := os.Rename(a.Path("tmp-ckpt"), a.Path("final-ckpt")); err != nil {
		t.Fatalf("rename the directory on a: %v", err)
	}
	checkFile(t, b.Path("final-ckpt", "x.bin"), data)
	waitFor(t, "b to drop the old name", func() bool {
		_, err := os.Stat(b.Path("tmp-ckpt", "x.bin"))
		return errors.Is(err, os.ErrNotExist)
	})
	// A rename over another file, on b, of files written on a.
	r1, r2 := randomBytes(300, 15), randomBytes(400, 16)
	writeFile(t, a.Path("final-ckpt", "r1"), r1)
	writeFile(t, a.Path("final-ckpt", "r2"), r2)
	checkFile(t, b.Path("final-ckpt", "r2"), r2)
	if err := os.Rename(b.Path("final-ckpt", "r1"), b.Path("final-ckpt", "r2")); err != nil {
		t.Fatalf("rename over a file on b: %v", err)
	}
	checkFile(t, b.Path("final-ckpt", "r2"), r1)
	checkFile(t, a.Path("final-ckpt", "r2"), r1)
	waitFor(t, "a to drop r1", func() bool {
		_, err := os.Stat(a.Path("final-ckpt", "r1"))
		return errors.Is(err, os.ErrNotExist)
	})
	if err := os.Remove(b.Path("final-ckpt", "x.bin")); err != nil {
		t.Fatalf("unlink on b: %v", err)
	}
	waitFor(t, "a to drop the unlinked name", func() bool {
		_, err := os.Stat(a.Path("final-ckpt", "x.bin"))
		return errors.Is(err, os.ErrNotExist)
	})
}

// testSymlinks: a symbolic link made on one node (the "latest ->
// step-N" pattern of checkpoint directories) reads the same on the
// others, and follows renames and unlinks.
func testSymlinks(t *testing.T, a, b, c *harness.FS) {
	data := randomBytes(2000, 21)
	writeFile(t, a.Path("runs", "step-100", "model.bin"), data)
	if err := os.Symlink("step-100", a.Path("runs", "latest")); err != nil {
		t.Fatalf("symlink on a: %v", err)
	}
	readlink := func(f *harness.FS, name string) string {
		t.Helper()
		var got string
		waitFor(t, "the link "+f.Path("runs", name), func() bool {
			var err error
			got, err = os.Readlink(f.Path("runs", name))
			return err == nil
		})
		return got
	}
	if got := readlink(b, "latest"); got != "step-100" {
		t.Fatalf("readlink on b: %q, want step-100", got)
	}
	checkFile(t, b.Path("runs", "latest", "model.bin"), data) // followed
	st, err := os.Lstat(b.Path("runs", "latest"))
	if err != nil || st.Mode()&os.ModeSymlink == 0 || st.Size() != int64(len("step-100")) {
		t.Fatalf("lstat on b: %v, %v", st, err)
	}
	// Listing finds it too (c never looked the name up).
	ents, err := os.ReadDir(c.Path("runs"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range ents {
		found = found || e.Name() == "latest" && e.Type()&os.ModeSymlink != 0
	}
	if !found {
		t.Fatalf("readdir on c: %v has no symlink latest", ents)
	}
	// The checkpoint pattern: a new link under a temporary name, renamed
	// over the old one on b.
	if err := os.Symlink("step-200", b.Path("runs", "latest.tmp")); err != nil {
		t.Fatalf("symlink on b: %v", err)
	}
	if err := os.Rename(b.Path("runs", "latest.tmp"), b.Path("runs", "latest")); err != nil {
		t.Fatalf("rename over the link on b: %v", err)
	}
	waitFor(t, "a to see the new link", func() bool {
		got, err := os.Readlink(a.Path("runs", "latest"))
		return err == nil && got == "step-200"
	})
	if got := readlink(c, "latest"); got != "step-200" {
		t.Fatalf("readlink on c: %q, want step-200", got)
	}
	if err := os.Remove(a.Path("runs", "latest")); err != nil {
		t.Fatalf("unlink the link on a: %v", err)
	}
	waitFor(t, "b to drop the unlinked link", func() bool {
		_, err := os.Lstat(b.Path("runs", "latest"))
		return errors.Is(err, os.ErrNotExist)
	})
}

// testSetattr: chmod, chown and utimes of a committed file reach the other
// nodes at once, without a new version (the readers keep their chunks);
// while another node writes the file they are refused with EBUSY, and the
// local change is undone. truncate(2) is committed as it is made.
func testSetattr(t *testing.T, a, b, c *harness.FS) {
	data := randomBytes(2*chunk+100, 31)
	writeFile(t, a.Path("meta.bin"), data)
	checkFile(t, b.Path("meta.bin"), data) // b holds every chunk
	before := fileState(t, b.Path("meta.bin"))
	mode := func(f *harness.FS) os.FileMode {
		st, err := os.Stat(f.Path("meta.bin"))
		if err != nil {
			t.Fatal(err)
		}
		return st.Mode().Perm()
	}
	if err := os.Chmod(a.Path("meta.bin"), 0o600); err != nil {
		t.Fatalf("chmod on a: %v", err)
	}
	waitFor(t, "b to see a's chmod", func() bool { return mode(b) == 0o600 })
	if err := os.Chown(b.Path("meta.bin"), 1234, 5678); err != nil {
		t.Fatalf("chown on b: %v", err)
	}
	owner := func(f *harness.FS) (uint32, uint32) {
		var st unix.Stat_t
		if err := unix.Stat(f.Path("meta.bin"), &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid, st.Gid
	}
	waitFor(t, "a to see b's chown", func() bool { u, g := owner(a); return u == 1234 && g == 5678 })
	mt := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	if err := os.Chtimes(c.Path("meta.bin"), mt, mt); err != nil {
		t.Fatalf("utimes on c: %v", err)
	}
	waitFor(t, "a and b to see c's utimes", func() bool {
		for _, f := range []*harness.FS{a, b} {
			st, err := os.Stat(f.Path("meta.bin"))
			if err != nil || !st.ModTime().Equal(mt) {
				return false
			}
		}
		return true
	})
	if u, g := owner(c); u != 1234 || g != 5678 || mode(c) != 0o600 {
		t.Fatalf("c: owner %d:%d mode %o", u, g, mode(c))
	}
	// The same version, and b kept its chunks: nothing to fetch again.
	after := fileState(t, b.Path("meta.bin"))
	if after.Ver != before.Ver || after.Chunks != before.Chunks || after.Chunks == "" {
		t.Fatalf("b's state went from %+v to %+v: a metadata change made a new version or dropped chunks", before, after)
	}
	checkFile(t, b.Path("meta.bin"), data)
	// A writer on a: chmod elsewhere is refused and undone; a's own chmod
	// travels with its commit, which still succeeds.
	fa, err := os.OpenFile(a.Path("meta.bin"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(b.Path("meta.bin"), 0o644); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("chmod on b while a writes: %v, want EBUSY", err)
	}
	if m := mode(b); m != 0o600 {
		t.Errorf("b's refused chmod left mode %o, want 600", m)
	}
	if err := fa.Chmod(0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := fa.WriteAt([]byte("v2"), 0); err != nil {
		t.Fatal(err)
	}
	if err := fa.Close(); err != nil {
		t.Fatalf("commit after the metadata changes: %v", err)
	}
	copy(data, "v2")
	waitFor(t, "b to see a's commit", func() bool { return mode(b) == 0o640 })
	checkFile(t, b.Path("meta.bin"), data)
	// truncate(2) without an open is committed at once, keeping the bytes
	// below the new size (the chunk it cuts is pulled first).
	if err := os.Truncate(c.Path("meta.bin"), chunk+10); err != nil {
		t.Fatalf("truncate on c: %v", err)
	}
	waitFor(t, "a to see c's truncate", func() bool {
		st, err := os.Stat(a.Path("meta.bin"))
		return err == nil && st.Size() == chunk+10
	})
	checkFile(t, a.Path("meta.bin"), data[:chunk+10])
	checkFile(t, b.Path("meta.bin"), data[:chunk+10])
	if err := os.Truncate(b.Path("meta.bin"), 0); err != nil {
		t.Fatalf("truncate to 0 on b: %v", err)
	}
	checkFile(t, a.Path("meta.bin"), nil)
}

// testKillHolder: a holder killed (-9) while a reader loads from it costs
// the reader no error.
func testKillHolder(t *testing.T, e *env, a, b, c *harness.FS) {
	data := randomBytes(4*chunk, 4)
	writeFile(t, a.Path("kill.bin"), data)
	checkFile(t, b.Path("kill.bin"), data) // b holds it too
	f, err := os.Open(c.Path("kill.bin"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := make([]byte, len(data))
	if _, err := io.ReadFull(f, got[:chunk/2]); err != nil {
		t.Fatal(err)
	}
	a.Kill(t)
	if _, err := io.ReadFull(f, got[chunk/2:]); err != nil {
		t.Fatalf("reading on after the holder a was killed: %v", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("kill.bin on c differs after the holder was killed")
	}
	// a comes back with its pool once its lease is gone (until then its
	// node id is taken): it holds its chunks again.
	waitFor(t, "a's lease to expire", func() bool {
		for _, n := range status(t, b).Nodes {
			if n == "a" {
				return false
			}
		}
		return true
	})
	e.nodes["a"] = a.Remount(e.top) // it outlives this subtest
	checkFile(t, e.nodes["a"].Path("kill.bin"), data)
	after := randomBytes(1234, 44)
	writeFile(t, b.Path("after-remount.bin"), after)
	checkFile(t, e.nodes["a"].Path("after-remount.bin"), after)
}

// testEvict: a node whose pool is smaller than the file it reads evicts
// the least recently read chunks (state, holder record, bytes) and reads
// it whole and byte-exact, with two readers at once; an evicted chunk is
// read again from the cluster, and other nodes still read everything.
func testEvict(t *testing.T, e *env) {
	a, b := e.nodes["a"], e.nodes["b"]
	const nch = 10
	data := randomBytes(nch*chunk-4321, 17) // 160 MiB less a bit: the last chunk is short
	writeFile(t, a.Path("evict.bin"), data)
	// d's pool (96 MiB, 9 MiB of it kept free, given as mount(8) would)
	// holds about five 16 MiB chunks.
	pool := harness.Mkfs(t, "96MiB")
	d := harness.Mount(t, pool, append(e.clusterArgs(t, "d", "127.0.0.4"), "--metrics-listen", "127.0.0.1:0",
		"-o", "cluster-cache-min-free=9MiB")...)
	path := d.Path("evict.bin")

	// Two readers at once, each of the whole file, one from the start and
	// one from the middle: chunks are evicted under them, never while one
	// reads them.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r, from := range []int{0, len(data) / 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Open(path)
			if err != nil {
				errs[r] = err
				return
			}
			defer f.Close()
			buf := make([]byte, 1<<20)
			for k := 0; k < len(data); k += len(buf) {
				off := (from + k) % len(data)
				n, err := f.ReadAt(buf[:min(len(buf), len(data)-off)], int64(off))
				if err != nil && !errors.Is(err, io.EOF) {
					errs[r] = fmt.Errorf("reader %d at %d: %w", r, off, err)
					return
				}
				if !bytes.Equal(buf[:n], data[off:off+n]) {
					errs[r] = fmt.Errorf("reader %d: bytes [%d, %d) differ", r, off, off+n)
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}

	st := status(t, d)
	if st.Evicted.Chunks == 0 || st.Evicted.Bytes < st.Evicted.Chunks*(chunk-4321) || st.Evicted.MinFree != 9<<20 {
		t.Fatalf("d evicted %+v after reading a %d MiB file into a 96 MiB pool: want chunks evicted", st.Evicted, len(data)>>20)
	}
	t.Logf("d: evicted %+v; fetched peer %+v home %+v s3 %+v", st.Evicted, st.Fetch.Peer, st.Fetch.Home, st.Fetch.S3)
	// etcd's holder record of d is what d's pool holds: the evicted
	// chunks are not announced (the record is written shortly after a
	// change, and a read-ahead may still be storing one).
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	var fs struct {
		ID     string `json:"id"`
		Ver    uint64 `json:"ver"`
		Chunks string `json:"chunks"`
	}
	var key, rec string
	waitFor(t, "d's holder record to match its pool", func() bool {
		fs = fileState(t, path)
		key = fmt.Sprintf("%s/holders/%s/%d/d", e.prefix, fs.ID, fs.Ver)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, key)
		if err != nil || len(resp.Kvs) != 1 {
			rec = fmt.Sprintf("%v (%v)", resp, err)
			return false
		}
		var h struct {
			Chunks string `json:"chunks"`
		}
		rec = string(resp.Kvs[0].Value)
		return json.Unmarshal(resp.Kvs[0].Value, &h) == nil && h.Chunks == fs.Chunks
	})
	t.Logf("d holds %q; etcd %s = %s", fs.Chunks, key, rec)
	present, err := namespace.ParseChunks(fs.Chunks)
	if err != nil || present.Len() == 0 || present.Len() >= nch {
		t.Fatalf("d holds chunks %q of evict.bin (%v): want some, not all %d", fs.Chunks, err, nch)
	}

	// An evicted chunk read again comes back from the cluster.
	gone := -1
	for i := 0; i < nch && gone < 0; i++ {
		if !present.Has(namespace.ChunkIdx(i)) {
			gone = i
		}
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, chunk)
	n, err := f.ReadAt(got, int64(gone*chunk))
	f.Close()
	if end := min((gone+1)*chunk, len(data)); (err != nil && !errors.Is(err, io.EOF)) || !bytes.Equal(got[:n], data[gone*chunk:end]) {
		t.Fatalf("re-reading evicted chunk %d on d: %d bytes, %v, or they differ", gone, n, err)
	}
	if again, err := namespace.ParseChunks(fileState(t, path).Chunks); err != nil || !again.Has(namespace.ChunkIdx(gone)) {
		t.Errorf("chunk %d is not in d's pool after it was read again: %v %v", gone, again, err)
	}
	// cp, which skips what SEEK_DATA calls holes in a file with few
	// blocks, copies the evicted chunks too.
	dst := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", path, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	checkFile(t, dst, data)
	// Another node reads everything still.
	checkFile(t, b.Path("evict.bin"), data)

	// The metric counts them too (scraped after the status: at least as many).
	log, err := os.ReadFile(d.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "evicted cluster chunks from the pool") {
		t.Errorf("no eviction pass in d's log")
	}
	if out, stderr, code := harness.Run(t, "status", d.Mnt); code != 0 || !regexp.MustCompile(`evicted [1-9][0-9]* chunks`).MatchString(out) {
		t.Errorf("dnnfs status: exit %d, no evicted chunks counted\n%s%s", code, out, stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fam, err := metrics.Scrape(ctx, metricsURL.FindString(string(log)))
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := fam.Value("dnnfs_cluster_evicted_chunks_total"); !ok || int64(v) < st.Evicted.Chunks {
		t.Errorf("dnnfs_cluster_evicted_chunks_total = %v (%v), status said %d before", v, ok, st.Evicted.Chunks)
	}

	// A write into a pool full of cached chunks makes room from them (a
	// write never waits for the watermark: ENOSPC is what reclaims): a
	// new 48 MiB file on d, more than its free space, is written whole.
	var sfs unix.Statfs_t
	if err := unix.Statfs(d.Mnt, &sfs); err != nil {
		t.Fatal(err)
	}
	free := int64(sfs.Bavail) * sfs.Bsize
	big := randomBytes(48<<20, 41)
	if int64(len(big)) <= free {
		t.Fatalf("d has %d bytes free: the write would not need the cache's room", free)
	}
	writeFile(t, d.Path("local-after-cache.bin"), big)
	checkFile(t, d.Path("local-after-cache.bin"), big)
	checkFile(t, b.Path("local-after-cache.bin"), big)
}

// fileState reads a file's cluster state (the trusted xattr, root only).
func fileState(t *testing.T, path string) (st struct {
	ID     string `json:"id"`
	Ver    uint64 `json:"ver"`
	Chunks string `json:"chunks"`
}) {
	t.Helper()
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(path, cluster.XattrState, buf)
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", path, cluster.XattrState, err)
	}
	if err := json.Unmarshal(buf[:n], &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// testRejoin: a node that was away while a file it held got a new version
// drops the old version's chunks when it mounts again, and reads the new.
func testRejoin(t *testing.T, e *env) {
	data := randomBytes(chunk+77, 12)
	writeFile(t, e.nodes["a"].Path("rejoin.bin"), data)
	c := e.nodes["c"]
	checkFile(t, c.Path("rejoin.bin"), data)
	old := fileState(t, c.Path("rejoin.bin"))
	if old.Chunks != "0-1" {
		t.Fatalf("c holds chunks %q of rejoin.bin, want 0-1", old.Chunks)
	}
	c.Unmount(e.top)
	v2 := randomBytes(chunk+78, 13)
	writeFile(t, e.nodes["b"].Path("rejoin.bin"), v2)
	c = c.Remount(e.top)
	e.nodes["c"] = c
	st := fileState(t, c.Path("rejoin.bin"))
	if st.ID != old.ID || st.Ver != old.Ver+1 || st.Chunks != "" {
		t.Errorf("after rejoining, c's rejoin.bin is %+v: want version %d of %s, no chunk held", st, old.Ver+1, old.ID)
	}
	for _, h := range status(t, c).Held {
		if h.ID == old.ID && h.Version == old.Ver {
			t.Errorf("c still announces chunks %s of the superseded version", h.Chunks)
		}
	}
	checkFile(t, c.Path("rejoin.bin"), v2)
	if out, stderr, code := harness.Run(t, "status", c.Mnt); code != 0 || !strings.Contains(out, "cluster: node c") {
		t.Errorf("dnnfs status: exit %d\n%s%s", code, out, stderr)
	}
}

// testEtcdMemberLoss: one of three etcd members killed, the cluster works.
func testEtcdMemberLoss(t *testing.T, e *env) {
	e.etcd.Kill(0)
	data := randomBytes(chunk+7, 5)
	writeFile(t, e.nodes["b"].Path("member-loss.bin"), data)
	checkFile(t, e.nodes["c"].Path("member-loss.bin"), data)
	checkFile(t, e.nodes["a"].Path("member-loss.bin"), data)
	e.etcd.Restart(0)
}

// testS3Stopped: with S3 down, chunks held by peers still load; a commit
// fails with EIO.
func testS3Stopped(t *testing.T, e *env) {
	data := randomBytes(2*chunk, 6)
	writeFile(t, e.nodes["a"].Path("s3down.bin"), data)
	e.s3.Stop()
	defer e.s3.Start()
	checkFile(t, e.nodes["b"].Path("s3down.bin"), data)
	f, err := os.Create(e.nodes["c"].Path("s3down-new.bin"))
	if err != nil {
		t.Fatal(err)
	}
	f.Write([]byte("x"))
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync of a new file with S3 down: %v, want EIO", err)
	}
	f.Close()
	if _, err := os.Stat(e.nodes["a"].Path("s3down-new.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a uncommitted file is visible on a: %v", err)
	}
}

// testEtcdUnreachable: with every etcd member down, committed files read
// from the local pools, and a commit fails with EIO on fsync.
func testEtcdUnreachable(t *testing.T, e *env) {
	data := randomBytes(chunk+3, 7)
	writeFile(t, e.nodes["a"].Path("etcd-down.bin"), data)
	checkFile(t, e.nodes["b"].Path("etcd-down.bin"), data)
	e.etcd.KillAll()
	checkFile(t, e.nodes["a"].Path("etcd-down.bin"), data)
	checkFile(t, e.nodes["b"].Path("etcd-down.bin"), data)
	f, err := os.OpenFile(e.nodes["a"].Path("etcd-down-new.bin"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatalf("create with etcd down: %v", err)
	}
	f.Write([]byte("new"))
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("fsync with etcd down: %v, want EIO", err)
	}
	f.Close()
	// A symlink is committed as it is made: EIO, and no link is left.
	if err := os.Symlink("etcd-down.bin", e.nodes["a"].Path("etcd-down-link")); !errors.Is(err, syscall.EIO) {
		t.Errorf("symlink with etcd down: %v, want EIO", err)
	}
	if _, err := os.Lstat(e.nodes["a"].Path("etcd-down-link")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed symlink left a name: %v", err)
	}
	for i := 0; i < e.etcd.Members(); i++ {
		e.etcd.StartMember(i)
	}
}

// TestS3Tier is about S3 requests: a 1 GiB file (64 chunks) written on a node that
// has left (no holder) loaded by three readers at once makes at most one
// S3 GET per chunk in all, the rest peer to peer; after `dnnfs warmup`,
// reads make no S3 request; objects of another bucket, attached, read on
// two nodes at once with one GET per chunk, and are read-only.
func TestS3Tier(t *testing.T) {
	e := newEnv(t)
	e.pool = "1400MiB" // the 1 GiB file, above the default 10% cache watermark
	w := e.mount(t, "w", "127.0.0.4")
	data := randomBytes(1<<30, 8)
	sum := sha256.Sum256(data)
	writeFile(t, w.Path("big.bin"), data)
	w.Unmount(t) // its holder records go with it
	var nodes []*harness.FS
	for i, id := range []string{"a", "b", "c"} {
		var extra []string
		if id == "a" {
			extra = []string{"--metrics-listen", "127.0.0.1:0"}
		}
		nodes = append(nodes, e.mount(t, id, fmt.Sprintf("127.0.0.%d", i+1), extra...))
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Hashed as read: three 1 GiB copies need not be in memory.
			f, err := os.Open(n.Path("big.bin"))
			if err != nil {
				errs[i] = err
				return
			}
			defer f.Close()
			h := sha256.New()
			k, err := io.CopyBuffer(h, f, make([]byte, 1<<20))
			switch {
			case err != nil:
				errs[i] = err
			case k != int64(len(data)) || !bytes.Equal(h.Sum(nil), sum[:]):
				errs[i] = fmt.Errorf("%s: %d bytes, content differs", n.Mnt, k)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("three nodes read %d MiB each at once in %v (%.0f MiB/s per reader)", len(data)>>20, el.Round(time.Millisecond),
		float64(len(data)>>20)/el.Seconds())
	chunks := int64(len(data) / chunk)
	var gets, s3Hits int64
	for _, n := range nodes {
		st := status(t, n)
		gets += st.S3.ChunkGets
		s3Hits += st.Fetch.S3.Hits
		t.Logf("%s: local %+v peer %+v home %+v s3 %+v; S3 chunk GETs %d", st.Node, st.Fetch.Local, st.Fetch.Peer, st.Fetch.Home, st.Fetch.S3, st.S3.ChunkGets)
	}
	if gets > chunks {
		t.Errorf("%d S3 chunk GETs by three readers of %d chunks: want at most one per chunk", gets, chunks)
	}
	checkClusterMetrics(t, nodes[0])

	// dnnfs warmup on a (of a file nobody holds: its writer left) puts
	// every chunk in a home node's pool; reads on b and c then make no S3
	// request.
	w = w.Remount(t)
	warm := randomBytes(4*chunk+5, 9)
	writeFile(t, w.Path("warm.bin"), warm)
	w.Unmount(t)
	s3gets := func() (n int64) {
		for _, nd := range nodes {
			n += status(t, nd).S3.ChunkGets
		}
		return n
	}
	before := s3gets()
	out, stderr, code := harness.Run(t, "warmup", nodes[0].Path("warm.bin"))
	if code != 0 || !strings.Contains(out, "warmed 5 chunks") {
		t.Fatalf("dnnfs warmup: exit %d\n%s%s", code, out, stderr)
	}
	warmed := s3gets()
	if warmed-before != 5 {
		t.Errorf("warm-up of 5 chunks made %d S3 chunk GETs, want 5", warmed-before)
	}
	checkFile(t, nodes[1].Path("warm.bin"), warm)
	checkFile(t, nodes[2].Path("warm.bin"), warm)
	if after := s3gets(); after != warmed {
		t.Errorf("reads after warm-up made %d S3 chunk GETs, want none", after-warmed)
	}

	// Objects put into another bucket with an S3 client, attached on a,
	// read byte-exact on b and c at once: one GET per chunk in all.
	ctx := context.Background()
	mc := e.s3.Client()
	if err := mc.MakeBucket(ctx, "foreign", minio.MakeBucketOptions{Region: e.s3.Region}); err != nil {
		t.Fatal(err)
	}
	objs := map[string][]byte{"ds/a.bin": randomBytes(2*chunk+3, 10), "ds/sub/b.bin": randomBytes(1000, 11)}
	for k, v := range objs {
		if _, err := mc.PutObject(ctx, "foreign", k, bytes.NewReader(v), int64(len(v)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	out, stderr, code = harness.Run(t, "attach", "s3://foreign/ds", nodes[0].Path("data"))
	if code != 0 || !strings.Contains(out, "2 files") {
		t.Fatalf("dnnfs attach: exit %d\n%s%s", code, out, stderr)
	}
	before = s3gets()
	var rw sync.WaitGroup
	for _, n := range nodes[1:] {
		rw.Add(1)
		go func() {
			defer rw.Done()
			checkFile(t, n.Path("data", "a.bin"), objs["ds/a.bin"])
			checkFile(t, n.Path("data", "sub", "b.bin"), objs["ds/sub/b.bin"])
		}()
	}
	rw.Wait()
	if got := s3gets() - before; got != 4 {
		t.Errorf("two nodes reading 4 chunks of attached objects made %d S3 GETs, want 4", got)
	}
	if _, err := os.OpenFile(nodes[1].Path("data", "a.bin"), os.O_WRONLY, 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("open of an attached object for writing: %v, want EROFS", err)
	}
}

// metricsURL is the /metrics URL a daemon logged when it bound
// --metrics-listen.
var metricsURL = regexp.MustCompile(`http://[0-9.:\[\]]+/metrics`)

// checkClusterMetrics scrapes node f (mounted with --metrics-listen, idle
// now) and checks the cluster series against its `dnnfs status --json`:
// the same counters, read when scraped. Every dnnfs_cluster_ series is on
// the Grafana dashboard and in docs/METRICS.md, and every one
// the dashboard queries is in the scrape.
func checkClusterMetrics(t *testing.T, f *harness.FS) {
	t.Helper()
	log, err := os.ReadFile(f.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	url := metricsURL.FindString(string(log))
	if url == "" {
		t.Fatalf("no metrics URL in %s's log", f.Mnt)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fam, err := metrics.Scrape(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	st := status(t, f)
	held := 0
	for _, h := range st.Held {
		held += h.Count
	}
	want := []struct {
		name   string
		labels []string
		v      int64
	}{
		{"dnnfs_cluster_fetch_bytes_total", []string{"source", "local"}, st.Fetch.Local.Bytes},
		{"dnnfs_cluster_fetch_bytes_total", []string{"source", "peer"}, st.Fetch.Peer.Bytes},
		{"dnnfs_cluster_fetch_bytes_total", []string{"source", "home"}, st.Fetch.Home.Bytes},
		{"dnnfs_cluster_fetch_bytes_total", []string{"source", "s3"}, st.Fetch.S3.Bytes},
		{"dnnfs_cluster_fetch_chunks_total", []string{"source", "peer"}, st.Fetch.Peer.Hits},
		{"dnnfs_cluster_fetch_requests_total", []string{"source", "home"}, st.Fetch.Home.Requests},
		{"dnnfs_cluster_served_bytes_total", nil, st.Fetch.ServedBytes},
		{"dnnfs_cluster_s3_bytes_total", []string{"direction", "get"}, st.S3.ChunkGetBytes},
		{"dnnfs_cluster_live_nodes", nil, int64(len(st.Nodes))},
		{"dnnfs_cluster_held_chunks", nil, int64(held)},
		{"dnnfs_cluster_evicted_chunks_total", nil, st.Evicted.Chunks},
		{"dnnfs_cluster_evicted_bytes_total", nil, st.Evicted.Bytes},
		{"dnnfs_cluster_background_failures_total", []string{"work", "holder_drop"}, st.Background.HolderDrops},
		{"dnnfs_cluster_background_failures_total", []string{"work", "read_ahead"}, st.Background.ReadAheads},
	}
	moved := int64(0)
	for _, w := range want {
		v, ok := fam.Value(w.name, w.labels...)
		if !ok || int64(v) != w.v {
			t.Errorf("%s%v = %v (present %v), status --json says %d", w.name, w.labels, v, ok, w.v)
		}
		moved += w.v
	}
	if moved == 0 {
		t.Errorf("every cluster counter of %s is 0 after it read the big file", f.Mnt)
	}
	dash, err := os.ReadFile("../../docs/grafana-dnnfs.json")
	if err != nil {
		t.Fatal(err)
	}
	metricsDoc, err := os.ReadFile("../../docs/METRICS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`\bdnnfs_cluster_[a-z0-9_]+`).FindAllString(string(dash), -1) {
		if !fam.Has(name) {
			t.Errorf("the dashboard queries %s, which a cluster node's scrape does not have", name)
		}
	}
	for name := range fam {
		if !strings.HasPrefix(name, "dnnfs_cluster_") {
			continue
		}
		if !strings.Contains(string(dash), name) {
			t.Errorf("%s is not on the dashboard (docs/grafana-dnnfs.json)", name)
		}
		if !strings.Contains(string(metricsDoc), "`"+name+"`") {
			t.Errorf("%s is not in docs/METRICS.md", name)
		}
	}
}
