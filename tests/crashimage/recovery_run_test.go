//go:build !dnnfs_recovery

package crashimage_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFencesWithRecoveryCheck runs the fence sweep again with the
// independent checker of package recovery on every crash image (build tag
// dnnfs_recovery, see recovery_on_test.go), if that package exists and
// compiles; otherwise the sweep relies on core.Open's validation alone.
func TestFencesWithRecoveryCheck(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	goTool := "go"
	if p, err := exec.LookPath("go"); err == nil {
		goTool = p
	}
	run := func(timeout time.Duration, args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, goTool, args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			err = errors.Join(err, ctx.Err())
		}
		return string(out), err
	}
	if !fileExists(filepath.Join(root, "recovery")) {
		t.Log("no package recovery: crash images are checked by core.Open only")
		return
	}
	if out, err := run(5*time.Minute, "build", "./recovery"); err != nil {
		t.Logf("package recovery does not compile yet: crash images are checked by core.Open only\n%s", out)
		return
	}
	out, err := run(10*time.Minute, "test", "-tags", "dnnfs_recovery", "-count=1",
		"-run", "^(TestFences|TestFencesSessions|TestFencesTables|TestFencesTierMigration|TestFencesMorePaths|TestSweepDetectsLostFlushes)$", "./tests/crashimage/")
	if err != nil {
		t.Fatalf("fence sweep with recovery.Check on every crash image: %v\n%s", err, out)
	}
	t.Logf("fence sweep with recovery.Check on every crash image: %s", strings.TrimSpace(out))
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
