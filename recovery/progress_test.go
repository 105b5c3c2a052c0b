package recovery_test

import (
	"testing"

	"github.com/dnnfs/dnnfs/recovery"
)

// TestCheckProgress: CheckProgress tells each step in order, from 0 of N
// to N of N, with the same report as Check; RepairProgress on a clean
// pool ends at N of N too.
func TestCheckProgress(t *testing.T) {
	m, _ := buildPool(t)
	type call struct {
		step        string
		done, total int
	}
	var calls []call
	rep, err := recovery.CheckProgress(m, func(step string, done, total int) { calls = append(calls, call{step, done, total}) })
	must(t, err)
	if len(calls) < 3 {
		t.Fatalf("CheckProgress told %d steps: %v", len(calls), calls)
	}
	total := calls[0].total
	for i, c := range calls {
		if c.done != i || c.total != total || c.step == "" {
			t.Errorf("call %d: %+v, want done %d of %d with a step name", i, c, i, total)
		}
	}
	if last := calls[len(calls)-1]; last.done != last.total {
		t.Errorf("the last call is %+v: not done", last)
	}
	if want := check(t, m); problems(rep) != problems(want) || rep.Inodes != want.Inodes {
		t.Errorf("CheckProgress report %s (%d inodes), Check %s (%d)", problems(rep), rep.Inodes, problems(want), want.Inodes)
	}
	calls = nil
	if _, err := recovery.RepairProgress(m, func(step string, done, total int) { calls = append(calls, call{step, done, total}) }); err != nil {
		t.Fatal(err)
	}
	if len(calls) == 0 || calls[len(calls)-1].done != calls[len(calls)-1].total {
		t.Errorf("RepairProgress calls end with %v, want done == total", calls)
	}
}
