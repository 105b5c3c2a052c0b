package core

import (
	"errors"
	"sync"
	"time"
)

// A Reclaimer gives pool space back on demand when an allocation fails:
// the cluster's cache of chunks that S3 also has (DESIGN.md §Cluster, the
// pool as a cache). It returns whether it freed anything. It runs with no
// lock of the failed operation held and may take inode locks itself.
type Reclaimer func() bool

// SetReclaimer installs r (nil: none) for RetryNoSpace.
func (fs *FS) SetReclaimer(r Reclaimer) {
	if r == nil {
		fs.reclaimer.Store(nil)
		return
	}
	fs.reclaimer.Store(&r)
}

// The kernel sends FORGET for an unlinked file after unlink(2) has
// returned, and the inode's space comes back only then (KernelForget). A
// job that deletes an old checkpoint and at once writes a new one into a
// nearly full pool would otherwise see ENOSPC for space that is on its
// way back. Like ext4's ext4_should_retry_alloc, which commits the journal
// to release freed blocks before giving up, an allocation that fails
// while unlinked inodes are pending waits for them and tries again.

// broadcaster wakes every waiter at once each time it fires.
type broadcaster struct {
	mu sync.Mutex
	ch chan struct{}
}

func (b *broadcaster) wait() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ch == nil {
		b.ch = make(chan struct{})
	}
	return b.ch
}

func (b *broadcaster) broadcast() {
	b.mu.Lock()
	if b.ch != nil {
		close(b.ch)
		b.ch = nil
	}
	b.mu.Unlock()
}

// noSpaceRetries bounds the retries; noSpaceWait bounds each wait for a
// free, so an orphan kept alive by an O_PATH descriptor delays an honest
// ENOSPC by at most noSpaceRetries × noSpaceWait.
const (
	noSpaceRetries = 3
	noSpaceWait    = 100 * time.Millisecond
)

// RetryNoSpace runs op and, while it fails with ErrNoSpace and unlinked
// inodes are waiting to be freed (or the Reclaimer frees space), waits for
// one to be freed and runs it again. op must have changed nothing when it fails with ErrNoSpace.
func (fs *FS) RetryNoSpace(op func() error) error {
	for i := 0; ; i++ {
		wake := fs.freed.wait()
		err := op()
		if !errors.Is(err, ErrNoSpace) || i == noSpaceRetries {
			return err
		}
		select {
		case <-wake: // an inode was freed since op started: try again now
			continue
		default:
		}
		if r := fs.reclaimer.Load(); r != nil && (*r)() {
			continue // cached data made room
		}
		if !fs.hasOrphans() {
			return err
		}
		select {
		case <-wake:
		case <-time.After(noSpaceWait):
		}
	}
}

// forgetWait bounds how long WaitForgets waits. A file unlinked longer
// ago than forgetRecent is not waited for: what keeps it is an open
// descriptor or a cached handle, not a RELEASE or FORGET on its way.
const (
	forgetWait   = 250 * time.Millisecond
	forgetRecent = time.Second
)

// WaitForgets returns once no file unlinked in the last second is still
// in use, or after forgetWait. The kernel sends the RELEASE of a closed
// file and the FORGET that frees an unlinked one asynchronously, after
// close(2) and unlink(2) have returned, and another server goroutine may
// serve a following statfs(2) first; Statfs waits here so that `rm f; df`
// shows the space free, as on a local file system. A file still open
// delays that statfs by forgetWait, once.
func (fs *FS) WaitForgets() {
	deadline := time.Now().Add(forgetWait)
	for {
		wake := fs.freed.wait()
		if fs.freeing.Load() == 0 && !fs.forgetPending() {
			return
		}
		select {
		case <-wake:
		case <-time.After(time.Until(deadline)):
			return
		}
	}
}

// forgetPending reports whether a recently unlinked inode is still in the
// table: in use, or about to be freed (freeIfUnused decided, freeInode
// not yet counted in fs.freeing).
func (fs *FS) forgetPending() bool {
	recent := time.Now().Add(-forgetRecent).UnixNano()
	for _, in := range fs.Inodes() {
		in.mu.Lock()
		pending := in.d.Nlink == 0 && in.d.Ctime >= recent
		in.mu.Unlock()
		if pending {
			return true
		}
	}
	return false
}

// hasOrphans reports whether an unlinked inode is still in use.
func (fs *FS) hasOrphans() bool {
	fs.imu.Lock()
	all := make([]*Inode, 0, len(fs.inodes))
	for _, in := range fs.inodes {
		all = append(all, in)
	}
	fs.imu.Unlock()
	for _, in := range all {
		in.mu.Lock()
		orphan := in.d.Nlink == 0
		in.mu.Unlock()
		if orphan {
			return true
		}
	}
	return false
}
