// Command probe performs file-system operations read from stdin, one per
// line, and prints each line with its outcome, so a test can run the same
// script as another user on dnnfs and on tmpfs and compare the outputs.
//
// Usage: probe [-drop-fsetid] DIR < script
//
// Paths in the script are relative to DIR (a symlink's target is taken
// as given). -drop-fsetid removes
// CAP_FSETID from the effective set first (a root caller without it).
// Every operation runs on one locked OS thread: capabilities are
// per-thread.
//
// Script lines are "op arg...":
//
//	read P          open O_RDONLY and read
//	write P         open O_WRONLY|O_APPEND and write one byte
//	otrunc P        open O_WRONLY|O_TRUNC
//	trunc P N       truncate(2) to N bytes
//	falloc P N      fallocate(2) mode 0, N bytes at 0
//	exec P          execve P (a script) and wait
//	access P MODE   access(2) with MODE r, w, x or rwx
//	stat P          lstat; prints mode (octal), uid and gid
//	ls P            readdir; prints the number of entries
//	create P MODE   open O_CREAT|O_EXCL with MODE (octal)
//	mkdir P MODE    mkdir with MODE (octal)
//	unlink P        unlink
//	rmdir P         rmdir
//	rename A B      rename
//	link A B        hard link
//	symlink T P     symlink
//	chmod P MODE    chmod to MODE (octal)
//	chown P U G     chown (-1 leaves one unchanged)
//	touch P         utimensat(UTIME_NOW, UTIME_NOW)
//	utimes P SEC    utimensat with atime = mtime = SEC
//	setxattr P N    setxattr name N
//	getxattr P N    getxattr name N
//	setacl P ACL    set the access ACL, e.g. u::rw-,u:65534:r--,g::r--,m::r--,o::---
//	                (entries in the kernel's order), as setfacl does
//
// Output: the line, " => ", then "OK[ info]" or the errno's name.
package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

func main() {
	runtime.LockOSThread() // never unlocked: credentials are per thread
	args := os.Args[1:]
	drop := false
	if len(args) > 0 && args[0] == "-drop-fsetid" {
		drop, args = true, args[1:]
	}
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: probe [-drop-fsetid] DIR < script")
		os.Exit(2)
	}
	if drop {
		if err := dropFsetid(); err != nil {
			fmt.Fprintln(os.Stderr, "probe: dropping CAP_FSETID:", err)
			os.Exit(2)
		}
	}
	dir := args[0]
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	s := bufio.NewScanner(os.Stdin)
	for s.Scan() {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		info, err := run(dir, strings.Fields(line))
		switch {
		case err != nil:
			fmt.Fprintf(out, "%s => %s\n", line, errName(err))
		case info != "":
			fmt.Fprintf(out, "%s => OK %s\n", line, info)
		default:
			fmt.Fprintf(out, "%s => OK\n", line)
		}
	}
}

func dropFsetid() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Effective &^= 1 << unix.CAP_FSETID
	return unix.Capset(&hdr, &data[0])
}

func errName(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		if n := unix.ErrnoName(e); n != "" {
			return n
		}
		return fmt.Sprintf("errno %d", int(e))
	}
	return "error " + err.Error()
}

func octal(s string) (uint32, error) {
	v, err := strconv.ParseUint(s, 8, 32)
	return uint32(v), err
}

func run(dir string, f []string) (string, error) {
	need := map[string]int{"read": 2, "write": 2, "otrunc": 2, "trunc": 3, "falloc": 3, "exec": 2,
		"access": 3, "stat": 2, "ls": 2, "create": 3, "mkdir": 3, "unlink": 2, "rmdir": 2, "rename": 3,
		"link": 3, "symlink": 3, "chmod": 3, "chown": 4, "touch": 2, "utimes": 3, "setxattr": 3, "getxattr": 3, "setacl": 3}
	if n, ok := need[f[0]]; !ok || len(f) != n {
		return "", fmt.Errorf("bad script line %q", strings.Join(f, " "))
	}
	p := filepath.Join(dir, f[1])
	switch opGroup[f[0]] {
	case "data":
		return runData(p, f)
	case "names":
		return runNames(dir, p, f)
	default:
		return runAttrs(p, f)
	}
}

// opGroup sorts the script's ops into run's three groups.
var opGroup = map[string]string{
	"read": "data", "write": "data", "otrunc": "data", "trunc": "data", "falloc": "data", "exec": "data",
	"access": "names", "stat": "names", "ls": "names", "create": "names", "mkdir": "names", "unlink": "names", "rmdir": "names", "rename": "names", "link": "names", "symlink": "names",
	"chmod": "attrs", "chown": "attrs", "touch": "attrs", "utimes": "attrs", "setxattr": "attrs", "setacl": "attrs", "getxattr": "attrs",
}

// runData runs the data ops: read, write, truncate, allocate, execute.
func runData(p string, f []string) (string, error) {
	switch f[0] {
	case "read":
		fd, err := unix.Open(p, unix.O_RDONLY, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		buf := make([]byte, 4096)
		n, err := unix.Read(fd, buf)
		return strconv.Itoa(n), err
	case "write":
		fd, err := unix.Open(p, unix.O_WRONLY|unix.O_APPEND, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		_, err = unix.Write(fd, []byte("w"))
		return "", err
	case "otrunc":
		fd, err := unix.Open(p, unix.O_WRONLY|unix.O_TRUNC, 0)
		if err != nil {
			return "", err
		}
		return "", unix.Close(fd)
	case "trunc":
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return "", err
		}
		return "", unix.Truncate(p, n)
	case "falloc":
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return "", err
		}
		fd, err := unix.Open(p, unix.O_WRONLY, 0)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		return "", unix.Fallocate(fd, 0, 0, n)
	case "exec":
		cmd := exec.Command(p)
		err := cmd.Run()
		var pe *os.PathError
		if errors.As(err, &pe) {
			return "", pe.Err
		}
		return "", err
	}
	return "", fmt.Errorf("unknown op %q", f[0])
}

// runNames runs the namespace ops: look up, list, create, remove, rename, link.
func runNames(dir, p string, f []string) (string, error) {
	switch f[0] {
	case "access":
		var m uint32
		for _, c := range f[2] {
			m |= map[rune]uint32{'r': unix.R_OK, 'w': unix.W_OK, 'x': unix.X_OK}[c]
		}
		return "", unix.Access(p, m)
	case "stat":
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return "", err
		}
		return fmt.Sprintf("mode=%o uid=%d gid=%d", st.Mode, st.Uid, st.Gid), nil
	case "ls":
		ents, err := os.ReadDir(p)
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return strconv.Itoa(len(ents)), err
	case "create":
		m, err := octal(f[2])
		if err != nil {
			return "", err
		}
		fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, m)
		if err != nil {
			return "", err
		}
		return "", unix.Close(fd)
	case "mkdir":
		m, err := octal(f[2])
		if err != nil {
			return "", err
		}
		return "", unix.Mkdir(p, m)
	case "unlink":
		return "", unix.Unlink(p)
	case "rmdir":
		return "", unix.Rmdir(p)
	case "rename":
		return "", unix.Rename(p, filepath.Join(dir, f[2]))
	case "link":
		return "", unix.Link(p, filepath.Join(dir, f[2]))
	case "symlink":
		return "", unix.Symlink(f[1], filepath.Join(dir, f[2]))
	}
	return "", fmt.Errorf("unknown op %q", f[0])
}

// runAttrs runs the attribute ops: modes, owners, times, xattrs, ACLs.
func runAttrs(p string, f []string) (string, error) {
	switch f[0] {
	case "chmod":
		m, err := octal(f[2])
		if err != nil {
			return "", err
		}
		return "", unix.Chmod(p, m)
	case "chown":
		u, err1 := strconv.Atoi(f[2])
		g, err2 := strconv.Atoi(f[3])
		if err := errors.Join(err1, err2); err != nil {
			return "", err
		}
		return "", unix.Lchown(p, u, g)
	case "touch":
		return "", unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}, 0)
	case "utimes":
		sec, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			return "", err
		}
		return "", unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{{Sec: sec}, {Sec: sec}}, 0)
	case "setxattr":
		return "", unix.Setxattr(p, f[2], []byte("v"), 0)
	case "setacl":
		v, err := aclXattr(f[2])
		if err != nil {
			return "", err
		}
		return "", unix.Setxattr(p, "system.posix_acl_access", v, 0)
	case "getxattr":
		buf := make([]byte, 64)
		n, err := unix.Getxattr(p, f[2], buf)
		if err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return "", fmt.Errorf("unknown op %q", f[0])
}

// aclXattr encodes an ACL like "u::rw-,u:65534:r--,g::r--,m::r--,o::---"
// in the kernel's xattr format: version 2, then per entry tag u16, perm
// u16 and id u32, little-endian.
func aclXattr(spec string) ([]byte, error) {
	b := []byte{2, 0, 0, 0}
	for _, e := range strings.Split(spec, ",") {
		parts := strings.Split(e, ":")
		if len(parts) != 3 || len(parts[2]) != 3 {
			return nil, fmt.Errorf("ACL entry %q: want TAG:ID:rwx", e)
		}
		id := uint32(0xffffffff)
		if parts[1] != "" {
			n, err := strconv.ParseUint(parts[1], 10, 32)
			if err != nil {
				return nil, fmt.Errorf("ACL entry %q: %v", e, err)
			}
			id = uint32(n)
		}
		var tag uint16
		switch {
		case parts[0] == "u" && parts[1] == "":
			tag = 0x01
		case parts[0] == "u":
			tag = 0x02
		case parts[0] == "g" && parts[1] == "":
			tag = 0x04
		case parts[0] == "g":
			tag = 0x08
		case parts[0] == "m":
			tag = 0x10
		case parts[0] == "o":
			tag = 0x20
		default:
			return nil, fmt.Errorf("ACL entry %q: unknown tag", e)
		}
		var perm uint16
		for i, c := range "rwx" {
			if parts[2][i] == byte(c) {
				perm |= 4 >> i
			}
		}
		b = append(b, byte(tag), byte(tag>>8), byte(perm), byte(perm>>8),
			byte(id), byte(id>>8), byte(id>>16), byte(id>>24))
	}
	return b, nil
}
