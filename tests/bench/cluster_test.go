package main

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestClusterEnv starts the cluster phase's engines as the driver does (a
// real etcd and a real versitygw), checks they answer and the bucket is
// there, and that stop ends both processes and removes their directory.
func TestClusterEnv(t *testing.T) {
	if engineBinary("DNNFS_ETCD_BIN", "etcd") == "" || engineBinary("DNNFS_VERSITYGW_BIN", "versitygw") == "" {
		if os.Getenv("DNNFS_REQUIRE_CLUSTER") != "" {
			t.Fatal("etcd or versitygw not found and DNNFS_REQUIRE_CLUSTER is set: run `make deps`")
		}
		t.Skip("etcd or versitygw not found (run `make deps`)")
	}
	ctx := context.Background()
	e, err := startClusterEnv(ctx, t.TempDir())
	t.Cleanup(e.stop)
	if err != nil {
		t.Fatal(err)
	}
	if !etcdHealthy(e.etcdURL) {
		t.Fatalf("etcd at %s is not healthy", e.etcdURL)
	}
	cli, err := e.client()
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := cli.BucketExists(ctx, e.bucket); err != nil || !ok {
		t.Fatalf("bucket %s: exists %v, %v", e.bucket, ok, err)
	}
	var pids []int
	for _, p := range e.procs {
		pids = append(pids, p.cmd.Process.Pid)
	}
	if len(pids) != 2 {
		t.Fatalf("%d engine processes, want 2 (etcd, versitygw)", len(pids))
	}
	dir := e.dir
	e.stop()
	for _, pid := range pids {
		// Waited for by stop: the pid is gone, not a zombie.
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("engine pid %d still there after stop (kill 0: %v)", pid, err)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there after stop (%v)", dir, err)
	}
}

// TestClusterReport renders the cluster section and goals from rounds of
// two runs and checks the numbers the goal table and the table show.
func TestClusterReport(t *testing.T) {
	const size = 512 * MiB
	res := &clusterResults{Layout: clusterLayout{FileBytes: size, ChunkBytes: clusterChunk, Pools: "shm", Nodes: map[string]string{}}}
	rd := func(node string, group int, mibps float64, s3 int64) clusterReader {
		return clusterReader{Node: node, Group: group, MiBps: mibps, Bytes: size, S3: s3, Home: size - s3, S3Fetch: s3 / 2}
	}
	for run, k := range []float64{1, 1.5} {
		res.Rounds = append(res.Rounds,
			clusterRound{Run: run, Variant: "together", Readers: 1, S3Bytes: size, Reader: []clusterReader{rd("r1", 1, 100*k, size)}},
			clusterRound{Run: run, Variant: "together", Readers: 2, S3Bytes: size, Reader: []clusterReader{rd("r1", 1, 80*k, size/2), rd("r2", 1, 60*k, size/2)}},
			clusterRound{Run: run, Variant: "together", Readers: 4, S3Bytes: size * 11 / 10, Reader: []clusterReader{
				rd("r1", 1, 40*k, size/4), rd("r2", 1, 40*k, size/4), rd("r3", 1, 40*k, size/4), rd("r4", 1, 40*k, size/4+size/10)}},
			clusterRound{Run: run, Variant: "staggered", Readers: 4, S3Bytes: size, Reader: []clusterReader{
				rd("r1", 1, 90*k, size/4), rd("r2", 2, 300*k, size/4), rd("r3", 2, 200*k, size/4), rd("r4", 2, 250*k, size/4)}})
		for _, n := range clusterS3Counts {
			r := clusterRound{Run: run, Variant: "s3only", Readers: n, S3Bytes: int64(n) * size}
			for i := 0; i < n; i++ {
				r.Reader = append(r.Reader, clusterReader{Node: "rclone", Group: 1, MiBps: 200 / float64(n), Bytes: size, S3: size})
			}
			res.Rounds = append(res.Rounds, r)
		}
	}
	// An errored round counts in no median.
	res.Rounds = append(res.Rounds, clusterRound{Run: 2, Variant: "together", Readers: 1, Err: "mount failed"})
	b := &Bench{cluster: res}
	goals := b.clusterGoals(b.cluster)
	if len(goals) != 5 {
		t.Fatalf("%d goal rows, want 5 (speed-up, S3 bytes of 4 rounds): %+v", len(goals), goals)
	}
	// Readers 2–4 after reader 1: mean 250 (run 0) and 375 (run 1) MiB/s
	// against rclone's 200/3 per reader: 3.75× and 5.625×, median 4.6875.
	if g := goals[0]; g.Min != 2 || g.R.N != 2 || math.Abs(g.R.Median-4.6875) > 1e-9 || math.Abs(g.R.Min-3.75) > 1e-9 {
		t.Errorf("speed-up goal %q: %+v, want median 4.6875 of 2 runs (3.75–5.625), at least 2", g.Name, *g.R)
	}
	for _, g := range goals[1:] {
		want := 1.0
		if strings.Contains(g.Name, "4 reader(s) at once") {
			want = 1.1
		}
		if g.Max != 1.1 || math.Abs(g.R.Median-want) > 1e-9 {
			t.Errorf("goal %q: median %v, at most %v; want %v, at most 1.1", g.Name, g.R.Median, g.Max, want)
		}
	}
	var w strings.Builder
	b.clusterSection(&w, b.cluster, "## 5. Cluster: loading a checkpoint written on another node")
	md := w.String()
	for _, want := range []string{
		"## 5. Cluster: loading a checkpoint written on another node",
		// 1 reader: 100 and 150 MiB/s, median 125; rclone 200; 0.50×–0.75×.
		"| 1 reader | 125 ±20% | 200 | 0.62× (0.50×–0.75×) | 512 MiB (1.00×) | 1.00× |",
		"| 4 readers at once | 50.0 (50.0–50.0) ±20% | 50.0 | 1.00× (0.80×–1.20×) | 141 MiB (0.27×) | 1.10× |",
		"| 4 readers staggered: readers 2–4 after it, at once | 312 (250–375) ±20% | 66.7 (3 at once) | 4.69× (3.75×–5.62×) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q:\n%s", want, md)
		}
	}
}
