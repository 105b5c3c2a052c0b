package posixdiff_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/tests/harness"
	"github.com/dnnfs/dnnfs/tests/posixdiff"
)

// TestMain: DNNFS_DIFF_ENABLE=special,opath,modes,null turns on gated operations
// (posixdiff.SpecialFiles, OPathUnlink, SpecialModes, NullModes) before they are on by
// default.
func TestMain(m *testing.M) {
	for _, g := range strings.Split(os.Getenv("DNNFS_DIFF_ENABLE"), ",") {
		switch strings.TrimSpace(g) {
		case "special":
			posixdiff.SpecialFiles = true
		case "opath":
			posixdiff.OPathUnlink = true
		case "modes":
			posixdiff.SpecialModes = true
		case "null":
			posixdiff.NullModes = true
		case "":
		default:
			fmt.Fprintf(os.Stderr, "DNNFS_DIFF_ENABLE: unknown gate %q (special, opath, modes, null)\n", g)
			os.Exit(2)
		}
	}
	code := m.Run()
	harness.RemoveBuiltBinary()
	os.Exit(code)
}

// tmpfsDir is the native reference directory (see harness.TmpfsDir).
func tmpfsDir(t *testing.T) string { return harness.TmpfsDir(t, "2g") }

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
			reachable(t, a, b)
			posixdiff.RunWithOptions(t, a, b, seed, nops, posixdiff.Options{SkipOps: posixdiff.EnvSkipOps(), ProbeUID: probeUID})
		})
	}
}

// probeUID is the unprivileged user the "probe" operation runs as.
const probeUID = 65534

// reachable lets other users search the directories from the temporary
// directory down to each dir (t.TempDir makes them 0700), so that probes
// as probeUID reach the trees.
func reachable(t *testing.T, dirs ...string) {
	t.Helper()
	top := filepath.Clean(os.TempDir())
	for _, dir := range dirs {
		for d := filepath.Clean(dir); strings.HasPrefix(d, top+"/"); d = filepath.Dir(d) {
			st, err := os.Stat(d)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm()&0o001 == 0 {
				if err := os.Chmod(d, st.Mode().Perm()|0o001); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if st, err := os.Stat(top); err != nil || st.Mode().Perm()&0o001 == 0 {
		t.Fatalf("%s must be searchable by others for the uid %d probes (stat: %v)", top, probeUID, err)
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
	// allow_other: the probes run as another uid.
	fs := harness.Mount(t, pool, "--allow-other")
	ref := tmpfsDir(t)
	for i, seed := range seeds {
		name := fmt.Sprintf("seed%d", seed)
		a, b := filepath.Join(ref, name), fs.Path(name)
		mkdirs(t, a, b)
		reachable(t, a, b)
		if !t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			posixdiff.RunWithOptions(t, a, b, seed, nops, posixdiff.Options{SkipOps: posixdiff.EnvSkipOps(), ProbeUID: probeUID})
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
