package posixdiff_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dnnfs/dnnfs/tests/harness"
	"github.com/dnnfs/dnnfs/tests/posixdiff"
)

func TestMain(m *testing.M) {
	code := m.Run()
	harness.RemoveBuiltBinary()
	os.Exit(code)
}

// tmpfsDir returns an empty directory on a tmpfs: a private tmpfs mounted in
// t.TempDir() when possible (we normally run as root), else a directory under
// /dev/shm.
func tmpfsDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tmpfs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "mode=0755,size=2g"); err == nil {
		t.Cleanup(func() {
			if err := unix.Unmount(dir, 0); err != nil {
				_ = unix.Unmount(dir, unix.MNT_DETACH)
			}
		})
		return dir
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs("/dev/shm", &sfs); err != nil || sfs.Type != unix.TMPFS_MAGIC {
		t.Skip("cannot mount a tmpfs and /dev/shm is not a tmpfs")
	}
	shm, err := os.MkdirTemp("/dev/shm", "posixdiff-")
	if err != nil {
		t.Skip("no usable tmpfs: ", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	return shm
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDifferentialTmpfsSelf runs the generator on two tmpfs directories: any
// divergence is a bug in the generator itself (nondeterminism, or comparing
// something that legitimately differs).
func TestDifferentialTmpfsSelf(t *testing.T) {
	root := tmpfsDir(t)
	nops := envInt(t, "DNNFS_DIFF_OPS", 1500)
	for _, seed := range []int64{1, 2, 3, 42} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			a := filepath.Join(root, fmt.Sprintf("a%d", seed))
			b := filepath.Join(root, fmt.Sprintf("b%d", seed))
			mkdirs(t, a, b)
			posixdiff.Run(t, a, b, seed, nops)
		})
	}
}

// TestDifferential runs random operation sequences on dnnfs and on tmpfs in
// lockstep. After each seed the file system is unmounted and mounted again
// and the trees are compared once more (persistence). The harness runs fsck
// on the pool at the end.
//
//	DNNFS_DIFF_SEEDS=N      number of seeds (default 6): seeds 1..N
//	DNNFS_DIFF_SEED=S[,S]   run exactly these seeds (reproduce a failure)
//	DNNFS_DIFF_RANDOM=1     N random seeds instead of 1..N (printed)
//	DNNFS_DIFF_OPS=N        operations per seed (default 1500)
func TestDifferential(t *testing.T) {
	seeds := diffSeeds(t)
	nops := envInt(t, "DNNFS_DIFF_OPS", 1500)
	pool := harness.Mkfs(t, "512MiB")
	fs := harness.Mount(t, pool)
	ref := tmpfsDir(t)
	for i, seed := range seeds {
		name := fmt.Sprintf("seed%d", seed)
		a, b := filepath.Join(ref, name), fs.Path(name)
		mkdirs(t, a, b)
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			posixdiff.Run(t, a, b, seed, nops)
		}) {
			continue
		}
		fs.Unmount(t)
		fs = fs.Remount(t)
		t.Run(fmt.Sprintf("seed=%d/after-remount", seed), func(t *testing.T) {
			posixdiff.CompareTrees(t, a, fs.Path(name))
		})
		if i < len(seeds)-1 { // keep the last tree for the final fsck
			for _, d := range []string{a, fs.Path(name)} {
				if err := os.RemoveAll(d); err != nil {
					t.Errorf("removing %s: %v", d, err)
				}
			}
		}
	}
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a non-negative integer", name, s)
	}
	return n
}

func diffSeeds(t *testing.T) []int64 {
	if s := os.Getenv("DNNFS_DIFF_SEED"); s != "" {
		var seeds []int64
		for _, f := range strings.Split(s, ",") {
			n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("DNNFS_DIFF_SEED=%q: %v", s, err)
			}
			seeds = append(seeds, n)
		}
		return seeds
	}
	n := envInt(t, "DNNFS_DIFF_SEEDS", 6)
	seeds := make([]int64, n)
	for i := range seeds {
		seeds[i] = int64(i + 1)
		if os.Getenv("DNNFS_DIFF_RANDOM") != "" {
			seeds[i] = rand.Int64N(1 << 40)
		}
	}
	if os.Getenv("DNNFS_DIFF_RANDOM") != "" {
		t.Logf("random seeds: %v", seeds)
	}
	return seeds
}
