package core

import (
	"fmt"
	"time"

	"github.com/dnnfs/dnnfs/format"
)

// AtimeMode selects when reads update the access time, as the kernel's
// mount options of the same names do for local file systems. FUSE leaves
// atime to the daemon (its inodes are S_NOATIME), so the pool applies
// the rules itself.
type AtimeMode int

const (
	// AtimeRelative (relatime, the default): a read updates atime only
	// when it is not newer than mtime or ctime, or is 24 hours old.
	AtimeRelative AtimeMode = iota
	// AtimeNever (noatime): reads never update atime.
	AtimeNever
	// AtimeStrict (strictatime): every read updates atime.
	AtimeStrict
)

// ParseAtimeMode reads "relatime", "noatime" or "strictatime".
func ParseAtimeMode(s string) (AtimeMode, error) {
	switch s {
	case "relatime":
		return AtimeRelative, nil
	case "noatime":
		return AtimeNever, nil
	case "strictatime":
		return AtimeStrict, nil
	}
	return 0, fmt.Errorf("atime mode %q: want relatime, noatime or strictatime", s)
}

func (m AtimeMode) String() string {
	switch m {
	case AtimeNever:
		return "noatime"
	case AtimeStrict:
		return "strictatime"
	}
	return "relatime"
}

// relatimeAge is how old an atime relatime refreshes regardless.
const relatimeAge = int64(24 * time.Hour)

// needsAtime reports whether an access at now updates d's atime (the
// kernel's atime_needs_update with relatime_need_update).
func (m AtimeMode) needsAtime(d *format.Inode, now int64) bool {
	switch m {
	case AtimeNever:
		return false
	case AtimeRelative:
		if d.Atime > d.Mtime && d.Atime > d.Ctime && now-d.Atime < relatimeAge {
			return false
		}
	}
	return d.Atime != now
}

// touchAtimeLocked records an access to in. The new atime stays in DRAM
// (timesDirty) until the next transaction of the inode, fsync or
// unmount: a read never commits to the journal.
// Precondition: in.mu is held.
func (fs *FS) touchAtimeLocked(in *Inode) {
	if fs.atime == AtimeNever || in.d.Flags&format.InodeNoAtime != 0 {
		return
	}
	now := time.Now().UnixNano()
	if fs.atime.needsAtime(&in.d, now) {
		in.d.Atime = now
		in.timesDirty = true
	}
}

// Accessed records a read of in that is not a Read of its data: a
// directory listing, a symlink's target.
func (fs *FS) Accessed(in *Inode) {
	if fs.atime == AtimeNever {
		return
	}
	in.mu.Lock()
	fs.touchAtimeLocked(in)
	in.mu.Unlock()
}

// AtimeMode returns the mount's atime mode.
func (fs *FS) AtimeMode() AtimeMode { return fs.atime }
