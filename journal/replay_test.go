package journal_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/dnnfs/dnnfs/format"
	"github.com/dnnfs/dnnfs/journal"
	"github.com/dnnfs/dnnfs/pmem"
)

// TestReplayCases replays the cases in testdata/replay. Each `commit`
// commits one transaction (input lines: "<offset into the data region>
// <text>") on a Recorder and prints, for the crash image after every fence
// of the commit, whether a transaction was pending and what Replay left at
// each target (zeros as '.'). `damage`
// does the same for the image just past the commit point after spoiling
// one field of the transaction (crc, seq, len, count, record, magic).
func TestReplayCases(t *testing.T) {
	datadriven.RunTest(t, "testdata/replay", func(t *testing.T, d *datadriven.TestData) string {
		type rec struct {
			off  format.Off
			data string
		}
		var recs []rec
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			o, text, _ := strings.Cut(line, " ")
			n, err := strconv.ParseUint(o, 10, 64)
			if err != nil {
				t.Fatalf("bad record line %q", line)
			}
			recs = append(recs, rec{format.Off(n), text})
		}
		m := pmem.NewRecorder(make([]byte, 8<<20))
		_, sb := newJournal(t, m)
		j, err := journal.Open(m, &sb)
		if err != nil {
			t.Fatal(err)
		}
		base := m.Fences()
		tx := j.Begin()
		for _, r := range recs {
			tx.Write(sb.DataStart.Off()+r.off, []byte(r.data))
		}
		if err := tx.Commit(); err != nil {
			return "commit: " + err.Error() + "\n"
		}
		// replay opens image k, spoils it, replays and describes the result.
		replay := func(k int, spoil func(b []byte)) string {
			img := pmem.NewMemory(m.Size())
			copy(img.Bytes(), m.Image(k))
			if spoil != nil {
				spoil(img.Bytes())
			}
			j2, err := journal.Open(img, &sb)
			if err != nil {
				return "open: " + errKind(err)
			}
			pending := j2.Pending()
			n, err := j2.Replay()
			if err != nil {
				return fmt.Sprintf("pending=%v replay: %s", pending, errKind(err))
			}
			var ts []string
			for _, r := range recs {
				got := img.Bytes()[sb.DataStart.Off()+r.off:][:len(r.data)]
				ts = append(ts, fmt.Sprintf("%d:%s", r.off, show(got)))
			}
			return fmt.Sprintf("pending=%v replayed=%d %s", pending, n, strings.Join(ts, " "))
		}
		var out strings.Builder
		switch d.Cmd {
		case "commit":
			for k := base; k <= m.Fences(); k++ {
				fmt.Fprintf(&out, "fence +%d: %s\n", k-base, replay(k, nil))
			}
		case "damage":
			var field string
			d.ScanArgs(t, "field", &field)
			// The first image with the commit word set is just past the commit point.
			k := base
			for ; k <= m.Fences(); k++ {
				img := m.Image(k)
				if binary.LittleEndian.Uint64(img[sb.JournalStart.Off()+format.JHCommit:]) != 0 {
					break
				}
			}
			jo := sb.JournalStart.Off()
			tx := jo + format.BlockSize
			spoil := map[string]func(b []byte){
				"crc":    func(b []byte) { b[tx+format.TxCRC] ^= 1 },
				"seq":    func(b []byte) { b[tx+format.TxSeq] ^= 1 },
				"len":    func(b []byte) { binary.LittleEndian.PutUint32(b[tx+format.TxLen:], 1<<30) },
				"count":  func(b []byte) { binary.LittleEndian.PutUint32(b[tx+format.TxCount:], 1000) },
				"record": func(b []byte) { b[tx+format.TxHeader+format.RecHeader] ^= 0xff },
				"magic":  func(b []byte) { b[jo+format.JHMagic] ^= 0xff },
			}[field]
			if spoil == nil {
				t.Fatalf("unknown field %q", field)
			}
			fmt.Fprintf(&out, "%s\n", replay(k, spoil))
		default:
			t.Fatalf("unknown command %q", d.Cmd)
		}
		return out.String()
	})
}

// show renders a target's bytes as text, zeros as '.', so a record that
// is missing ("....."), whole or half applied ("he...") reads at a glance.
func show(got []byte) string {
	b := []byte(string(got))
	for i, c := range b {
		if c == 0 {
			b[i] = '.'
		}
	}
	return strconv.Quote(string(b))
}

func errKind(err error) string {
	if errors.Is(err, journal.ErrBadJournal) {
		return "ErrBadJournal"
	}
	return err.Error()
}
