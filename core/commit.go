package core

import (
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

// DefaultCommitInterval is how often the committer commits the sizes and
// extents of files written without fsync (DESIGN.md §Delayed commit):
// the most such writes a crash can lose, as ext4's commit= default.
const DefaultCommitInterval = 5 * time.Second

// addPending hands in to the committer. Lock order: Inode.mu -> pmu.
func (fs *FS) addPending(in *Inode) {
	fs.pmu.Lock()
	defer fs.pmu.Unlock()
	if fs.pending == nil {
		fs.pending = map[*Inode]struct{}{}
	}
	fs.pending[in] = struct{}{}
	if fs.commitStop == nil && fs.commitInterval > 0 && !fs.closed.Load() {
		fs.commitStop, fs.commitDone = make(chan struct{}), make(chan struct{})
		go fs.committer(fs.commitStop, fs.commitDone)
	}
}

// committer commits delayed writes every commit interval until stop.
func (fs *FS) committer(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(fs.commitInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			_ = fs.CommitPending()
		}
	}
}

// stopCommitter ends the committer goroutine, if one runs, and waits.
func (fs *FS) stopCommitter() {
	fs.pmu.Lock()
	stop, done := fs.commitStop, fs.commitDone
	fs.commitStop = nil
	fs.pmu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}

// CommitPending commits the delayed size and extents of every file that
// has them, data first (DESIGN.md §Delayed commit). It returns the first
// error; a file that failed stays pending, logged at its first failure
// only (until a commit of it succeeds).
func (fs *FS) CommitPending() error {
	fs.pmu.Lock()
	list := make([]*Inode, 0, len(fs.pending))
	for in := range fs.pending {
		list = append(list, in)
	}
	fs.pmu.Unlock()
	// Several files at once: their flushes overlap, and their
	// transactions share journal batches (journal's group commit).
	var (
		wg    sync.WaitGroup
		emu   sync.Mutex
		first error
		sem   = make(chan struct{}, commitParallel)
	)
	for _, in := range list {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fs.commitPending(in); err != nil {
				emu.Lock()
				if first == nil {
					first = err
				}
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	fs.stats.Commits.Add(uint64(len(list))) // files visited (status: committed_by_interval)
	return first
}

// commitParallel bounds the files CommitPending commits at once.
const commitParallel = 8

// commitPending commits one file's delayed writes, if it still has any.
func (fs *FS) commitPending(in *Inode) error {
	in.preflush()
	in.mu.Lock()
	var err error
	if in.metaDirty && in.d.Nlink > 0 {
		c := fs.begin()
		c.putInode(in, in.d)
		err = c.commit()
	}
	logIt := err != nil && !in.commitFailed
	in.commitFailed = err != nil
	in.mu.Unlock()
	if logIt {
		fs.log.Error("committing a file's size and blocks failed; it stays as last committed on media until a commit succeeds (fsync reports the error; retried every commit interval)",
			zap.Uint64("ino", uint64(in.Ino)), zap.String("path", fs.PathOf(in)), zap.Error(err))
	}
	return err
}

// preflush writes back the file's dirty ranges without holding in.mu, so
// that writers of the file are not held up for the length of a big
// flush; the locked flush that follows (flushDataLocked) then finds the
// pages clean and is quick. It reports nothing: a failure here counts in
// the medium's write-back errors (pmem.WritebackErrors), which makes the
// locked flush fail every range dirty since before it (rule 7 of the
// durability contract). Media without that count are flushed only under
// the lock.
func (in *Inode) preflush() {
	if in.fs.wb == nil || in.fs.m.Kind() != pmem.Emulated {
		return
	}
	in.mu.Lock()
	ranges := in.dirty
	if in.allDirty {
		ranges = in.exts
	}
	ranges = slices.Clone(ranges)
	in.mu.Unlock()
	for _, g := range flushGroups(ranges, true) {
		_ = in.fs.m.Flush(int64(g.Phys.Off()), int64(g.Len*format.BlockSize))
	}
}

// PendingFiles is the number of files with writes not committed yet.
func (fs *FS) PendingFiles() int {
	fs.pmu.Lock()
	defer fs.pmu.Unlock()
	return len(fs.pending)
}
