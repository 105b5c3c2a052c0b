package core

import (
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/alloc"
	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/lock"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

// Ino etc. re-exported for callers.
type (
	Ino = format.Ino
	Blk = format.Blk
)

// FS is a mounted pool.
type FS struct {
	m   pmem.Medium
	sb  format.Superblock
	j   *journal.Journal
	log *zap.Logger

	nsMu sync.Mutex // namespace changes, one at a time; above every Inode.mu (DESIGN.md §Lock order)

	imu     sync.Mutex // guards inodes, freeIno and retired (genSeq changes under it and nsMu); under Inode.mu
	inodes  map[Ino]*Inode
	freeIno []Ino // free slots, lowest last (popped first)
	genSeq  uint64

	alloc   *alloc.Map           // free blocks, rebuilt at every mount by recovery.Mount; never on media
	reserve uint64               // blocks only space-freeing changes may take (DESIGN.md §Metadata reserve)
	zero    []byte               // read-only zeros served for holes
	wb      pmem.WritebackErrors // the medium's, or nil

	lockMode     LockMode
	atime        AtimeMode
	tgids        tgidCache
	tailInterval uint64

	tierMu   sync.Mutex // the SSD-tier registry block (UpdateRegistry); taken with no other core lock, journal and alloc locks under it (DESIGN.md §Lock order)
	extFreed ExtFreed   // see SetExtFreed

	// Delayed commit (commit.go): inodes with writes not committed yet.
	pmu            sync.Mutex // guards pending; taken with Inode.mu held, nothing under it (DESIGN.md §Lock order)
	pending        map[*Inode]struct{}
	commitInterval time.Duration
	commitStop     chan struct{}
	commitDone     chan struct{}

	warm warmer // freed blocks kept unpunched (warm.go)

	freed     broadcaster               // signalled after each inode is freed (see RetryNoSpace)
	reclaimer atomic.Pointer[Reclaimer] // SetReclaimer; nil: none
	freeing   atomic.Int32              // freeInode calls in progress (see WaitForgets)
	closed    atomic.Bool
	stamped   bool // marked mounted (Stamp); Close marks clean only then
	// Counters for status.
	stats Stats
	// retired: lock counters of freed inodes (under imu; see LockTotals).
	retired lock.Stats
}

// Stats are counters for `dnnfs status`.
type Stats struct {
	Reads, Writes         atomic.Uint64
	ReadBytes, WriteBytes atomic.Uint64
	Fsyncs                atomic.Uint64
	Commits               atomic.Uint64 // delayed writes committed by the committer (files)
}

// Options for Open.
type Options struct {
	Log      *zap.Logger
	LockMode LockMode
	// TailInterval is the progress (bytes) between persisted session tails;
	// 0 means DefaultTailInterval.
	TailInterval uint64
	// Atime says when reads update access times (default relatime).
	Atime AtimeMode
	// DeferStamp: Open does not mark the pool mounted; the caller calls
	// Stamp before anything can change it (before serving). A clean pool
	// is then not written at all until Stamp, so a mount that fails after
	// Open (SSD tier, FUSE mount) leaves it byte-identical.
	DeferStamp bool
	// NoReserve turns the metadata reserve off (DESIGN.md §Metadata
	// reserve): for tests that fill a pool block by block.
	NoReserve bool
	// CommitInterval: how often writes that allocate or extend a file
	// are committed without an fsync (DESIGN.md §Delayed commit); 0
	// means DefaultCommitInterval, negative never (fsync, metadata
	// changes of the file and Close still commit them).
	CommitInterval time.Duration
	// WarmBytes caps the freed blocks an emulated pool keeps unpunched
	// for reuse (DESIGN.md §Warm blocks); 0 means DefaultWarmBytes of the
	// pool, negative none (every freed block is punched at once).
	WarmBytes int64
	// WarmDecay is how long a warm block stays unpunched unused; 0 means
	// DefaultWarmDecay.
	WarmDecay time.Duration
}

// MountReport says what Open found and did.
type MountReport struct {
	WasClean       bool
	ReplayedRecs   int
	OrphansFreed   int
	ReplicaUsed    bool // the primary superblock was bad; the replica was used and copied back
	SessionsOpen   int  // segmented sessions left open (resumable)
	SessionsClosed int  // sessions whose segments had all finished, closed by recovery
	Inodes         int
	UsedBlocks     uint64
	FreeBlocks     uint64
	PrimarySBError error
}

// Format writes an empty file system onto m. uid and gid own the root.
func Format(m pmem.Medium, uid, gid uint32) error {
	return FormatProgress(m, uid, gid, nil)
}

// Progress is told how far a long operation is: done of total units
// (bytes, or steps) of the step named.
type Progress func(step string, done, total int64)

// formatChunk is how much of the metadata regions Format clears between
// two progress reports (on a DAX device it stores and flushes every byte).
const formatChunk = 64 << 20

// FormatProgress is Format telling progress (nil: nothing) as it clears
// the metadata regions, the long part on a DAX device or a big pool.
func FormatProgress(m pmem.Medium, uid, gid uint32, progress Progress) error {
	return formatChunks(m, uid, gid, progress, formatChunk)
}

// formatChunks is FormatProgress clearing chunk bytes between reports.
func formatChunks(m pmem.Medium, uid, gid uint32, progress Progress, chunk int64) error {
	if progress == nil {
		progress = func(string, int64, int64) {}
	}
	sb, err := format.Geometry(m.Size())
	if err != nil {
		return fmt.Errorf("%w: %v", pmem.ErrTooSmall, err)
	}
	if _, err := rand.Read(sb.UUID[:]); err != nil {
		return err
	}
	now := time.Now().UnixNano()
	sb.Created = now
	b := m.Bytes()
	// Invalidate the superblocks first: a crash during mkfs leaves "not a pool".
	clear(b[:2*format.BlockSize])
	if err := m.Persist(0, 2*format.BlockSize); err != nil {
		return ioErr("clearing the superblocks", err)
	}
	// Metadata regions start out zero (free inodes). Data needs no clearing.
	metaOff, metaLen := int64(sb.JournalStart.Off()), int64(sb.DataStart.Off()-sb.JournalStart.Off())
	for done := int64(0); done < metaLen; {
		progress("clearing metadata", done, metaLen)
		n := min(chunk, metaLen-done)
		if err := zeroRange(m, metaOff+done, n); err != nil {
			return ioErr("clearing the metadata regions", err)
		}
		done += n
	}
	progress("clearing metadata", metaLen, metaLen)
	// On a sparse pool file, back the metadata regions now: a store into a
	// hole of a full disk would kill the daemon with SIGBUS.
	if err := m.Fallocate(metaOff, metaLen); err != nil {
		if errors.Is(err, pmem.ErrNoSpace) {
			return fmt.Errorf("reserving %d bytes of metadata in the pool file: %w: %v", metaLen, ErrNoSpace, err)
		}
		return fmt.Errorf("reserving %d bytes of metadata in the pool file: %w", metaLen, err)
	}
	if err := journal.Format(m, &sb); err != nil {
		return ioErr("formatting", err)
	}
	root := format.Inode{Mode: format.ModeDir | 0o755, UID: uid, GID: gid, Nlink: 2, Gen: 1,
		Atime: now, Mtime: now, Ctime: now, Btime: now}
	off := sb.InodeOff(format.RootIno)
	root.Encode(b[off : off+format.InodeSize])
	if err := m.Persist(int64(off), format.InodeSize); err != nil {
		return ioErr("writing the root inode", err)
	}
	sb.State = format.StateClean
	sb.Encode(b[format.SuperReplica.Off():])
	if err := m.Persist(int64(format.SuperReplica.Off()), format.SuperSize); err != nil {
		return ioErr("writing the replica superblock", err)
	}
	sb.Encode(b[format.SuperPrimary.Off():])
	if err := m.Persist(int64(format.SuperPrimary.Off()), format.SuperSize); err != nil {
		return ioErr("writing the primary superblock", err)
	}
	return nil
}

// zeroRange makes [off, off+n) read as zero and durable (pmem.Medium.Punch:
// cheap on media that can punch holes).
func zeroRange(m pmem.Medium, off, n int64) error {
	return m.Punch(off, n)
}

// materialize backs blocks [b, b+n) of a sparse pool file before metadata
// is stored into them through the mapping, turning a full disk into
// ErrNoSpace instead of SIGBUS.
func (fs *FS) materialize(b Blk, n uint64) error {
	if err := fs.m.Fallocate(int64(b.Off()), int64(n*format.BlockSize)); err != nil {
		if errors.Is(err, pmem.ErrNoSpace) {
			return fmt.Errorf("%w: %v", ErrNoSpace, err)
		}
		return ioErr(fmt.Sprintf("backing pool blocks %d..%d", b, uint64(b)+n-1), err)
	}
	return nil
}

// ReadSuperblock decodes the primary superblock, falling back to the
// replica. primaryErr is the primary's problem when the replica was used.
func ReadSuperblock(m pmem.Medium) (sb format.Superblock, primaryErr error, err error) {
	pair, err := format.DecodeSuperblockPair(m.Bytes(), m.Size())
	if err != nil {
		return sb, pair.PrimaryErr, err
	}
	sb, _ = pair.Use()
	return sb, pair.PrimaryErr, nil
}

// writeSuperblock persists sb to the primary, then the replica, so one
// copy is always whole. The replica is left alone when the primary fails.
func (fs *FS) writeSuperblock() error {
	b := fs.m.Bytes()
	fs.sb.Encode(b[format.SuperPrimary.Off():])
	if err := fs.m.Persist(int64(format.SuperPrimary.Off()), format.SuperSize); err != nil {
		return ioErr("writing the primary superblock", err)
	}
	fs.sb.Encode(b[format.SuperReplica.Off():])
	if err := fs.m.Persist(int64(format.SuperReplica.Off()), format.SuperSize); err != nil {
		return ioErr("writing the replica superblock", err)
	}
	return nil
}

// Open mounts the file system on m: recovery.Mount replays the journal,
// decodes every inode and rebuilds free space; Open builds the DRAM
// indexes, frees orphans and recovers segmented sessions.
func Open(m pmem.Medium, opts Options) (*FS, *MountReport, error) {
	log := opts.Log
	if log == nil {
		log = zap.NewNop()
	}
	// Reading the media after a crash (superblocks, journal replay, inode
	// table, free space, orphans) is package recovery's; the core builds
	// its DRAM indexes from what it found.
	st, err := recovery.Mount(m)
	if err != nil {
		return nil, nil, err
	}
	sb := st.SB
	rep := &MountReport{WasClean: sb.State == format.StateClean, PrimarySBError: st.PrimaryErr, ReplicaUsed: st.PrimaryErr != nil,
		ReplayedRecs: st.Replayed}
	fs := &FS{m: m, sb: sb, j: st.Journal, log: log, inodes: map[Ino]*Inode{}, freeIno: st.FreeInos,
		zero: make([]byte, 1<<20), lockMode: opts.LockMode, tailInterval: opts.TailInterval, atime: opts.Atime}
	fs.alloc = st.Free
	if !opts.NoReserve {
		fs.reserve = metadataReserve(sb.Blocks - uint64(sb.DataStart))
	}
	if fs.tailInterval == 0 {
		fs.tailInterval = DefaultTailInterval
	}
	fs.commitInterval = opts.CommitInterval
	if fs.commitInterval == 0 {
		fs.commitInterval = DefaultCommitInterval
	}
	fs.wb, _ = m.(pmem.WritebackErrors)
	fs.initWarm(opts)
	fs.findWarm()
	fs.load(st)
	for _, ino := range st.Misnamed {
		// Named yet "unlinked": the count is wrong, not the file gone.
		// Freeing it would leave dangling entries.
		log.Warn("inode has link count 0 but directory entries name it; kept. Run `dnnfs fsck --repair` after unmounting",
			zap.Uint64("ino", uint64(ino)), zap.Int("entries", fs.inodes[ino].refs))
	}
	// Orphans: unlinked while open when the last daemon died.
	for _, ino := range st.Orphans {
		if err := fs.freeInode(fs.inodes[ino]); err != nil {
			return nil, nil, fmt.Errorf("freeing orphan inode %d: %w", ino, err)
		}
	}
	rep.OrphansFreed = len(st.Orphans)
	if rep.SessionsOpen, rep.SessionsClosed, err = fs.recoverSessions(); err != nil {
		return nil, nil, fmt.Errorf("recovering segmented sessions: %w", err)
	}
	// Generations of this mount: the mount count Stamp persists.
	fs.genSeq = (fs.sb.MountCount + 1) << 32
	if !opts.DeferStamp {
		if err := fs.Stamp(); err != nil {
			return nil, nil, err
		}
	}
	rep.Inodes = len(fs.inodes)
	rep.FreeBlocks = fs.alloc.Free()
	rep.UsedBlocks = sb.Blocks - uint64(sb.DataStart) - rep.FreeBlocks
	return fs, rep, nil
}

// Stamp marks the pool mounted: state, mount count and time, in both
// superblocks (Open does it unless Options.DeferStamp).
func (fs *FS) Stamp() error {
	if fs.stamped {
		return nil
	}
	fs.stamped = true
	fs.sb.State = format.StateMounted
	fs.sb.MountCount++
	fs.sb.MountTime = time.Now().UnixNano()
	if err := fs.writeSuperblock(); err != nil {
		return fmt.Errorf("marking the pool mounted: %w", err)
	}
	fs.liveWarm()
	return nil
}

// Close flushes DRAM-only state (times), marks the pool clean and
// persists everything. The medium stays open; the caller closes it.
func (fs *FS) Close() error {
	if fs.closed.Swap(true) {
		return nil
	}
	fs.stopCommitter()
	fs.stopWarm()
	fs.nsMu.Lock()
	defer fs.nsMu.Unlock()
	var firstErr error
	fs.imu.Lock()
	all := make([]*Inode, 0, len(fs.inodes))
	for _, in := range fs.inodes {
		all = append(all, in)
	}
	fs.imu.Unlock()
	for _, in := range all {
		// Open sessions stay open (the job resumes them), with every
		// completed byte's progress made durable.
		if err := fs.persistSessionTails(in); err != nil && firstErr == nil {
			firstErr = err
		}
		in.mu.Lock()
		if in.d.Nlink == 0 {
			in.mu.Unlock()
			if err := fs.freeInode(in); err != nil && firstErr == nil {
				firstErr = err
			}
			continue
		}
		lost, err := in.syncLocked()
		in.mu.Unlock()
		fs.LogLost(lost)
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if err := fs.j.Settle(); err != nil && firstErr == nil {
		firstErr = ioErr("settling the journal", err)
	}
	if err := fs.m.Persist(0, fs.m.Size()); err != nil && firstErr == nil {
		firstErr = ioErr("persisting the pool", err)
	}
	if firstErr != nil {
		// The pool stays marked mounted: the next mount checks it.
		return firstErr
	}
	if !fs.stamped {
		return nil // never marked mounted (Options.DeferStamp): nothing to undo
	}
	fs.sb.State = format.StateClean
	return fs.writeSuperblock()
}

// Superblock returns a copy of the superblock.
func (fs *FS) Superblock() format.Superblock { return fs.sb }

// Medium returns the pool's medium.
func (fs *FS) Medium() pmem.Medium { return fs.m }

// Log returns the file system's logger.
func (fs *FS) Log() *zap.Logger { return fs.log }

// StatFS describes capacity for statfs(2).
type StatFS struct {
	Blocks, Free uint64
	// Avail is the part of Free that writes may take: Free less the
	// metadata reserve. statfs(2) reports it as f_bavail, as ext4 does
	// with the blocks it reserves.
	Avail        uint64
	Files, FFree uint64
	BlockSize    uint32
	NameLen      uint32
}

// metadataReserve is how many of a pool's data blocks are kept for
// changes that free space (DESIGN.md §Metadata reserve): 2%, at most
// 4 MiB, as ext4 keeps reserved clusters for its no-fail metadata.
func metadataReserve(dataBlocks uint64) uint64 { return min(dataBlocks/50, 1024) }

// available is the free space a write can take: free blocks less the
// metadata reserve.
func (fs *FS) available() uint64 {
	free := fs.alloc.Free()
	if free < fs.reserve {
		return 0
	}
	return free - fs.reserve
}

// Statfs reports capacity.
func (fs *FS) Statfs() StatFS {
	fs.imu.Lock()
	used := uint64(len(fs.inodes))
	fs.imu.Unlock()
	return StatFS{
		Blocks: fs.sb.Blocks - uint64(fs.sb.DataStart), Free: fs.alloc.Free(), Avail: fs.available(),
		Files: fs.sb.InodeCount - 1, FFree: fs.sb.InodeCount - 1 - used,
		BlockSize: format.BlockSize, NameLen: format.MaxNameLen,
	}
}

// StatsSnapshot returns the counters.
func (fs *FS) StatsSnapshot() map[string]uint64 {
	c, b := fs.j.Stats()
	bs := fs.j.Batches()
	w := fs.Warm()
	return map[string]uint64{
		"reads": fs.stats.Reads.Load(), "writes": fs.stats.Writes.Load(),
		"read_bytes": fs.stats.ReadBytes.Load(), "write_bytes": fs.stats.WriteBytes.Load(),
		"fsyncs": fs.stats.Fsyncs.Load(), "journal_commits": c, "journal_bytes": b,
		"journal_batches": bs.Batches, "journal_largest_batch": bs.Largest,
		"free_blocks":   fs.alloc.Free(),
		"pending_files": uint64(fs.PendingFiles()), "committed_by_interval": fs.stats.Commits.Load(),
		"warm_bytes": w.Warm, "warm_punched_decay_bytes": w.PunchedDecay, "warm_punched_cap_bytes": w.PunchedCap,
	}
}
