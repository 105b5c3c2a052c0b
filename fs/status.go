package fs

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	"github.com/dnnfs/dnnfs/cluster"
	"github.com/dnnfs/dnnfs/embedding"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/internal/kv"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/lock"
)

// Virtual extended attributes: computed on read, never stored, not listed.
const (
	// XattrLocks on any file: its run and wait queues and lock counters.
	XattrLocks = "user.dnnfs.locks"
	// XattrStatus on the root: mount-wide counters and every file with
	// lock activity (what `dnnfs status MOUNTPOINT` prints).
	XattrStatus = "user.dnnfs.status"
	// XattrSession: set 'threads=N,size=BYTES[,mode=write|read]' to start
	// a segmented session, read it for its JSON state, remove it to
	// abandon the session.
	XattrSession = "user.dnnfs.session"
	// XattrWarmup on a file of a cluster mount: read it for the committed
	// version's chunks (cluster.WarmInfo), set 'chunk=N' to have chunk N
	// pulled into its home node's pool (dnnfs warmup).
	XattrWarmup = "user.dnnfs.warmup"
	// XattrAttach on a directory of a cluster mount: set
	// 's3://BUCKET/PREFIX' to name every object under it below the
	// directory, read-only (dnnfs attach).
	XattrAttach = "user.dnnfs.attach"
)

// parseSession reads 'threads=N,size=BYTES[,mode=write|read]'.
func parseSession(v string) (threads int, size uint64, mode uint32, err error) {
	mode = format.SessionWrite
	items, err := kv.Parse(v)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, it := range items {
		switch it.Key {
		case "threads":
			var n int64
			n, err = it.Int(1, math.MaxInt32)
			threads = int(n)
		case "size":
			var n int64
			n, err = it.Size()
			size = uint64(n)
		case "mode":
			switch it.Value {
			case "write":
				mode = format.SessionWrite
			case "read":
				mode = format.SessionRead
			default:
				err = it.Errorf("want write or read")
			}
		default:
			err = it.Unknown("threads", "size", "mode")
		}
		if err != nil {
			return 0, 0, 0, err
		}
	}
	if threads == 0 || size == 0 {
		return 0, 0, 0, fmt.Errorf("threads and size are required")
	}
	return threads, size, mode, nil
}

// LockJSON is one lock in a queue.
type LockJSON struct {
	TID          uint32 `json:"tid"`
	PID          uint32 `json:"pid"`
	Start        uint64 `json:"start"`
	End          uint64 `json:"end"` // exclusive; 0 with whole=true
	Whole        bool   `json:"whole"`
	Mode         string `json:"mode"`
	WaitingSince string `json:"waiting_since,omitempty"`
}

// LocksJSON is the value of user.dnnfs.locks.
type LocksJSON struct {
	Ino uint64 `json:"ino"`
	// Path is a path of the file from the mount's root, in
	// user.dnnfs.status only ("" there: deleted but still open).
	Path     string     `json:"path,omitempty"`
	LockMode string     `json:"lock_mode"`
	Run      []LockJSON `json:"run"`
	Wait     []LockJSON `json:"wait"`
	Stats    struct {
		Acquired    uint64 `json:"acquired"`
		Waits       uint64 `json:"waits"`
		WaitNanos   int64  `json:"wait_ns"`
		Interrupted uint64 `json:"interrupted"`
		MaxRunning  int    `json:"max_running"`
		MaxWrites   int    `json:"max_concurrent_writes"`
		MaxBypass   int    `json:"max_grants_while_whole_file_waited"`
	} `json:"stats"`
}

func locksJSON(p *core.FS, in *core.Inode) LocksJSON {
	run, wait, st := in.Locks()
	conv := func(ls []lock.LockInfo) []LockJSON {
		out := make([]LockJSON, 0, len(ls))
		for _, l := range ls {
			j := LockJSON{TID: l.TID, PID: l.PID, Start: l.Start, End: l.End, Mode: l.Mode.String()}
			if l.End == lock.Whole {
				j.End, j.Whole = 0, true
			}
			if !l.Since.IsZero() {
				j.WaitingSince = l.Since.UTC().Format(time.RFC3339Nano)
			}
			out = append(out, j)
		}
		return out
	}
	j := LocksJSON{Ino: uint64(in.Ino), LockMode: p.LockMode().String(), Run: conv(run), Wait: conv(wait)}
	j.Stats.Acquired, j.Stats.Waits, j.Stats.WaitNanos = st.Acquired, st.Waits, int64(st.WaitTime)
	j.Stats.Interrupted, j.Stats.MaxRunning, j.Stats.MaxWrites = st.Interrupted, st.MaxRunning, st.MaxExclusive
	j.Stats.MaxBypass = st.MaxBypass
	return j
}

// StatusJSON is the value of user.dnnfs.status.
type StatusJSON struct {
	LockMode string            `json:"lock_mode"`
	Counters map[string]uint64 `json:"counters"`
	Files    []LocksJSON       `json:"files"` // files with lock activity
	// Embedding is the SSD tier (scheduler classes, devices, moves);
	// absent without --ssd.
	Embedding *embedding.Status `json:"embedding,omitempty"`
	// Cluster is this node's cluster membership and fetch counters;
	// absent without --etcd.
	Cluster *cluster.Status `json:"cluster,omitempty"`
}

func statusJSON(p *core.FS, t *embedding.Tier, c *cluster.Node) StatusJSON {
	s := StatusJSON{LockMode: p.LockMode().String(), Counters: p.StatsSnapshot(), Files: []LocksJSON{}, Cluster: c.Status()}
	if t != nil {
		st := t.Status()
		s.Embedding = &st
	}
	for _, in := range p.Inodes() {
		if in.IsDir() {
			continue
		}
		j := locksJSON(p, in)
		if j.Stats.Acquired > 0 || len(j.Wait) > 0 {
			s.Files = append(s.Files, j)
		}
	}
	want := make(map[core.Ino]bool, len(s.Files))
	for _, f := range s.Files {
		want[core.Ino(f.Ino)] = true
	}
	paths := p.PathsOf(want)
	for i := range s.Files {
		s.Files[i].Path = paths[core.Ino(s.Files[i].Ino)]
	}
	return s
}

// virtualXattr returns the value of a virtual attribute.
func (n *node) virtualXattr(name string) ([]byte, bool) {
	var v any
	switch {
	case name == XattrLocks && !n.in.IsDir():
		v = locksJSON(n.p, n.in)
	case name == XattrStatus && n.in.Ino == n.p.Root().Ino:
		v = statusJSON(n.p, n.opts.Tier, n.opts.Cluster)
	case name == XattrTable:
		return n.tableXattr()
	case name == XattrShards && n.in.IsTable() && n.opts.Tier != nil:
		tb, ok := n.opts.Tier.Table(n.in)
		if !ok {
			return nil, false
		}
		v = tb.Shards()
	case name == XattrWarmup && n.opts.Cluster != nil && !n.in.IsDir():
		info, err := n.opts.Cluster.WarmInfo(context.Background(), n.in)
		if err != nil {
			return nil, false
		}
		v = info
	case name == XattrSession && !n.in.IsDir():
		info, ok := n.p.Session(n.in)
		if !ok {
			return nil, false
		}
		v = info
	default:
		return nil, false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	return b, true
}
