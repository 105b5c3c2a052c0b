package main

// The mount(8) helper: `mount -t fuse.dnnfs POOL MNT -o OPTS` (and an fstab
// line of type fuse.dnnfs) runs /sbin/mount.fuse.dnnfs POOL MNT -o OPTS,
// which is this binary under another name. Without that link, mount(8)
// falls back to fuse3's mount.fuse, which runs `dnnfs POOL MNT -o OPTS`.
// Both become `dnnfs mount -o OPTS POOL MNT`, and every `dnnfs mount` flag
// is an option there: key=value or a bare boolean.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/pflag"

	"github.com/dnnfs/dnnfs/internal/kv"
)

// mountHelperArgs rewrites a mount(8) helper invocation into the
// equivalent `dnnfs mount` command line (argv[0] kept); any other command
// line is returned as it is. The helper convention (mount(8), "External
// helpers") is PROG SPEC DIR [-sfnv] [-N NS] [-o OPTS] [-t TYPE]: -f is a
// fake mount (nothing to do), -s, -n and -v change nothing here.
func mountHelperArgs(argv []string) []string {
	base := filepath.Base(argv[0])
	asHelper := strings.HasPrefix(base, "mount.")
	// fuse3's mount.fuse runs `TYPE SPEC DIR -o OPTS`: the first operand is
	// a pool path where a subcommand name (never containing a slash) goes.
	asFuseType := len(argv) > 2 && strings.Contains(argv[1], "/")
	if !asHelper && !asFuseType {
		return argv
	}
	out := []string{argv[0], "mount"}
	var operands []string
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-o" && i+1 < len(argv):
			out = append(out, "-o", argv[i+1])
			i++
		case strings.HasPrefix(a, "-o") && len(a) > 2:
			out = append(out, "-o", a[2:])
		case (a == "-t" || a == "-N") && i+1 < len(argv):
			if a == "-N" {
				fmt.Fprintf(os.Stderr, "%s: -N (mount in another namespace) is not supported\n", base)
				os.Exit(32) // mount(8): mount failure
			}
			i++ // the type: fuse.dnnfs, or dnnfs under mount.dnnfs
		case strings.HasPrefix(a, "-") && len(a) > 1:
			if strings.Contains(a, "f") {
				os.Exit(0) // mount -f: fake it, everything but the mount call
			}
		default:
			operands = append(operands, a)
		}
	}
	return append(out, operands...)
}

// genericOptions are mount(8)'s own options and those every file system
// accepts whose meaning is dnnfs's default (rw, dev, suid, exec, atime,
// async, default_permissions): accepted and ignored.
var genericOptions = map[string]bool{
	"defaults": true, "_netdev": true, "auto": true, "noauto": true, "nofail": true,
	"user": true, "users": true, "nouser": true, "owner": true, "group": true,
	"rw": true, "dev": true, "suid": true, "exec": true, "async": true, "atime": true,
	"diratime": true, "nodiratime": true, "default_permissions": true, "loud": true, "silent": true,
}

// ignoredKeys are options with a value that concern mount(8), not the
// file system: user=NAME is what mount(8) adds for a user's fstab mount.
var ignoredKeys = map[string]bool{
	"comment": true, "fsname": true, "subtype": true, "user": true, "users": true,
	"uhelper": true, "helper": true,
}

// optionAliases map mount(8) options to `dnnfs mount` flags.
var optionAliases = map[string]string{
	"ro":          "read-only=true",
	"noatime":     "atime=noatime",
	"relatime":    "atime=relatime",
	"strictatime": "atime=strictatime",
}

// extraOptions is what -o asked for besides flags.
type extraOptions struct {
	remount bool
	raw     []string // as given, for a remount
}

// applyMountOptions sets the flags of fl named by -o options (each a
// comma-separated list, split by internal/kv; a value containing commas
// simply follows its key, as in classes=128,512 or
// ssd=/nvme0:bw=800MiB/s,lat=90us). Unlike kv.Parse, an option may repeat
// (mount(8) appends to fstab's; the last wins) and may be bare. A flag
// given on the command line wins over the same -o option.
func applyMountOptions(fl *pflag.FlagSet, lists []string) (extraOptions, error) {
	mo := extraOptions{raw: lists}
	onCommandLine := map[string]bool{}
	fl.Visit(func(f *pflag.Flag) { onCommandLine[f.Name] = true })
	var opts []string
	for _, l := range lists {
		items, err := kv.List(l)
		if err != nil {
			return mo, usageError{fmt.Sprintf("-o %s: %v", l, err)}
		}
		for _, o := range items {
			if len(opts) > 0 && continuesValue(fl, opts[len(opts)-1], o) {
				opts[len(opts)-1] += "," + o
				continue
			}
			opts = append(opts, o)
		}
	}
	for _, o := range opts {
		// A remount's options are the mount's as mount(8) read them
		// (user_id=0,...): the kernel's to judge, not ours.
		if o == "remount" {
			mo.remount = true
			return mo, nil
		}
	}
	for _, o := range opts {
		key, val, hasVal := strings.Cut(o, "=")
		switch {
		case o == "" || genericOptions[o] || strings.HasPrefix(key, "x-") || ignoredKeys[key]:
			continue
		case optionAliases[o] != "":
			key, val, hasVal = strings.Cut(optionAliases[o], "=")
		}
		key = strings.ReplaceAll(key, "_", "-")
		f := fl.Lookup(key)
		if f == nil || key == "options" || key == "help" {
			return mo, usageError{fmt.Sprintf("-o %s: not a dnnfs mount option (every `dnnfs mount --FLAG` is one, as FLAG or FLAG=VALUE)", o)}
		}
		if onCommandLine[key] && f.Value.Type() != "stringArray" {
			continue // the command line wins
		}
		if !hasVal {
			if f.Value.Type() != "bool" {
				return mo, usageError{fmt.Sprintf("-o %s: needs a value (%s=VALUE)", o, key)}
			}
			val = "true"
		}
		if err := fl.Set(key, val); err != nil {
			return mo, usageError{fmt.Sprintf("-o %s: %v", o, err)}
		}
	}
	return mo, nil
}

// continuesValue reports whether piece, the text after a comma, belongs to
// the value of prev (key=value of a flag taking a value) rather than being
// an option of its own.
func continuesValue(fl *pflag.FlagSet, prev, piece string) bool {
	key, _, hasVal := strings.Cut(prev, "=")
	if !hasVal {
		return false
	}
	if f := fl.Lookup(strings.ReplaceAll(key, "_", "-")); f == nil || f.Value.Type() == "bool" {
		return false
	}
	pk, _, _ := strings.Cut(piece, "=")
	known := genericOptions[piece] || optionAliases[piece] != "" || piece == "remount" ||
		strings.HasPrefix(pk, "x-") || ignoredKeys[pk] ||
		fl.Lookup(strings.ReplaceAll(pk, "_", "-")) != nil
	return !known
}

// mountOperands returns the mount point, taking the pool from the first
// operand when --pool was not given (the `mount -t` form POOL MNT).
func mountOperands(fl *pflag.FlagSet, pool *string) (string, error) {
	switch {
	case fl.NArg() == 2 && *pool == "":
		*pool = fl.Arg(0)
		return fl.Arg(1), nil
	case fl.NArg() == 2:
		return "", usageError{"want one MOUNTPOINT with --pool, or POOL MOUNTPOINT without it"}
	case *pool == "":
		return "", usageError{"--pool is required (or give POOL MOUNTPOINT)"}
	case fl.NArg() != 1:
		return "", usageError{"want exactly one MOUNTPOINT argument"}
	}
	return fl.Arg(0), nil
}

// remount hands `-o remount,...` to the kernel: the daemon serving mnt
// keeps running, and the VFS applies ro/rw and the atime flags (mount -i:
// no helper, or this would start a second daemon).
func remount(mnt string, mo extraOptions) error {
	// mount(8) runs its helpers with no PATH.
	prog := "mount"
	for _, p := range []string{"/usr/bin/mount", "/bin/mount"} {
		if _, err := os.Stat(p); err == nil {
			prog = p
			break
		}
	}
	cmd := exec.Command(prog, "-i", "-o", strings.Join(mo.raw, ","), mnt)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 {
			return exitError{code: ee.ExitCode()} // mount(8) said why
		}
		return fmt.Errorf("remount %s: %w", mnt, err)
	}
	return nil
}
