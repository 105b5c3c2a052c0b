package crashimage_test

import (
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// sessTailInterval is the tail interval of the session sweep: small, so
// that the writes of a short script persist tails often.
const sessTailInterval = 16 << 10

// sessionScript runs write sessions through every way they end, with tree
// changes around them (DESIGN.md §Two-layer log). Read sessions are left
// to tests/sessioncrash: the tree snapshot reads every file, which would
// make a read session's progress itself. tests/sessioncrash also sweeps
// every fence of a session finishing, an abandon and a new session on the
// same file, with real threads; what it does not run is here: FinishSession,
// the abandons a truncate, a hole punch and an unlink stage, fsync and a
// clean unmount persisting tails, several sessions open at once, and all
// of it checked against the whole tree.
func sessionScript(x *ext) {
	const bs = format.BlockSize
	const chunk = 2 * bs
	s := x.s
	x.remount(core.Options{TailInterval: sessTailInterval, CommitInterval: -1})
	s.mkdir("/s")
	// a: a session over old bytes, finished by the admin with parts undone.
	s.create("/s/a", 0o644)
	s.write("/s/a", 0, 20000, 1)
	s.fsync("/s/a")
	x.start("/s/a", 4, 256<<10, 11)  // grows the file: holes filled, zeros
	for j := uint64(0); j < 5; j++ { // segment 0 in order: two tails persisted
		x.sw("/s/a", j*chunk, chunk)
	}
	x.sw("/s/a", 64<<10+chunk, chunk)    // segment 1 out of order: no progress yet
	x.sw("/s/a", 64<<10, chunk)          // now two chunks: one tail persisted
	x.sw("/s/a", 192<<10-chunk, 2*chunk) // straddles segments 2 and 3
	// b: a second session open at the same time, finished by completion.
	s.create("/s/b", 0o644)
	x.start("/s/b", 2, 64<<10, 12)
	x.sw("/s/a", 5*chunk, chunk)
	s.mkdir("/s/dir") // tree changes while sessions are open
	s.rename("/s/dir", "/s/dir2", 0, nil)
	for j := uint64(0); j < 16; j++ { // b's segments interleaved, backwards in segment 1
		off := (j / 2) * chunk
		if j%2 == 1 {
			off = 64<<10 - (j/2+1)*chunk
		}
		x.sw("/s/b", off, chunk)
	}
	s.fsync("/s/a")                                          // persists a's progress past the interval
	s.setxattr("/s/a", "user.job", []byte("resnet"), 0, nil) // xattr on a session file
	x.finish("/s/a")                                         // closed, finished, in every later image
	// c: a truncate abandons the session (the tails would skip lost bytes).
	s.create("/s/c", 0o644)
	x.start("/s/c", 3, 96<<10, 13)
	for j := uint64(0); j < 4; j++ {
		x.sw("/s/c", j*chunk, chunk)
	}
	x.breaks("/s/c")
	s.truncate("/s/c", 10000)
	// d: a hole punch abandons it too.
	s.create("/s/d", 0o644)
	x.start("/s/d", 2, 64<<10, 14)
	x.sw("/s/d", 0, 3*chunk)
	x.breaks("/s/d")
	s.fallocate("/s/d", bs, 2*bs, core.FallocPunchHole|core.FallocKeepSize)
	// e: abandoned on purpose, then a new session with another split.
	s.create("/s/e", 0o644)
	x.start("/s/e", 4, 64<<10, 15)
	x.sw("/s/e", 0, 3*chunk)
	x.sw("/s/e", 48<<10, chunk)
	x.abandon("/s/e")
	x.start("/s/e", 2, 48<<10, 16) // shrinks the file: blocks freed
	x.sw("/s/e", 24<<10, 3*chunk)
	// f: unlinked with its session open: the logs go with the inode.
	s.create("/s/f", 0o644)
	x.start("/s/f", 2, 32<<10, 17)
	x.sw("/s/f", 0, chunk)
	s.unlink("/s/f")
	// A clean unmount persists e's progress and keeps the session open;
	// after the mount, the job resumes and completes it.
	x.sw("/s/e", 0, chunk)
	x.remount(core.Options{TailInterval: sessTailInterval, CommitInterval: -1})
	for off := uint64(chunk); off < 24<<10; off += chunk {
		x.sw("/s/e", off, chunk)
	}
	for off := uint64(24<<10 + 3*chunk); off < 48<<10; off += chunk {
		x.sw("/s/e", off, chunk)
	}
	s.rmdir("/s/dir2", nil)
}

// TestFencesSessions checks every fence of sessionScript, and eviction
// images of each crash point (evict_test.go): each crash image reopens,
// shows the session state of the last step that had returned or of the
// one in flight, reports resume points that are neither behind the tails
// persisted before the crash nor past the bytes that are durable, and
// (fence-only images) never goes back from one fence to the next.
func TestFencesSessions(t *testing.T) {
	s := newScript(t, poolSize)
	x := newExt(s)
	sessionScript(x)
	x.close()
	verifyScript(t, s, nil)
	verifyEvictions(t, s, evictSubsets)
	t.Cleanup(func() { x.logChecks(t) })
}
