package core

import (
	"errors"
	"sync"
	"time"
)

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
// inodes are waiting to be freed, waits for one to be freed and runs it
// again. op must have changed nothing when it fails with ErrNoSpace.
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
		if !fs.hasOrphans() {
			return err
		}
		select {
		case <-wake:
		case <-time.After(noSpaceWait):
		}
	}
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
