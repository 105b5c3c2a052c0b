package clusterenv

import "testing"

// TestEtcdKillRestart starts a real 3-member cluster, kills one member by
// its pid and restarts it from its data directory.
func TestEtcdKillRestart(t *testing.T) {
	e := StartEtcd(t, 3)
	if len(e.Endpoints()) != 3 {
		t.Fatalf("endpoints %v", e.Endpoints())
	}
	pid := e.Pid(1)
	e.Kill(1)
	if e.Pid(1) != 0 || e.Health(1) {
		t.Fatalf("member 1 (pid %d) still up after Kill", pid)
	}
	// Two of three keep a quorum.
	e.WaitHealthy(0)
	e.WaitHealthy(2)
	e.Restart(1)
	if e.Pid(1) == 0 || e.Pid(1) == pid {
		t.Fatalf("member 1 pid %d after Restart (was %d)", e.Pid(1), pid)
	}
	t.Log(e)
}
