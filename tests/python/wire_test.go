package python_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// TestNativeWireCodec: dnnfs._wire, the Python codec of the native path's
// control channel, agrees with native/wire. native/wire's TestWriteFrames
// writes its golden frames, malformed frames with the sentinel Go refuses
// each with, and the messages Append refuses; python/test_dnnfs_native_wire.py
// checks the installed module against that file, so neither side keeps a
// copy of the other's bytes.
func TestNativeWireCodec(t *testing.T) {
	t.Parallel()
	venv(t)
	root, err := harness.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	frames := filepath.Join(t.TempDir(), "frames.json")
	// go test puts its own go first in PATH; -count=1 because a cached
	// result would not write the file.
	cmd := exec.Command("go", "test", "-count=1", "-run", "^TestWriteFrames$", "-v", "./native/wire")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "DNNFS_WIRE_FRAMES="+frames)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestWriteFrames") {
		t.Fatalf("go test ./native/wire -run TestWriteFrames: %v\n%s", err, out)
	}
	t.Logf("%s", out)
	pyOut, err := runPy(t, 5*time.Minute, script("test_dnnfs_native_wire.py"), frames, "-v")
	t.Logf("test_dnnfs_native_wire.py:\n%s", pyOut)
	if err != nil || !strings.Contains(pyOut, "\nOK") {
		t.Fatalf("test_dnnfs_native_wire.py: %v", err)
	}
}
