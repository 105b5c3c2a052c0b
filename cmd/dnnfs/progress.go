package main

import (
	"os"
	"sync/atomic"

	"github.com/vbauerster/cupwriter"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/sys/unix"
)

// bar is a progress bar on stderr while long work runs (cp, fsck, recover,
// mkfs), shown only when stderr is a terminal: in a script or a log the
// command prints nothing more than before. A nil *bar is a bar not shown,
// and every method does nothing on it.
type bar struct {
	p     *mpb.Progress
	b     *mpb.Bar
	step  atomic.Pointer[string]
	total atomic.Int64 // the latest total: done(true) fills the bar to it
}

// stderrIsTerminal reports whether stderr is a terminal (TCGETS works).
func stderrIsTerminal() bool {
	_, err := unix.IoctlGetTermios(int(os.Stderr.Fd()), unix.TCGETS)
	return err == nil
}

// newBar returns a bar titled name for total units: bytes (shown as KiB,
// MiB, ...) or, if !bytes, steps, with the current step's name beside it.
// It returns nil unless stderr is a terminal.
func newBar(name string, total int64, bytes bool) *bar {
	if !stderrIsTerminal() {
		return nil
	}
	b := &bar{p: mpb.New(mpb.WithConsoleWriter(sizedTerminal{cupwriter.New(os.Stderr, false)}), mpb.WithWidth(40))}
	empty := ""
	b.step.Store(&empty)
	counters := decor.CountersNoUnit("%d/%d", decor.WCSyncSpace)
	if bytes {
		counters = decor.CountersKibiByte("% .1f / % .1f", decor.WCSyncSpace)
	}
	// Made with total 0, the bar never completes by itself (mpb), so a
	// step count that goes back (fsck --repair checks again after its
	// fixes) keeps it going; done completes it.
	b.b = b.p.New(0, mpb.BarStyle(),
		mpb.PrependDecorators(decor.Name(name, decor.WCSyncSpaceR), counters),
		mpb.AppendDecorators(decor.Percentage(decor.WCSyncSpace),
			decor.Any(func(decor.Statistics) string { return *b.step.Load() }, decor.WCSyncSpace)))
	b.set("", 0, total)
	return b
}

// set moves the bar to done of total (total 0: unchanged), at step.
func (b *bar) set(step string, done, total int64) {
	if b == nil {
		return
	}
	b.step.Store(&step)
	if total > 0 {
		b.total.Store(total)
		b.b.SetTotal(total, false)
	}
	b.b.SetCurrent(done)
}

// add advances the bar by n.
func (b *bar) add(n int64) {
	if b != nil {
		b.b.IncrInt64(n)
	}
}

// done ends the bar, full if ok, else where it stopped, and waits until it
// is drawn for the last time: what the command prints next comes after it.
func (b *bar) done(ok bool) {
	if b == nil {
		return
	}
	if ok {
		step := "done"
		b.step.Store(&step)
		b.b.SetTotal(b.total.Load(), true)
	} else {
		b.b.Abort(false)
	}
	b.p.Wait()
}

// sizedTerminal is the terminal writer mpb draws with, except that a
// terminal reporting no size (a new pseudo-terminal, a serial console)
// counts as 80x24: mpb would draw nothing in 0 columns.
type sizedTerminal struct{ *cupwriter.Writer }

func (t sizedTerminal) GetTermSize() (width, height int, err error) {
	width, height, err = t.Writer.GetTermSize()
	if err == nil && width <= 0 {
		return 80, 24, nil
	}
	return width, height, err
}
