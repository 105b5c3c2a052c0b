package journal_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/pmem"
)

// newJournal formats a journal on a DRAM medium of 8 MiB.
func newJournal(t *testing.T, m pmem.Medium) (*journal.Journal, format.Superblock) {
	t.Helper()
	sb, err := format.Geometry(m.Size())
	if err != nil {
		t.Fatal(err)
	}
	journal.Format(m, &sb)
	j, err := journal.Open(m, &sb)
	if err != nil {
		t.Fatal(err)
	}
	return j, sb
}

func TestCommitAppliesRecords(t *testing.T) {
	m := pmem.NewMemory(8 << 20)
	j, sb := newJournal(t, m)
	off := sb.DataStart.Off()
	tx := j.Begin()
	tx.Write(off, []byte("hello"))
	tx.Write(off+100, []byte("world!!")) // odd length: padded in the journal
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	b := m.Bytes()
	if string(b[off:off+5]) != "hello" || string(b[off+100:off+107]) != "world!!" {
		t.Fatalf("records not applied: %q %q", b[off:off+5], b[off+100:off+107])
	}
	if j.Pending() {
		t.Fatal("a committed transaction stays pending after Commit returned")
	}
	if c, _ := j.Stats(); c != 1 {
		t.Fatalf("commits = %d, want 1", c)
	}
}

func TestLaterRecordWins(t *testing.T) {
	m := pmem.NewMemory(8 << 20)
	j, sb := newJournal(t, m)
	off := sb.DataStart.Off()
	tx := j.Begin()
	tx.Write(off, []byte("aaaa"))
	tx.Write(off, []byte("bb"))
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := string(m.Bytes()[off : off+4]); got != "bbaa" {
		t.Fatalf("got %q, want %q", got, "bbaa")
	}
}

// A transaction committed but not retired (the machine died between steps
// 2 and 4) is applied by Replay; before its commit word, nothing is.
func TestReplayAfterCommitPoint(t *testing.T) {
	rec := pmem.NewRecorder(make([]byte, 8<<20))
	j, sb := newJournal(t, rec)
	off := sb.DataStart.Off()
	base := rec.Fences()
	tx := j.Begin()
	tx.Write(off, bytes.Repeat([]byte{7}, 5000))
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	sawApplied, sawNone := false, false
	for k := base; k <= rec.Fences(); k++ {
		img := pmem.NewMemory(8 << 20)
		copy(img.Bytes(), rec.Image(k))
		j2, err := journal.Open(img, &sb)
		if err != nil {
			t.Fatalf("fence %d: %v", k, err)
		}
		if _, err := j2.Replay(); err != nil {
			t.Fatalf("fence %d: replay: %v", k, err)
		}
		got := img.Bytes()[off : off+5000]
		switch {
		case bytes.Equal(got, bytes.Repeat([]byte{7}, 5000)):
			sawApplied = true
		case bytes.Equal(got, make([]byte, 5000)):
			if sawApplied {
				t.Fatalf("fence %d: the transaction disappeared after it had been applied", k)
			}
			sawNone = true
		default:
			t.Fatalf("fence %d: half-applied transaction after replay", k)
		}
		if j2.Pending() {
			t.Fatalf("fence %d: still pending after replay", k)
		}
	}
	if !sawApplied || !sawNone {
		t.Fatalf("images covered applied=%v none=%v; want both", sawApplied, sawNone)
	}
}

func TestTooLargeWritesNothing(t *testing.T) {
	m := pmem.NewMemory(8 << 20)
	j, sb := newJournal(t, m)
	before := bytes.Clone(m.Bytes())
	tx := j.Begin()
	tx.Write(sb.DataStart.Off(), make([]byte, j.Capacity()+1))
	if err := tx.Commit(); !errors.Is(err, journal.ErrTooLarge) {
		t.Fatalf("err = %v, want ErrTooLarge", err)
	}
	if !bytes.Equal(before, m.Bytes()) {
		t.Fatal("a refused transaction changed the medium")
	}
}

func TestOpenRejectsBadMagic(t *testing.T) {
	m := pmem.NewMemory(8 << 20)
	sb, _ := format.Geometry(m.Size())
	if _, err := journal.Open(m, &sb); !errors.Is(err, journal.ErrBadJournal) {
		t.Fatalf("unformatted journal: err = %v, want ErrBadJournal", err)
	}
}

func TestReplayRejectsDamagedTransaction(t *testing.T) {
	m := pmem.NewMemory(8 << 20)
	j, sb := newJournal(t, m)
	tx := j.Begin()
	tx.Write(sb.DataStart.Off(), []byte("data"))
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Pretend the machine died after the commit point, and the record
	// bytes then rotted: replay must refuse, not apply garbage.
	jo := sb.JournalStart.Off()
	binary.LittleEndian.PutUint64(m.Bytes()[jo+format.JHCommit:], 1)
	m.Bytes()[jo+format.BlockSize+format.TxHeader+format.RecHeader] ^= 0xff
	j2, err := journal.Open(m, &sb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j2.Replay(); !errors.Is(err, journal.ErrBadJournal) {
		t.Fatalf("replay of a damaged transaction: err = %v, want ErrBadJournal", err)
	}
}

// TestDiscardDropsDamagedTransaction: a committed transaction whose bytes
// were damaged fails Replay with ErrBadJournal (wrapping format.ErrBadTx);
// Discard retires it without applying a byte.
func TestDiscardDropsDamagedTransaction(t *testing.T) {
	m := pmem.NewMemory(8 << 20)
	j, sb := newJournal(t, m)
	off := sb.DataStart.Off()
	tx := j.Begin()
	tx.Write(off, []byte("first"))
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// Re-arm the (retired) transaction and damage one record byte.
	b := m.Bytes()
	js := sb.JournalStart.Off()
	copy(b[js+format.JHCommit:], b[js+format.BlockSize+format.TxSeq:js+format.BlockSize+format.TxSeq+8])
	b[js+format.BlockSize+format.TxHeader+format.RecHeader] ^= 1
	copy(b[off:], "XXXXX")
	j2, err := journal.Open(m, &sb)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j2.Replay(); !errors.Is(err, journal.ErrBadJournal) || !errors.Is(err, format.ErrBadTx) {
		t.Fatalf("Replay of a damaged transaction: %v", err)
	}
	if err := j2.Discard(); err != nil {
		t.Fatal(err)
	}
	if j2.Pending() || string(b[off:off+5]) != "XXXXX" {
		t.Fatalf("after Discard: pending %v, target %q", j2.Pending(), b[off:off+5])
	}
	if n, err := j2.Replay(); n != 0 || err != nil {
		t.Fatalf("Replay after Discard: %d records, %v", n, err)
	}
}
