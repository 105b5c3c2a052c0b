package e2e_test

// make install / make uninstall (README "Install") into a DESTDIR: the tree holds
// what an admin expects where the system looks for it, the installed
// binary runs the README's commands with no bin/ on PATH, and uninstall
// leaves no file behind.

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/tests/harness"
)

// installedFiles returns the files and symbolic links under dir, relative.
func installedFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	must(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, "/"+rel)
		}
		return nil
	}))
	sort.Strings(out)
	return out
}

func makeIn(t *testing.T, root string, args ...string) {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-C", root, "--no-print-directory"}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func TestMakeInstall(t *testing.T) {
	t.Parallel()
	root, err := harness.ModuleRoot()
	must(t, err)
	_, pyErr := os.Stat(filepath.Join(root, "python", "pyproject.toml"))
	for _, prefix := range []string{"/usr/local", "/opt/dnnfs"} {
		t.Run(prefix, func(t *testing.T) {
			dest := t.TempDir()
			args := []string{"DESTDIR=" + dest}
			if prefix != "/usr/local" {
				args = append(args, "PREFIX="+prefix)
			}
			makeIn(t, root, append([]string{"install"}, args...)...)
			bin := dest + prefix + "/bin/dnnfs"

			want := map[string]bool{
				prefix + "/bin/dnnfs":                         true,
				"/sbin/mount.fuse.dnnfs":                      true,
				"/sbin/mount.dnnfs":                           true,
				prefix + "/lib/systemd/system/dnnfs@.service": true,
			}
			for _, f := range []string{"/share/bash-completion/completions/dnnfs", "/share/zsh/site-functions/_dnnfs", "/share/fish/vendor_completions.d/dnnfs.fish"} {
				want[prefix+f] = true
			}
			var python []string
			for _, f := range installedFiles(t, dest) {
				if strings.HasPrefix(f, prefix+"/lib/python3") {
					python = append(python, f)
					continue
				}
				if !want[f] {
					t.Errorf("make install put %s, not asked for", f)
				}
				delete(want, f)
			}
			for f := range want {
				t.Errorf("make install did not put %s", f)
			}
			for _, l := range []string{"/sbin/mount.fuse.dnnfs", "/sbin/mount.dnnfs"} {
				if target, err := os.Readlink(dest + l); err != nil || target != prefix+"/bin/dnnfs" {
					t.Errorf("%s links to %q (%v), want %s/bin/dnnfs", l, target, err, prefix)
				}
			}
			unit := string(readFile(t, dest+prefix+"/lib/systemd/system/dnnfs@.service"))
			if !strings.Contains(unit, "\nExecStart="+prefix+"/bin/dnnfs mount --foreground ") {
				t.Errorf("the unit does not start %s/bin/dnnfs mount --foreground:\n%s", prefix, unit)
			}
			verifyUnit(t, unit)
			{
				out, code := runCmd(t, nil, "bash", "-c", `source "$1" && complete -p dnnfs`, "bash", dest+prefix+"/share/bash-completion/completions/dnnfs")
				if code != 0 {
					t.Errorf("sourcing the installed bash completion: exit %d\n%s", code, out)
				}
			}
			if pyErr == nil {
				sites, _ := filepath.Glob(dest + prefix + "/lib/python3*/*-packages")
				if len(sites) != 1 {
					t.Errorf("the Python package: site directories %v, want one (files: %v)", sites, python)
				} else if out, code := runCmd(t, []string{"PYTHONPATH=" + sites[0]}, "/usr/bin/python3", "-c", "import dnnfs"); code != 0 {
					t.Errorf("import dnnfs from %s: exit %d\n%s", sites[0], code, out)
				}
			} else if len(python) > 0 {
				t.Errorf("no python/pyproject.toml, yet make install put %v", python)
			}
			if prefix == "/usr/local" {
				readmeCommands(t, filepath.Dir(bin))
			}

			makeIn(t, root, append([]string{"uninstall"}, args...)...)
			if left := installedFiles(t, dest); len(left) > 0 {
				t.Errorf("make uninstall left %v", left)
			}
		})
	}
}

// readmeCommands runs the README's commands with the installed binary
// found on PATH (and no bin/ of the source tree there).
func readmeCommands(t *testing.T, bindir string) {
	t.Helper()
	dir := t.TempDir()
	pool, mnt, src := filepath.Join(dir, "pool"), filepath.Join(dir, "mnt"), filepath.Join(dir, "weights.bin")
	must(t, os.Mkdir(mnt, 0o755))
	must(t, os.WriteFile(src, []byte(strings.Repeat("weights ", 1<<17)), 0o644))
	env := []string{"PATH=" + bindir + ":/usr/sbin:/usr/bin:/sbin:/bin"}
	sh := func(script string) string {
		t.Helper()
		out, code := runCmd(t, env, "sh", "-c", script, "sh", pool, mnt, src, filepath.Join(dir, "log"))
		if code != 0 {
			t.Fatalf("sh -c %q: exit %d\n%s", script, code, out)
		}
		return out
	}
	if got := sh(`command -v dnnfs`); strings.TrimSpace(got) != filepath.Join(bindir, "dnnfs") {
		t.Fatalf("dnnfs on PATH is %q, want the installed one", got)
	}
	sh(`dnnfs version && dnnfs mkfs --pool "$1" --size 64MiB && dnnfs mount --pool "$1" "$2" --log-file "$4"`)
	pid := daemonServing(t, pool, mnt)
	sh(`dnnfs cp "$3" "$2/weights.bin" && cmp "$3" "$2/weights.bin" && dnnfs status "$2" >/dev/null && umount "$2"`)
	waitGone(t, pid)
	sh(`dnnfs fsck --pool "$1"`)
}

// verifyUnit runs systemd-analyze verify on the unit as an instance (where
// systemd is installed): a unit systemd would reject fails the test. The
// binary it names is under DESTDIR, not where the unit says: that one
// complaint is expected.
func verifyUnit(t *testing.T, unit string) {
	t.Helper()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Log("no systemd-analyze: the unit file is not verified")
		return
	}
	p := filepath.Join(t.TempDir(), "dnnfs@mnt-params.service")
	must(t, os.WriteFile(p, []byte(unit), 0o644))
	out, _ := runCmd(t, nil, "systemd-analyze", "verify", p)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" && !strings.Contains(line, "is not executable") {
			t.Errorf("systemd-analyze verify: %s", line)
		}
	}
}
