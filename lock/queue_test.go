package lock

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestQueues replays the lock-queue scenarios in testdata/queues: each
// command changes one file's queues and prints them, so an ordering rule
// (FIFO among conflicting waiters, whole-file fairness, wake order) reads
// as text. Commands:
//
//	acquire name=a range=0-100|whole mode=x|s   start Acquire in a goroutine
//	release name=a                              release a running lock
//	cancel name=a                               end a waiter's context
//	try name=a range=... mode=...               TryAcquire (never queues)
//
// Each prints "run:" (sorted by name; the run queue is a set) and "wait:"
// (queue order, which is what FIFO fairness is about).
func TestQueues(t *testing.T) {
	datadriven.RunTest(t, "testdata/queues", func(t *testing.T, d *datadriven.TestData) string {
		return queueState(t).run(t, d)
	})
}

type queueScenario struct {
	f      File
	locks  map[string]*Lock
	names  map[uint32]string
	cancel map[string]context.CancelFunc
	done   map[string]chan error
}

var scenarios = map[*testing.T]*queueScenario{}

// queueState returns the scenario of the running datadriven file; a new
// file (a new subtest parent) starts empty.
func queueState(t *testing.T) *queueScenario {
	s := scenarios[t]
	if s == nil {
		s = &queueScenario{locks: map[string]*Lock{}, names: map[uint32]string{},
			cancel: map[string]context.CancelFunc{}, done: map[string]chan error{}}
		scenarios[t] = s
		t.Cleanup(func() { delete(scenarios, t) })
	}
	return s
}

func (s *queueScenario) run(t *testing.T, d *datadriven.TestData) string {
	var name string
	d.ScanArgs(t, "name", &name)
	switch d.Cmd {
	case "acquire", "try":
		l := &Lock{TID: uint32(len(s.names) + 1), Mode: Shared}
		var rng, mode string
		d.ScanArgs(t, "range", &rng)
		d.ScanArgs(t, "mode", &mode)
		if mode == "x" {
			l.Mode = Exclusive
		}
		if rng == "whole" {
			l.Start, l.End = 0, Whole
		} else {
			a, b, _ := strings.Cut(rng, "-")
			l.Start, _ = strconv.ParseUint(a, 10, 64)
			l.End, _ = strconv.ParseUint(b, 10, 64)
		}
		s.names[l.TID] = name
		if d.Cmd == "try" {
			if !s.f.TryAcquire(l) {
				return "refused\n" + s.String()
			}
			s.locks[name] = l
			return s.String()
		}
		s.locks[name] = l
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		s.cancel[name], s.done[name] = cancel, done
		go func() { done <- s.f.Acquire(ctx, l, nil) }()
		s.waitQueued(t, l.TID)
	case "release":
		s.f.Release(s.locks[name])
		delete(s.locks, name)
	case "cancel":
		s.cancel[name]()
		if err := <-s.done[name]; err == nil {
			return "granted before the cancel\n" + s.String()
		}
		delete(s.locks, name)
		return "gave up\n" + s.String()
	default:
		t.Fatalf("unknown command %q", d.Cmd)
	}
	return s.String()
}

// waitQueued waits until the goroutine's Acquire has put the lock on a queue.
func (s *queueScenario) waitQueued(t *testing.T, tid uint32) {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		run, wait, _ := s.f.Snapshot()
		for _, l := range append(run, wait...) {
			if l.TID == tid {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("lock %s never reached a queue", s.names[tid])
}

func (s *queueScenario) String() string {
	run, wait, st := s.f.Snapshot()
	desc := func(l LockInfo) string {
		r := fmt.Sprintf("%d-%d", l.Start, l.End)
		if l.End == Whole {
			r = "whole"
		}
		m := "s"
		if l.Mode == Exclusive {
			m = "x"
		}
		return fmt.Sprintf("%s(%s %s)", s.names[l.TID], r, m)
	}
	var rs, ws []string
	for _, l := range run {
		rs = append(rs, desc(l))
	}
	sort.Strings(rs)
	for _, l := range wait {
		ws = append(ws, desc(l))
	}
	return fmt.Sprintf("run: %s\nwait: %s\nmax-bypass: %d\n", strings.Join(rs, " "), strings.Join(ws, " "), st.MaxBypass)
}
