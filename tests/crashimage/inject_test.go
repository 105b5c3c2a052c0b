package crashimage_test

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/pmem"
	"github.com/dnnfs/dnnfs/recovery"
)

// stopTB is the script's testing.TB for a run with an injected failure: a
// Fatalf (the step that failed) stops the script instead of the test, and
// keeps the step's error.
type stopTB struct {
	testing.TB
	msg string
	err error
}

type stopScript struct{}

func (s *stopTB) Fatalf(format string, args ...any) {
	s.msg = fmt.Sprintf(format, args...)
	for _, a := range args {
		if err, ok := a.(error); ok {
			s.err = err
			break
		}
	}
	panic(stopScript{})
}

func (s *stopTB) Fatal(args ...any) { s.Fatalf("%s", fmt.Sprint(args...)) }
func (s *stopTB) FailNow()          { s.Fatalf("FailNow") }

// injectCase fails the n-th operation of kind (torn: a prefix applied
// first) after the pool is mounted.
type injectCase struct {
	kind pmem.Op
	n    int
	torn bool
}

func (c injectCase) String() string {
	s := fmt.Sprintf("%s-%d", c.kind, c.n)
	if c.torn {
		s += "-torn"
	}
	return s
}

// runScript runs mainScript on a fresh pool through a Faulty armed with
// c (none when c.n is 0). stopped says whether a step failed.
func runScript(t testing.TB, c injectCase) (s *script, f *pmem.Faulty, tb *stopTB, stopped bool) {
	tb = &stopTB{TB: t}
	s = newScriptOn(tb, poolSize, func(m pmem.Medium) pmem.Medium { f = pmem.NewFaulty(m); return f })
	s.countOps = f.Ops
	s.steps[0].ops = f.Ops()
	s.mountOps = map[pmem.Op]int{}
	for _, k := range []pmem.Op{pmem.OpWrite, pmem.OpFallocate, pmem.OpPunch, pmem.OpFlush, pmem.OpFence} {
		s.mountOps[k] = f.OpsOf(k)
	}
	if c.n > 0 {
		f.Inject(pmem.Injection{Ops: c.kind, Nth: c.n, Torn: c.torn})
	}
	func() {
		defer func() {
			if v := recover(); v != nil {
				if _, ok := v.(stopScript); !ok {
					panic(v)
				}
				stopped = true
			}
		}()
		mainScript(s)
	}()
	return s, f, tb, stopped
}

// TestInjectedFailures runs the main script once per chosen medium
// operation, failing that operation (pmem.Faulty.Inject) and checking:
//
//   - the step that issued it returned an error (ErrIO, or ErrNoSpace),
//     unless the operation was best effort or came after the step's
//     commit point, in which case the step succeeded with its full effect;
//   - every earlier step's result stands (its logical state is the
//     reference run's);
//   - the crash image at the failure passes recovery.Check (orphans
//     aside), mounts, and holds the state before or after the failing
//     step (checkFence: also a crash during its recovery, use, Close and
//     a clean reopen);
//   - the live pool shows the state before or after the step (the bytes
//     the step stored in place aside), closes (a lost range of the
//     step's file may fail Close with ErrIO), and reopens to exactly what
//     it showed, passing recovery.Check.
//
// The run issues thousands of operations, so a deterministic sample is
// failed: every fallocate and punch, and for writes, flushes and fences
// evenly spaced ones, 12 of each (4 of each kind under the race
// detector; DNNFS_INJECT_PER=n: n), writes and flushes also torn (half as
// many); DNNFS_INJECT_ALL=1 fails every one of them (writes also torn).
func TestInjectedFailures(t *testing.T) {
	ref, rf, rtb, stopped := runScript(t, injectCase{})
	if stopped {
		t.Fatalf("reference run: %s", rtb.msg)
	}
	// Operations of each kind after mounting (Nth counts from there).
	base := map[pmem.Op]int{}
	for k, n := range ref.mountOps {
		base[k] = n
	}
	all := os.Getenv("DNNFS_INJECT_ALL") != ""
	per := 12
	if raceEnabled {
		per = 4
	}
	if v, err := strconv.Atoi(os.Getenv("DNNFS_INJECT_PER")); err == nil && v > 0 {
		per = v
	}
	var cases []injectCase
	for _, k := range []pmem.Op{pmem.OpFallocate, pmem.OpPunch, pmem.OpWrite, pmem.OpFlush, pmem.OpFence} {
		n := rf.OpsOf(k) - base[k]
		if n == 0 {
			t.Errorf("the script issues no %s after mounting", k)
		}
		picks := evenly(n, per)
		if all || (!raceEnabled && (k == pmem.OpFallocate || k == pmem.OpPunch)) {
			picks = evenly(n, n)
		}
		for _, i := range picks {
			cases = append(cases, injectCase{kind: k, n: i})
		}
		if k == pmem.OpWrite || k == pmem.OpFlush {
			tornPicks := evenly(n, per/2)
			if all && k == pmem.OpWrite {
				tornPicks = evenly(n, n)
			}
			for _, i := range tornPicks {
				cases = append(cases, injectCase{kind: k, n: i, torn: true})
			}
		}
	}
	var failed, absorbed atomic.Int64
	for _, c := range cases {
		t.Run(c.String(), func(t *testing.T) {
			t.Parallel()
			if checkInjected(t, ref, c) {
				failed.Add(1)
			} else {
				absorbed.Add(1)
			}
		})
	}
	t.Cleanup(func() {
		t.Logf("%d medium operations after mount (%d writes, %d fallocates, %d punches, %d flushes, %d fences); "+
			"%d error states checked (%d injected failures: %d failed their step, %d absorbed by a best-effort or post-commit operation)",
			rf.Ops()-ref.steps[0].ops, rf.OpsOf(pmem.OpWrite)-base[pmem.OpWrite], rf.OpsOf(pmem.OpFallocate)-base[pmem.OpFallocate],
			rf.OpsOf(pmem.OpPunch)-base[pmem.OpPunch], rf.OpsOf(pmem.OpFlush)-base[pmem.OpFlush], rf.OpsOf(pmem.OpFence)-base[pmem.OpFence],
			len(cases), len(cases), failed.Load(), absorbed.Load())
	})
}

// evenly picks up to k of 1..n, evenly spaced, always n itself.
func evenly(n, k int) []int {
	if k >= n {
		k = n
	}
	var out []int
	for i := 1; i <= k; i++ {
		out = append(out, int(math.Ceil(float64(i)*float64(n)/float64(k))))
	}
	return out
}

// stepOf returns the index of the step of s during which operation op
// (Failure.Index) ran.
func stepOf(s *script, op int) int {
	for j, st := range s.steps {
		if st.ops >= op {
			return j
		}
	}
	return len(s.steps)
}

// checkInjected runs the script failing c and checks the outcome. It
// reports whether the failing step returned an error.
func checkInjected(t *testing.T, ref *script, c injectCase) bool {
	s, f, tb, stopped := runScript(t, c)
	fl := f.Failures()
	if len(fl) != 1 {
		t.Fatalf("%d injected failures, want 1 (stopped: %v %s)", len(fl), stopped, tb.msg)
	}
	failStep := stepOf(ref, fl[0].Index)
	if failStep >= len(ref.steps) {
		t.Fatalf("operation %d is past the reference run's last step", fl[0].Index)
	}
	// Every step that returned before the failure (or, if none stopped the
	// script, every step) is as in the reference run.
	for j := range s.steps {
		if d := diffTrees(s.steps[j].snap, ref.steps[j].snap, nil, 5); len(d) > 0 {
			t.Fatalf("step %d %q (failure in step %d %q): state differs from the reference run:\n  %s",
				j, s.steps[j].name, failStep, ref.steps[failStep].name, strings.Join(d, "\n  "))
		}
	}
	if !stopped {
		// The failure was absorbed: best effort (punching freed blocks,
		// clearing a tail past a new end of file), or after the commit
		// point (the next commit finishes applying).
		if len(s.steps) != len(ref.steps) {
			t.Fatalf("the script ran %d steps, the reference %d", len(s.steps), len(ref.steps))
		}
		t.Logf("%s [%d, %d) in step %d %q: absorbed, the step succeeded", fl[0].Op, fl[0].Off, fl[0].Off+fl[0].Len,
			failStep, ref.steps[failStep].name)
		closeAndReopen(t, s, s.steps[len(s.steps)-1].snap, nil, nil)
		return false
	}
	j := len(s.steps)
	if j != failStep {
		t.Fatalf("step %d %q stopped the script (%s), but the failure was in step %d %q",
			j, ref.steps[j].name, tb.msg, failStep, ref.steps[failStep].name)
	}
	if !errors.Is(tb.err, core.ErrIO) && !errors.Is(tb.err, core.ErrNoSpace) {
		t.Fatalf("step %d %q: %s; want ErrIO or ErrNoSpace", j, ref.steps[j].name, tb.msg)
	}
	f.Heal()
	before, after := s.steps[j-1], ref.steps[j]
	inflight := s.inflight

	// The crash image at the failure: before or after, the bytes the step
	// stored in place aside.
	img := s.rec.Image(s.rec.Fences())
	if probs, _, err := checkRecovery(sliceMedium(append([]byte(nil), img...))); err != nil || len(probs) > 0 {
		t.Errorf("crash image at the failure: recovery.Check: %v\n  %s", err, strings.Join(probs, "\n  "))
	}
	s.steps = append(s.steps, step{name: after.name, fences: math.MaxInt, snap: after.snap, durable: after.durable, unsure: after.unsure, inflight: inflight})
	if err := checkFence(s, s.rec.Fences(), img); err != nil {
		t.Errorf("crash image at the failure of step %d %q: %v", j, after.name, err)
	}
	s.steps = s.steps[:j]

	// The live pool.
	live, err := snapshot(s.p)
	if err != nil {
		t.Fatalf("live pool after the failure: %v", err)
	}
	d1 := diffTrees(live, before.snap, inflight, 5)
	if len(d1) > 0 {
		if d2 := diffTrees(live, after.snap, inflight, 5); len(d2) > 0 {
			t.Errorf("live pool after the failure of step %d %q is neither state:\n  vs. before:\n    %s\n  vs. after:\n    %s",
				j, after.name, strings.Join(d1, "\n    "), strings.Join(d2, "\n    "))
		}
	}
	// A file whose delayed writes failed to persist is never committed
	// with them (DESIGN.md §Delayed commit): Close fails, and the file
	// stays as it was on media before the failing step.
	closeAndReopen(t, s, live, core.ErrIO, before.durable)
	return true
}

// closeAndReopen closes the script's pool (a Close error must be okErr)
// and checks that its bytes pass recovery.Check and mount to want; a
// file may instead be as in uncommitted, if that is set.
func closeAndReopen(t *testing.T, s *script, want tree, okErr error, uncommitted tree) {
	t.Helper()
	if err := s.p.Close(); err != nil && (okErr == nil || !errors.Is(err, okErr)) {
		t.Errorf("Close: %v", err)
	}
	m := sliceMedium(append([]byte(nil), s.rec.Bytes()...))
	if probs, _, err := checkRecovery(m); err != nil || len(probs) > 0 {
		t.Errorf("after Close: recovery.Check: %v\n  %s", err, strings.Join(probs, "\n  "))
	}
	p, _, err := core.Open(m, core.Options{CommitInterval: -1})
	if err != nil {
		t.Fatalf("reopen after Close: %v", err)
	}
	got, err := snapshot(p)
	if err != nil {
		t.Fatalf("reopened pool: %v", err)
	}
	if uncommitted != nil {
		w := tree{}
		for path, n := range want {
			w[path] = n
			if u, ok := uncommitted[path]; ok && n.Type == 'f' && u.Ino == n.Ino && got[path] != nil &&
				len(diffTrees(tree{path: got[path]}, tree{path: u}, nil, 1)) == 0 {
				w[path] = u
			}
		}
		want = w
	}
	if d := diffTrees(got, want, nil, 5); len(d) > 0 {
		t.Errorf("reopened pool differs from what the live pool showed:\n  %s", strings.Join(d, "\n  "))
	}
}

// checkRecovery is recovery.Check; orphans are no problem (a mount frees
// them).
func checkRecovery(m pmem.Medium) (problems []string, orphans int, err error) {
	rep, err := recovery.Check(m)
	if err != nil {
		return nil, 0, err
	}
	for _, p := range rep.Problems {
		if strings.Contains(strings.ToLower(p.What), "orphan") {
			orphans++
			continue
		}
		problems = append(problems, p.String())
	}
	return problems, orphans, nil
}
