package core

import (
	"bytes"
	"os"
	"strconv"
	"strings"

	"github.com/dnnfs/dnnfs/format"
)

// Setuid and setgid bits and the group-execute bit they interact with.
const (
	modeSUID uint32 = 0o4000
	modeSGID uint32 = 0o2000
	modeXGRP uint32 = 0o0010
)

// cred is what the kernel's setuid/setgid rules ask about a caller.
type cred struct {
	fsetid bool     // CAP_FSETID in the effective set (or no process: see Caller)
	immut  bool     // CAP_LINUX_IMMUTABLE: may set or clear immutable and append-only
	gids   []uint32 // fsgid and supplementary groups
}

// Capability bits in /proc/PID/status CapEff.
const (
	capFsetid         = 1 << 4
	capLinuxImmutable = 1 << 9
)

// cred reads the caller's capabilities and groups from /proc/TID/status;
// nothing is cached, as a thread's credentials change at any time. The
// kernel and internal callers (TID 0) count as privileged: they keep the
// bits, as writeback of a shared mapping does on a local file system. A
// thread that is gone gets no privilege, only the request's group.
func (c Caller) cred() cred {
	if c.TID == 0 {
		return cred{fsetid: true, immut: true}
	}
	cr := cred{gids: []uint32{c.GID}}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(c.TID), 10) + "/status")
	if err != nil {
		return cr
	}
	if v, ok := statusField(b, "CapEff:"); ok {
		if x, err := strconv.ParseUint(v, 16, 64); err == nil {
			cr.fsetid = x&capFsetid != 0
			cr.immut = x&capLinuxImmutable != 0
		}
	}
	if v, ok := statusField(b, "Gid:"); ok && c.GID == NoID {
		// A request with no ids (NoID): the thread's fsgid instead.
		if f := strings.Fields(v); len(f) == 4 {
			if g, err := strconv.ParseUint(f[3], 10, 32); err == nil {
				cr.gids[0] = uint32(g)
			}
		}
	}
	if v, ok := statusField(b, "Groups:"); ok {
		for _, f := range bytes.Fields([]byte(v)) {
			if g, err := strconv.ParseUint(string(f), 10, 32); err == nil {
				cr.gids = append(cr.gids, uint32(g))
			}
		}
	}
	return cr
}

// statusField returns the value of a "Key:\tvalue" line of /proc status.
func statusField(b []byte, key string) (string, bool) {
	i := bytes.Index(b, []byte("\n"+key))
	if i < 0 {
		return "", false
	}
	line := b[i+1+len(key):]
	if j := bytes.IndexByte(line, '\n'); j >= 0 {
		line = line[:j]
	}
	return string(bytes.TrimSpace(line)), true
}

func (cr cred) inGroup(gid uint32) bool {
	for _, g := range cr.gids {
		if g == gid {
			return true
		}
	}
	return false
}

// afterData is mode after a write, truncate or fallocate by cr, as the
// kernel's setattr_should_drop_suidgid decides on a local file system:
// a regular file loses setuid, and setgid when it is group-executable
// or cr is not in the file's group, unless cr has CAP_FSETID.
func (cr cred) afterData(mode, gid uint32) uint32 {
	if mode&format.ModeType != format.ModeReg || !hasPrivs(mode) || cr.fsetid {
		return mode
	}
	mode &^= modeSUID
	if mode&modeXGRP != 0 || !cr.inGroup(gid) {
		mode &^= modeSGID
	}
	return mode
}

// afterChown is mode after a chown by cr of a file whose group was gid
// (the kernel's chown_common): a non-directory always loses setuid, and
// setgid when it is group-executable or cr is neither in the group nor
// has CAP_FSETID.
func (cr cred) afterChown(mode, gid uint32) uint32 {
	if mode&format.ModeType == format.ModeDir {
		return mode
	}
	mode &^= modeSUID
	if mode&modeXGRP != 0 || !(cr.fsetid || cr.inGroup(gid)) {
		mode &^= modeSGID
	}
	return mode
}

// credLocked returns cl's credentials if need, else keepBits. What a
// change needs is known only under Inode.mu, where /proc is not read: a
// read drops and retakes in.mu, so the caller reads in's fields after
// it. Deciding from a read made before taking in.mu would miss a chmod
// in between and leave setuid on a file written by an unprivileged
// caller.
// Precondition: in.mu is held.
func credLocked(cl Caller, in *Inode, need bool) cred {
	if !need {
		return keepBits
	}
	in.mu.Unlock()
	defer in.mu.Lock()
	return cl.cred()
}

// keepBits is what credLocked returns when no credentials are needed:
// a cred that keeps every mode bit.
var keepBits = cred{fsetid: true}

// hasPrivs reports whether mode has setuid or setgid, which a data change
// or chown may clear.
func hasPrivs(mode uint32) bool { return mode&(modeSUID|modeSGID) != 0 }
