package e2e_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// POSIX ACLs through a real mount, against tmpfs (which has them), with
// setfacl/getfacl from Debian's acl package.

// shell runs script with sh in dir as root and returns its combined
// output (commands that are meant to fail print their errors there).
func shell(t *testing.T, dir, script string) string {
	t.Helper()
	for _, tool := range []string{"setfacl", "getfacl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is missing: install Debian's acl package (make deps)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "LANG=C"}
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("script in %s: %v\n%s", dir, ctx.Err(), out)
	}
	_ = err // the last command's status; the output says what matters
	return string(out)
}

// compareLines fails t at the first lines where got and want differ.
func compareLines(t *testing.T, what, want, got string) {
	t.Helper()
	if want == got {
		return
	}
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < max(len(w), len(g)); i++ {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			t.Errorf("%s: line %d: dnnfs %q, tmpfs %q", what, i+1, b, a)
		}
	}
	t.Logf("%s on tmpfs:\n%s\non dnnfs:\n%s", what, want, got)
}

// lsx prints each file's xattr names: an ACL that the mode says all
// about is not stored (as on ext4 and tmpfs).
const lsx = `/usr/bin/python3 -c 'import os,sys
for p in sys.argv[1:]: print(p, sorted(os.listxattr(p, follow_symlinks=False)))' `

const aclScript = `umask 022
touch f; setfacl -m g::rwx,o::- f; getfacl f; stat -c '%A %n' f
setfacl -m u:65534:r f; getfacl f; stat -c '%A %n' f
chmod 640 f; getfacl f; stat -c '%A %n' f
chmod 755 f; getfacl f
setfacl -m m::rw f; stat -c '%A %n' f
touch e; setfacl -m u::rwx,g::r,o::r e; stat -c '%A %n' e
setfacl -b f; getfacl f; stat -c '%A %n' f
mkdir d; setfacl -d -m g::rwx,u:65534:rx d; getfacl d
touch d/x; mkdir d/sub; mknod d/fifo p; ln -s x d/sl; mkdir d/sub/deeper
getfacl d/x d/sub d/fifo d/sub/deeper; stat -c '%A %n' d/x d/sub d/fifo d/sl d/sub/deeper
/usr/bin/python3 -c 'import os; fd=os.open("d", os.O_TMPFILE|os.O_WRONLY, 0o666); print("tmpfile", oct(os.fstat(fd).st_mode))'
umask 077; touch d/u077 nodef077; mkdir d/u077d; stat -c '%A %n' d/u077 d/u077d nodef077; umask 022
mkdir d2; setfacl -d -m u::rwx,g::r-x,o::r-x d2; touch d2/x; mkdir d2/y; stat -c '%A %n' d2/x d2/y
setfacl -x u:65534 d/x; getfacl d/x; stat -c '%A %n' d/x
setfacl -k d; touch d/y; getfacl d/y; stat -c '%A %n' d/y
setfacl -m m::r d/sub; stat -c '%A %n' d/sub
setfacl -d -m u::r f
setfacl -m u:65534:rw d/fifo; getfacl d/fifo
` + lsx + `f e d d/x d/sub d/fifo d/sl d/sub/deeper d/u077 d/u077d d2 d2/x d2/y d/y
`

// aclListing is every file's ACLs (symlinks have none), in name order.
const aclListing = `find . ! -type l | sort | xargs getfacl; find . | sort | xargs stat -c '%A %n'`

// TestACLMatchesTmpfs: setting, showing and removing access and default
// ACLs, the mode's group bits following the mask, chmod rewriting the
// ACL, inheritance by files, directories, FIFOs and O_TMPFILE files
// (umask ignored under a default ACL), all as on tmpfs; and the same
// ACLs after a remount.
func TestACLMatchesTmpfs(t *testing.T) {
	t.Parallel()
	ref := tmpfsDir(t)
	want := shell(t, ref, aclScript)
	for _, guard := range []string{"group::rwx\tmask::rwx", "-rw-rwx--- f", "default:user:nobody:r-x", "-rw-rw-r-- d/x", "d/sub ['system.posix_acl_access', 'system.posix_acl_default']", "e []"} {
		if !strings.Contains(strings.ReplaceAll(want, "\n", "\t"), guard) {
			t.Fatalf("tmpfs reference lacks %q:\n%s", guard, want)
		}
	}
	fs := newFS(t, "32MiB")
	got := shell(t, fs.Mnt, aclScript)
	compareLines(t, "ACL script", want, got)
	wantList := shell(t, ref, aclListing)
	compareLines(t, "ACLs", wantList, shell(t, fs.Mnt, aclListing))
	fs.Unmount(t)
	fs = fs.Remount(t)
	compareLines(t, "ACLs after remount", wantList, shell(t, fs.Mnt, aclListing))
}

// aclFixture builds, as root, files and directories whose ACLs grant or
// deny uid 65534 (and group 100) what their modes would not.
func aclFixture(t *testing.T, top string) {
	t.Helper()
	must(t, os.Mkdir(top, 0o755))
	must(t, os.Chmod(top, 0o755))
	out := shell(t, top, `set -e
umask 022
for f in f600 f644deny f600g100 fmask fnobody; do echo data > $f; done
chmod 600 f600 f600g100 fmask fnobody
setfacl -m u:65534:r f600
setfacl -m u:65534:- f644deny
setfacl -m g:100:rw f600g100
setfacl -m u:65534:rw,m::r fmask
chown 65534:65534 fnobody; setfacl -m u:65534:-,o::- fnobody
mkdir d700acl d755deny ddef
chmod 700 d700acl
setfacl -m u:65534:rwx d700acl
setfacl -m u:65534:- d755deny
chmod 700 ddef
setfacl -m u:65534:rwx ddef
setfacl -d -m u:65534:rwx,g::-,o::- ddef
echo ok`)
	if !strings.HasSuffix(out, "ok\n") {
		t.Fatalf("ACL fixture in %s:\n%s", top, out)
	}
}

const aclProbeScript = `read f600
write f600
access f600 r
access f600 w
read f644deny
read f600g100
write f600g100
read fmask
write fmask
read fnobody
ls d700acl
create d700acl/new 644
stat d700acl/new
ls d755deny
create ddef/new 666
stat ddef/new
mkdir ddef/sub 777
stat ddef/sub
read ddef/new
`

// aclReadScript reads what aclProbeScript left, changing nothing.
const aclReadScript = `read f600
write f600
read f644deny
read f600g100
write fmask
read fnobody
ls d700acl
ls d755deny
stat ddef/new
read ddef/new
`

// TestACLEnforced: the kernel grants and denies uid 65534 by named user,
// named group and mask entries as on tmpfs, new files under a default
// ACL get it, and the ACLs still hold after a remount.
func TestACLEnforced(t *testing.T) {
	t.Parallel()
	probers := []prober{nobodyProber, nobody100}
	tmp := tmpfsDir(t)
	makeReachable(t, filepath.Join(tmp, "x"))
	fs := newFS(t, "32MiB", "--allow-other")
	makeReachable(t, fs.Mnt)
	for i, p := range probers {
		ref, top := filepath.Join(tmp, fmt.Sprint(i)), fs.Path(fmt.Sprint(i))
		aclFixture(t, ref)
		aclFixture(t, top)
		want := probe(t, p, ref, aclProbeScript)
		if i == 0 {
			wantProbe(t, want, "read f600 => OK 5")
			wantProbe(t, want, "read f644deny => EACCES")
			wantProbe(t, want, "write fmask => EACCES")
			wantProbe(t, want, "create d700acl/new 644 => OK")
		}
		compareProbes(t, p.name, want, probe(t, p, top, aclProbeScript))
	}
	want := make([][]string, len(probers))
	for i, p := range probers {
		want[i] = probe(t, p, filepath.Join(tmp, fmt.Sprint(i)), aclReadScript)
	}
	fs.Unmount(t)
	fs = fs.Remount(t)
	for i, p := range probers {
		compareProbes(t, p.name+" after remount", want[i], probe(t, p, fs.Path(fmt.Sprint(i)), aclReadScript))
	}
}

// TestACLSetgidCleared: setting an access ACL clears setgid when the
// caller is neither in the file's group nor has CAP_FSETID
// (posix_acl_update_mode), whether or not the ACL is stored.
func TestACLSetgidCleared(t *testing.T) {
	t.Parallel()
	const script = `setacl f u::rwx,g::rwx,o::r-x
stat f
setacl g u::rwx,u:0:r--,g::r-x,m::rwx,o::---
stat g
setacl d u::rwx,g::r-x,m::r-x,o::r-x
stat d
`
	fixture := func(top string) {
		must(t, os.Mkdir(top, 0o755))
		must(t, os.Chmod(top, 0o755))
		for _, f := range []string{"f", "g"} {
			writeFile(t, filepath.Join(top, f), nil, 0o600)
		}
		must(t, os.Mkdir(filepath.Join(top, "d"), 0o700))
		for _, f := range []string{"f", "g", "d"} {
			p := filepath.Join(top, f)
			must(t, os.Chown(p, 65534, 100))
			chmodNum(t, p, 0o2775)
		}
	}
	ref := tmpfsDir(t)
	makeReachable(t, filepath.Join(ref, "x"))
	fs := newFS(t, "32MiB", "--allow-other")
	makeReachable(t, fs.Mnt)
	for i, p := range setuidProbers {
		dirT, dirD := filepath.Join(ref, fmt.Sprint(i)), fs.Path(fmt.Sprint(i))
		fixture(dirT)
		fixture(dirD)
		want := probe(t, p, dirT, script)
		switch p.name {
		case nobodyProber.name:
			wantProbe(t, want, "stat f => OK mode=100775 uid=65534 gid=100")
		case nobody100.name:
			wantProbe(t, want, "stat f => OK mode=102775 uid=65534 gid=100")
		}
		compareProbes(t, p.name, want, probe(t, p, dirD, script))
	}
}
