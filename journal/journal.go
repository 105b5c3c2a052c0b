package journal

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/pmem"
)

var le = binary.LittleEndian

// Journal is the DRAM handle of the journal region.
type Journal struct {
	m      pmem.Medium
	start  format.Off // first byte of the region
	length int64      // bytes in the region

	mu        sync.Mutex // serialises batches (and Replay, Settle, Discard); DESIGN.md §Lock order
	seq       uint64
	unsettled bool     // a persist of the header failed; see the package comment
	batch     []*Tx    // the batch being committed (mu)
	recs      []record // its records, concatenated (mu)
	flushes   []span   // its targets' ranges, merged for step 3 (mu)

	// Group commit (see the package comment): Commit calls queue here
	// while a leader commits; qmu is a leaf lock.
	qmu     sync.Mutex
	queue   []*Tx
	leading bool // a leader is committing or has been handed the queue

	commits atomic.Uint64
	bytes   atomic.Uint64
	batches atomic.Uint64
	largest atomic.Uint64
}

// Format writes an empty journal.
func Format(m pmem.Medium, sb *format.Superblock) error {
	start := sb.JournalStart.Off()
	b := m.Bytes()[start : start+format.BlockSize*2]
	clear(b)
	le.PutUint64(b[format.JHMagic:], format.JournalMagic)
	if err := m.Persist(int64(start), int64(len(b))); err != nil {
		return fmt.Errorf("writing the journal header: %w", err)
	}
	return nil
}

// Open attaches to the journal region of a formatted pool.
func Open(m pmem.Medium, sb *format.Superblock) (*Journal, error) {
	j := &Journal{m: m, start: sb.JournalStart.Off(), length: int64(sb.JournalLen) * format.BlockSize}
	if int64(j.start)+j.length > m.Size() {
		return nil, fmt.Errorf("%w: region beyond the pool", ErrBadJournal)
	}
	if got := le.Uint64(j.region()[format.JHMagic:]); got != format.JournalMagic {
		return nil, fmt.Errorf("%w: bad magic %#x at byte %d", ErrBadJournal, got, j.start)
	}
	return j, nil
}

func (j *Journal) region() []byte {
	return j.m.Bytes()[j.start : int64(j.start)+j.length]
}

func (j *Journal) commitWord() *uint64 {
	return (*uint64)(unsafe.Pointer(&j.region()[format.JHCommit]))
}

// Capacity is the largest payload (record headers and data) one
// transaction can carry.
func (j *Journal) Capacity() int {
	return int(j.length) - format.BlockSize - format.TxHeader
}

// Pending reports whether a committed transaction awaits replay.
func (j *Journal) Pending() bool { return atomic.LoadUint64(j.commitWord()) != 0 }

// Replay applies a committed but unretired transaction, if any, and
// returns how many records it applied.
func (j *Journal) Replay() (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	seq := atomic.LoadUint64(j.commitWord())
	if seq == 0 {
		return 0, nil
	}
	recs, err := j.decodeLocked(seq)
	if err != nil {
		return 0, err
	}
	if err := j.applyLocked(recs); err != nil {
		return 0, fmt.Errorf("replaying transaction %d: %w", seq, err)
	}
	if err := j.retireLocked(); err != nil {
		return 0, fmt.Errorf("retiring transaction %d: %w", seq, err)
	}
	j.seq = seq
	return len(recs), nil
}

// Discard retires a committed transaction without applying it: for the
// checker's repair of a transaction that fails to decode (ErrBadJournal),
// whose records cannot be trusted. The change it carried is lost.
func (j *Journal) Discard() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if err := j.retireLocked(); err != nil {
		return err
	}
	j.unsettled = false
	return nil
}

// settleLocked finishes what a failed persist left: the transaction its
// commit word names, if any, is applied again, and the word is persisted
// as 0.
func (j *Journal) settleLocked() error {
	if seq := atomic.LoadUint64(j.commitWord()); seq != 0 {
		recs, err := j.decodeLocked(seq)
		if err != nil {
			return err
		}
		if err := j.applyLocked(recs); err != nil {
			return fmt.Errorf("applying transaction %d again: %w", seq, err)
		}
		atomic.StoreUint64(j.commitWord(), 0)
	}
	if err := j.retireLocked(); err != nil {
		return err
	}
	j.unsettled = false
	return nil
}

// Settle finishes a transaction a failed persist left unretired (see the
// package comment); it returns nil when the journal is settled.
func (j *Journal) Settle() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.unsettled {
		return nil
	}
	return j.settleLocked()
}

type record = format.TxRecord

// decodeLocked parses and validates the transaction area for seq
// (format.DecodeTx: the checker decodes it the same way).
func (j *Journal) decodeLocked(seq uint64) ([]record, error) {
	r := j.region()
	end := uint64(j.start) + uint64(j.length)
	recs, err := format.DecodeTx(r[format.BlockSize:], seq, end, uint64(j.m.Size()))
	if err != nil {
		return nil, fmt.Errorf("%w: committed transaction %d: %w", ErrBadJournal, seq, err)
	}
	return recs, nil
}

// span is a byte range of the pool [off, end).
type span struct{ off, end int64 }

// applyLocked stores every record at its target (in order: a later record
// wins where they overlap) and persists them all, returning the first
// flush failure (after trying every range). Ranges that overlap or share a
// block are flushed as one: on an emulated pool each Flush is an msync,
// and a batch's records crowd into few blocks (neighbouring inode slots,
// one directory's blocks). A block holding a record is metadata only the
// journal stores into, so flushing the bytes between two records of it
// writes back nothing another thread is changing.
func (j *Journal) applyLocked(recs []record) error {
	b := j.m.Bytes()
	fl := j.flushes[:0]
	for _, r := range recs {
		copy(b[r.Off:], r.Data)
		if len(r.Data) > 0 {
			fl = append(fl, span{int64(r.Off), int64(r.Off) + int64(len(r.Data))})
		}
	}
	if len(fl) > 1 {
		slices.SortFunc(fl, func(a, b span) int { return cmp.Compare(a.off, b.off) })
		n := 0
		for _, s := range fl[1:] {
			last := &fl[n]
			if s.off <= last.end || s.off/format.BlockSize == (last.end-1)/format.BlockSize {
				last.end = max(last.end, s.end)
				continue
			}
			n++
			fl[n] = s
		}
		fl = fl[:n+1]
	}
	j.flushes = fl[:0]
	var first error
	for _, s := range fl {
		if err := j.m.Flush(s.off, s.end-s.off); err != nil && first == nil {
			first = err
		}
	}
	if err := j.m.Fence(); err != nil && first == nil {
		first = err
	}
	return first
}

func (j *Journal) retireLocked() error {
	atomic.StoreUint64(j.commitWord(), 0)
	if err := j.m.Persist(int64(j.start)+format.JHCommit, 8); err != nil {
		return fmt.Errorf("retiring the journal's commit word: %w", err)
	}
	return nil
}

// Tx collects the records of one transaction. It is not safe for
// concurrent use; Commit hands it to the journal.
type Tx struct {
	j    *Journal
	recs []record
	size int

	// Set while the transaction waits in the queue (Journal.qmu).
	wake chan bool // true: lead the next batch; false: done, see err
	err  error     // the batch's result, written before wake
}

// Begin starts a transaction.
func (j *Journal) Begin() *Tx { return &Tx{j: j} }

// Write adds a record: at commit, data is stored at pool offset off.
// data is copied.
func (tx *Tx) Write(off format.Off, data []byte) {
	tx.recs = append(tx.recs, record{Off: off, Data: append([]byte(nil), data...)})
	tx.size += format.RecordSize(len(data))
}

// Size is the payload the transaction needs so far.
func (tx *Tx) Size() int { return tx.size }

// Empty reports whether the transaction has no records.
func (tx *Tx) Empty() bool { return len(tx.recs) == 0 }

// Commit makes all records durable atomically and applies them. After it
// returns nil, every record is in place and durable (on the media, or in
// the journal for Replay to finish if the apply step's persist failed).
// After an error nothing of the transaction is applied.
//
// Concurrent Commits share one journal transaction (group commit, see the
// package comment): a Commit arriving while another batch is being
// committed waits for it and is committed with the others that arrived
// meanwhile; one arriving at an idle journal commits at once, alone.
func (tx *Tx) Commit() error {
	if len(tx.recs) == 0 {
		return nil
	}
	j := tx.j
	if tx.size > j.Capacity() {
		return fmt.Errorf("%w: %d bytes, journal holds %d", ErrTooLarge, tx.size, j.Capacity())
	}
	j.qmu.Lock()
	j.queue = append(j.queue, tx)
	if j.leading {
		// Wait for a leader to commit us, or to hand us the lead.
		tx.wake = make(chan bool, 1)
		j.qmu.Unlock()
		if lead := <-tx.wake; !lead {
			return tx.err
		}
	} else {
		j.leading = true
		j.qmu.Unlock()
	}
	j.lead(tx)
	return tx.err
}

// lead commits one batch as the leader: the longest prefix of the queue
// that fits the transaction area. self is at the queue's head (whoever
// takes the lead is: the queue was empty, or the lead was handed to its
// first transaction), and fits alone, so the batch carries it. Then the
// lead goes to the first transaction still queued, if any, so that no
// caller commits others' batches for long.
func (j *Journal) lead(self *Tx) {
	j.mu.Lock()
	j.qmu.Lock()
	n, size := 0, 0
	for _, tx := range j.queue {
		if size+tx.size > j.Capacity() {
			break
		}
		size += tx.size
		n++
	}
	j.batch = append(j.batch[:0], j.queue[:n]...)
	queued := len(j.queue)
	j.queue = j.queue[:copy(j.queue, j.queue[n:])]
	clear(j.queue[len(j.queue):queued])
	j.qmu.Unlock()
	err, returned := ErrCommitPanicked, false
	defer func() {
		if !returned {
			// A panic, which the FUSE layer turns into EIO for this
			// caller and goes on: the journal must not stay locked, nor
			// the others wait for ever.
			j.unsettled = true
		}
		for _, tx := range j.batch {
			tx.err = err
			if tx != self {
				tx.wake <- false
			}
		}
		clear(j.batch)
		j.mu.Unlock()
		j.qmu.Lock()
		if len(j.queue) > 0 {
			j.queue[0].wake <- true
		} else {
			j.leading = false
		}
		j.qmu.Unlock()
	}()
	err = j.commitLocked(j.batch, size)
	returned = true
}

// commitLocked commits the transactions of batch (size bytes of records
// in all) as one journal transaction, their records in batch order.
func (j *Journal) commitLocked(batch []*Tx, size int) error {
	if j.unsettled {
		if err := j.settleLocked(); err != nil {
			return fmt.Errorf("journal unsettled since an earlier persist failure: %w", err)
		}
	}
	recs := batch[0].recs
	if len(batch) > 1 {
		j.recs = j.recs[:0]
		for _, tx := range batch {
			j.recs = append(j.recs, tx.recs...)
		}
		recs = j.recs
		defer clear(j.recs)
	}
	j.seq++
	seq := j.seq
	area := j.region()[format.BlockSize : format.BlockSize+format.TxHeader+size]
	format.EncodeTx(area, seq, recs)
	// Step 1: the records are durable before the commit word names them.
	if err := j.m.Persist(int64(j.start)+format.BlockSize, int64(len(area))); err != nil {
		return fmt.Errorf("journal transaction %d (%d in the batch): persisting its records: %w", seq, len(batch), err)
	}
	// Step 2: the commit point, one aligned 8-byte store.
	atomic.StoreUint64(j.commitWord(), seq)
	if err := j.m.Persist(int64(j.start)+format.JHCommit, 8); err != nil {
		// Not known durable either way: take it back. Until the 0 is
		// durable, no later transaction may reuse the area.
		if rerr := j.retireLocked(); rerr != nil {
			j.unsettled = true
		}
		return fmt.Errorf("journal transaction %d (%d in the batch): persisting its commit word: %w", seq, len(batch), err)
	}
	// Step 3 and 4. The transaction is durable now (Replay finishes it),
	// so a failure here leaves the journal for the next Commit to settle.
	if err := j.applyLocked(recs); err != nil {
		j.unsettled = true
	} else if err := j.retireLocked(); err != nil {
		j.unsettled = true
	}
	j.commits.Add(uint64(len(batch)))
	j.bytes.Add(uint64(size))
	j.batches.Add(1)
	if n := uint64(len(batch)); n > j.largest.Load() {
		j.largest.Store(n) // only the leader, under mu, stores it
	}
	return nil
}

// Stats returns the number of committed transactions and their payload
// bytes since Open.
func (j *Journal) Stats() (commits, bytes uint64) { return j.commits.Load(), j.bytes.Load() }

// BatchStats says how far group commit shared the journal's persists
// since Open: Stats' commits divided by Batches is the batching factor.
type BatchStats struct {
	Batches uint64 // journal transactions committed, each paying the four persist points once
	Largest uint64 // callers' transactions in the largest of them
}

// Batches returns the group-commit counters.
func (j *Journal) Batches() BatchStats {
	return BatchStats{Batches: j.batches.Load(), Largest: j.largest.Load()}
}
