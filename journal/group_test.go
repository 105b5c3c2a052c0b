package journal_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/pmem"
)

// queueBatch commits txs from goroutines of their own while the journal
// is held, starting each once the previous one is queued, so that they
// queue in order and form one batch (or several, if they do not fit one)
// when release is called. It returns each Commit's result (a panic with
// an error, as an injected crash, is returned wrapped in errPanic).
func queueBatch(t *testing.T, j *journal.Journal, txs []*journal.Tx) (release func() []error) {
	t.Helper()
	hold := journal.HoldBatches(j)
	errs := make([]error, len(txs))
	var wg sync.WaitGroup
	for i, tx := range txs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if r := recover(); r != nil {
					err, _ := r.(error)
					errs[i] = fmt.Errorf("%w: %w", errPanic, err)
				}
			}()
			errs[i] = tx.Commit()
		}()
		for journal.Queued(j) != i+1 {
			runtime.Gosched()
		}
	}
	return func() []error {
		hold()
		wg.Wait()
		return errs
	}
}

var errPanic = errors.New("Commit panicked")

// word is 8 bytes naming transaction (g, i): goroutine g's i-th commit.
// commitFromGoroutines runs goroutines goroutines that each commit each
// transactions: word(g, i) at the three offsets at(g) names.
func commitFromGoroutines(t *testing.T, j *journal.Journal, goroutines, each int, at func(g int) [3]format.Off) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			offs := at(g)
			for i := range each {
				tx := j.Begin()
				for _, off := range offs {
					tx.Write(off, word(g, i))
				}
				if err := tx.Commit(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func word(g, i int) []byte {
	return binary.LittleEndian.AppendUint64(nil, uint64(g)<<32|uint64(i+1))
}

// TestGroupCommitOneBatch: transactions queued while a batch is being
// committed go out together as one journal transaction: every record
// applied, the later of two overlapping ones winning, one batch counted.
func TestGroupCommitOneBatch(t *testing.T) {
	m := pmem.NewMemory(8 << 20)
	j, sb := newJournal(t, m)
	base := sb.DataStart.Off()
	shared := base + 100*format.BlockSize
	var txs []*journal.Tx
	for i := range 8 {
		tx := j.Begin()
		tx.Write(base+format.Off(i*format.InodeSize), word(i, 0)) // neighbours in one block
		tx.Write(shared, word(i, 0))
		txs = append(txs, tx)
	}
	for i, err := range queueBatch(t, j, txs)() {
		if err != nil {
			t.Fatalf("tx %d: %v", i, err)
		}
	}
	b := m.Bytes()
	for i := range 8 {
		if got := b[base+format.Off(i*format.InodeSize):][:8]; !bytes.Equal(got, word(i, 0)) {
			t.Fatalf("tx %d's record not applied: % x", i, got)
		}
	}
	if got := b[shared:][:8]; !bytes.Equal(got, word(7, 0)) {
		t.Fatalf("overlapping record: % x, want the last queued transaction's % x", got, word(7, 0))
	}
	if c, _ := j.Stats(); c != 8 {
		t.Fatalf("commits = %d, want 8", c)
	}
	if bs := j.Batches(); bs.Batches != 1 || bs.Largest != 8 {
		t.Fatalf("batch stats %+v, want one batch of 8", bs)
	}
	if j.Pending() {
		t.Fatal("the batch stays pending after its Commits returned")
	}
}

// TestGroupCommitSplitsAtCapacity: queued transactions that do not fit
// the transaction area together go out in several batches, in queue
// order; one too large alone fails alone with ErrTooLarge.
func TestGroupCommitSplitsAtCapacity(t *testing.T) {
	m := pmem.NewMemory(8 << 20)
	j, sb := newJournal(t, m)
	base := sb.DataStart.Off()
	// Each fills 40% of the area: two fit a batch, three do not.
	n := j.Capacity()*2/5 - format.RecHeader
	var txs []*journal.Tx
	for i := range 5 {
		tx := j.Begin()
		tx.Write(base, bytes.Repeat([]byte{byte('a' + i)}, n))
		txs = append(txs, tx)
	}
	release := queueBatch(t, j, txs)
	big := j.Begin()
	big.Write(base, make([]byte, j.Capacity()+1))
	if err := big.Commit(); !errors.Is(err, journal.ErrTooLarge) {
		t.Fatalf("too large a transaction: %v, want ErrTooLarge", err)
	}
	for i, err := range release() {
		if err != nil {
			t.Fatalf("tx %d: %v", i, err)
		}
	}
	if got := m.Bytes()[base]; got != 'e' {
		t.Fatalf("target holds %q's record, want the last queued one's ('e')", got)
	}
	if bs := j.Batches(); bs.Batches != 3 || bs.Largest != 2 {
		t.Fatalf("batch stats %+v, want 3 batches, the largest of 2", bs)
	}
}

// TestGroupCommitStress: many goroutines commit transactions with
// records of their own and one record all of them overwrite, on a DRAM
// medium (run it with -race). Every record of every transaction lands,
// and the shared record ends with the last transaction of some goroutine.
func TestGroupCommitStress(t *testing.T) {
	const goroutines, each = 16, 50
	m := pmem.NewMemory(8 << 20)
	j, sb := newJournal(t, m)
	base := sb.DataStart.Off()
	shared := base + 100*format.BlockSize
	commitFromGoroutines(t, j, goroutines, each, func(g int) [3]format.Off {
		return [3]format.Off{base + format.Off(g*format.InodeSize), base + format.Off((g+goroutines)*format.BlockSize), shared}
	})
	b := m.Bytes()
	last := map[string]bool{}
	for g := range goroutines {
		want := word(g, each-1)
		last[string(want)] = true
		if got := b[base+format.Off(g*format.InodeSize):][:8]; !bytes.Equal(got, want) {
			t.Fatalf("goroutine %d's own record: % x, want % x", g, got, want)
		}
		if got := b[base+format.Off((g+goroutines)*format.BlockSize):][:8]; !bytes.Equal(got, want) {
			t.Fatalf("goroutine %d's second record: % x, want % x", g, got, want)
		}
	}
	if !last[string(b[shared:][:8])] {
		t.Fatalf("shared record % x is no goroutine's last transaction", b[shared:][:8])
	}
	c, _ := j.Stats()
	bs := j.Batches()
	if c != goroutines*each || bs.Batches == 0 || bs.Batches > c {
		t.Fatalf("commits %d, batch stats %+v", c, bs)
	}
	t.Logf("%d transactions in %d batches (largest %d)", c, bs.Batches, bs.Largest)
}

// TestGroupCommitCrashImages: goroutines commit concurrently on a
// Recorder. The order the transactions were committed in is read back
// from the batches in the journal's transaction area (each image just
// past a commit point shows one). Every crash image, replayed, must hold
// a prefix of that order of whole transactions: each one's three records
// all there or none, the shared record the prefix's last; and later
// images longer prefixes.
func TestGroupCommitCrashImages(t *testing.T) {
	const goroutines, each = 8, 6
	rec := pmem.NewRecorder(make([]byte, 4<<20))
	j, sb := newJournal(t, rec)
	base := sb.DataStart.Off()
	own := func(g int) format.Off { return base + format.Off(g*format.InodeSize) }
	second := func(g int) format.Off { return base + format.Off((1+g)*format.BlockSize) }
	shared := base + format.Off((1+goroutines)*format.BlockSize)
	first := rec.Fences()
	commitFromGoroutines(t, j, goroutines, each, func(g int) [3]format.Off {
		return [3]format.Off{own(g), second(g), shared}
	})

	// The commit order, batch by batch.
	js, jend := sb.JournalStart.Off(), sb.JournalStart.Off()+format.Off(sb.JournalLen*format.BlockSize)
	var order []string
	seen := map[uint64]bool{}
	images := make([][]byte, 0, rec.Fences()-first+1)
	for k := first; k <= rec.Fences(); k++ {
		img := rec.Image(k)
		images = append(images, img)
		seq := binary.LittleEndian.Uint64(img[js+format.JHCommit:])
		if seq == 0 || seen[seq] {
			continue
		}
		seen[seq] = true
		recs, err := format.DecodeTx(img[js+format.BlockSize:jend], seq, uint64(jend), uint64(len(img)))
		if err != nil {
			t.Fatalf("fence %d: transaction %d: %v", k, seq, err)
		}
		if len(recs)%3 != 0 {
			t.Fatalf("fence %d: batch %d has %d records, not whole transactions", k, seq, len(recs))
		}
		for r := 0; r < len(recs); r += 3 {
			order = append(order, string(recs[r].Data))
		}
	}
	if len(order) != goroutines*each {
		t.Fatalf("the batches carry %d transactions, want %d", len(order), goroutines*each)
	}
	t.Logf("%d transactions in %d batches", len(order), len(seen))
	next := map[uint32]uint32{} // each goroutine's commits in its program order
	for _, w := range order {
		g, i := binary.LittleEndian.Uint32([]byte(w)[4:]), binary.LittleEndian.Uint32([]byte(w))
		if i != next[g]+1 {
			t.Fatalf("goroutine %d's commit %d follows its commit %d", g, i, next[g])
		}
		next[g] = i
	}

	// Each image, replayed.
	prev := 0
	for k, img := range images {
		j2, err := journal.Open(pmem.MemoryOver(img), &sb)
		if err != nil {
			t.Fatalf("fence +%d: %v", k, err)
		}
		if _, err := j2.Replay(); err != nil {
			t.Fatalf("fence +%d: replay: %v", k, err)
		}
		// The prefix the image holds: goroutine g's transactions up to the
		// one its records name.
		in := map[string]bool{}
		p := 0
		for g := range goroutines {
			a, b := img[own(g):][:8], img[second(g):][:8]
			if !bytes.Equal(a, b) {
				t.Fatalf("fence +%d: goroutine %d's transaction half there: % x vs % x", k, g, a, b)
			}
			n := int(binary.LittleEndian.Uint32(a))
			if binary.LittleEndian.Uint64(a) != 0 && binary.LittleEndian.Uint32(a[4:]) != uint32(g) {
				t.Fatalf("fence +%d: goroutine %d's slot holds % x", k, g, a)
			}
			for i := range n {
				in[string(word(g, i))] = true
			}
			p += n
		}
		for _, w := range order[:p] {
			if !in[w] {
				t.Fatalf("fence +%d: holds %d transactions, not the first %d committed", k, p, p)
			}
		}
		want := make([]byte, 8)
		if p > 0 {
			want = []byte(order[p-1])
		}
		if got := img[shared:][:8]; !bytes.Equal(got, want) {
			t.Fatalf("fence +%d: shared record % x, want the %d-th transaction's % x", k, got, p, want)
		}
		if p < prev {
			t.Fatalf("fence +%d: holds %d transactions, an earlier image %d", k, p, prev)
		}
		prev = p
	}
	if prev != len(order) {
		t.Fatalf("the last image holds %d of %d transactions", prev, len(order))
	}
}

// TestGroupCommitFailures fails each persist step of a batch of queued
// transactions once (pmem.Faulty): the package comment's failure table,
// for every transaction of the batch alike. Before the commit point no
// record of any of them is applied and all fail; after it all succeed,
// and the journal settles on the next Commit.
func TestGroupCommitFailures(t *testing.T) {
	const n = 4
	for _, step := range []string{"records", "commit", "apply", "retire"} {
		t.Run(step, func(t *testing.T) {
			rec := pmem.NewRecorder(make([]byte, 4<<20))
			f := pmem.NewFaulty(rec)
			j, sb := newJournal(t, f)
			base := sb.DataStart.Off()
			js := int64(sb.JournalStart.Off())
			target := func(i int) format.Off { return base + format.Off(i*format.BlockSize) }
			var txs []*journal.Tx
			for i := range n {
				tx := j.Begin()
				tx.Write(target(i), word(i, 0))
				tx.Write(target(n), word(i, 0))
				txs = append(txs, tx)
			}
			release := queueBatch(t, j, txs)
			switch step {
			case "records":
				f.Inject(pmem.Injection{Ops: pmem.OpFlush, Off: js + format.BlockSize, Len: format.TxHeader, Nth: 1})
			case "commit":
				f.Inject(pmem.Injection{Ops: pmem.OpFlush, Off: js + format.JHCommit, Len: 8, Nth: 1})
			case "apply":
				f.Inject(pmem.Injection{Ops: pmem.OpFlush, Off: int64(target(n)), Len: 8, Nth: 1})
			case "retire":
				f.Inject(pmem.Injection{Ops: pmem.OpFlush, Off: js + format.JHCommit, Len: 8, Nth: 2})
			}
			errs := release()
			if got := len(f.Failures()); got != 1 {
				t.Fatalf("%d injected failures, want the one", got)
			}
			b := rec.Bytes()
			committed := step == "apply" || step == "retire"
			for i, err := range errs {
				switch {
				case committed && err != nil:
					t.Fatalf("tx %d: %v after the commit point", i, err)
				case !committed && !errors.Is(err, pmem.ErrInjected):
					t.Fatalf("tx %d: err = %v, want the batch's injected failure", i, err)
				}
				applied := bytes.Equal(b[target(i):][:8], word(i, 0))
				if applied != committed {
					t.Fatalf("tx %d: applied = %v after a failed %s step", i, applied, step)
				}
			}
			if bs := j.Batches(); committed != (bs.Batches == 1) {
				t.Fatalf("batch stats %+v after a failed %s step", bs, step)
			}
			// What a crash now would leave: replayed, all or nothing.
			img := rec.Image(rec.Fences())
			j2, err := journal.Open(pmem.MemoryOver(img), &sb)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := j2.Replay(); err != nil {
				t.Fatal(err)
			}
			for i := range n {
				if got := bytes.Equal(img[target(i):][:8], word(i, 0)); got != committed {
					t.Fatalf("crash image: tx %d applied = %v after a failed %s step", i, got, step)
				}
			}
			if want := word(n-1, 0); committed && !bytes.Equal(img[target(n):][:8], want) {
				t.Fatalf("crash image: shared record % x, want % x", img[target(n):][:8], want)
			}
			// The next Commit settles whatever the failure left and lands.
			tx := j.Begin()
			tx.Write(target(n+1), []byte("next"))
			if err := tx.Commit(); err != nil {
				t.Fatalf("the next commit: %v", err)
			}
			if j.Pending() || string(b[target(n+1):][:4]) != "next" {
				t.Fatalf("after the next commit: pending %v, target %q", j.Pending(), b[target(n+1):][:4])
			}
			img = rec.Image(rec.Fences())
			if seq := binary.LittleEndian.Uint64(img[js+format.JHCommit:]); seq != 0 {
				t.Fatalf("the durable commit word is %d after the next commit", seq)
			}
			for i := range n {
				if got := bytes.Equal(img[target(i):][:8], word(i, 0)); got != committed {
					t.Fatalf("durable image: tx %d applied = %v after a failed %s step", i, got, step)
				}
			}
		})
	}
}

// TestLoneCommitPersists: a Commit with nobody else committing costs what
// it did before group commit: four fences, no wait for company.
func TestLoneCommitPersists(t *testing.T) {
	rec := pmem.NewRecorder(make([]byte, 4<<20))
	j, sb := newJournal(t, rec)
	for i := range 3 {
		before := rec.Fences()
		tx := j.Begin()
		tx.Write(sb.DataStart.Off()+format.Off(i*format.BlockSize), []byte(fmt.Sprint(i)))
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if got := rec.Fences() - before; got != 4 {
			t.Fatalf("commit %d: %d fences, want 4", i, got)
		}
	}
	if bs := j.Batches(); bs.Batches != 3 || bs.Largest != 1 {
		t.Fatalf("batch stats %+v, want 3 batches of one", bs)
	}
}

// TestGroupCommitLeaderPanics: the leader of a batch panics right after
// the commit point (an injected crash the caller survives, as the FUSE
// layer recovers a handler's panic). The others of the batch get
// ErrCommitPanicked instead of waiting for ever, the journal is not left
// locked, and the next Commit settles the batch first: applied, as a
// remount would.
func TestGroupCommitLeaderPanics(t *testing.T) {
	const n = 4
	f := pmem.NewFaulty(pmem.NewRecorder(make([]byte, 4<<20)))
	j, sb := newJournal(t, f)
	base := sb.DataStart.Off()
	var txs []*journal.Tx
	for i := range n {
		tx := j.Begin()
		tx.Write(base+format.Off(i*format.InodeSize), word(i, 0))
		txs = append(txs, tx)
	}
	release := queueBatch(t, j, txs)
	f.CrashAfterFences(f.Fences()+2, func() { panic(pmem.ErrInjected) }) // step 2's fence
	errs := release()
	if !errors.Is(errs[0], errPanic) || !errors.Is(errs[0], pmem.ErrInjected) {
		t.Fatalf("the leader: %v, want the injected panic", errs[0])
	}
	for i, err := range errs[1:] {
		if !errors.Is(err, journal.ErrCommitPanicked) {
			t.Fatalf("tx %d: %v, want ErrCommitPanicked", i+1, err)
		}
	}
	if !j.Pending() {
		t.Fatal("the batch past its commit point is not pending")
	}
	tx := j.Begin()
	tx.Write(base+format.Off(n*format.InodeSize), word(n, 0))
	if err := tx.Commit(); err != nil {
		t.Fatalf("the next commit: %v", err)
	}
	b := f.Bytes()
	for i := range n + 1 {
		if got := b[base+format.Off(i*format.InodeSize):][:8]; !bytes.Equal(got, word(i, 0)) {
			t.Fatalf("tx %d not applied after the journal settled: % x", i, got)
		}
	}
	if j.Pending() {
		t.Fatal("pending after the next commit")
	}
}
