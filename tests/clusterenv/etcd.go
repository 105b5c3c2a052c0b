package clusterenv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/build"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequireEnv is the variable that turns a missing engine binary from a
// skip into a failure.
const RequireEnv = "DNNFS_REQUIRE_CLUSTER"

// EtcdBinEnv names the etcd binary to use instead of looking it up.
const EtcdBinEnv = "DNNFS_ETCD_BIN"

// startWait bounds how long a member may take to become healthy; it is a
// guard against a hung start, not a measurement.
const startWait = 60 * time.Second

// Etcd is a running etcd cluster started by StartEtcd.
type Etcd struct {
	t       testing.TB
	bin     string
	certs   *TestCerts // clients speak TLS with a client certificate; nil: plain HTTP
	token   string
	initial string // --initial-cluster
	members []*member
}

type member struct {
	name    string
	dir     string // data directory
	log     string // the process's stdout and stderr
	client  string // http://127.0.0.1:port
	peer    string
	mu      sync.Mutex // started, log
	started int        // starts so far, for the log's name
	proc
}

// EtcdBin returns the etcd binary's path, or "" when there is none:
// $DNNFS_ETCD_BIN, `etcd` on $PATH, or $GOPATH/bin, where `make deps`
// builds it.
func EtcdBin() string { return findBin(EtcdBinEnv, "etcd") }

// findBin returns the path of an engine binary: $env, else name on $PATH,
// else $GOPATH/bin/name; "" when there is none.
func findBin(env, name string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		gopath = build.Default.GOPATH
	}
	for _, dir := range filepath.SplitList(gopath) {
		p := filepath.Join(dir, "bin", name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// needBinary skips or fails t for a missing engine binary (see the package
// doc).
func needBinary(t testing.TB, what, hint string) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("clusterenv: %s not found and %s is set: %s", what, RequireEnv, hint)
	}
	t.Skipf("clusterenv: %s not found (%s)", what, hint)
}

// StartEtcd starts an etcd cluster of the given number of members on free
// 127.0.0.1 ports and returns once every member reports healthy. The
// members are killed (SIGKILL, by pid) at t.Cleanup.
func StartEtcd(t testing.TB, members int) *Etcd {
	t.Helper()
	return startEtcdWith(t, members, nil)
}

// StartEtcdTLS is StartEtcd with https client URLs that require a client
// certificate signed by certs' CA (the members talk to each other in plain
// HTTP).
func StartEtcdTLS(t testing.TB, members int, certs *TestCerts) *Etcd {
	t.Helper()
	return startEtcdWith(t, members, certs)
}

func startEtcdWith(t testing.TB, members int, certs *TestCerts) *Etcd {
	t.Helper()
	if members < 1 {
		t.Fatalf("clusterenv: StartEtcd(%d): need at least one member", members)
	}
	bin := EtcdBin()
	if bin == "" {
		needBinary(t, "etcd", "run `make deps`, or set "+EtcdBinEnv)
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		t.Fatalf("clusterenv: etcd binary %q: not a file (%v)", bin, err)
	}
	// A port chosen free may be taken by someone else before etcd binds
	// it; then the whole cluster is started again on new ports.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		e, err := startEtcd(t, bin, members, certs)
		if err == nil {
			return e
		}
		lastErr = err
		if !errors.Is(err, errPortTaken) {
			break
		}
	}
	t.Fatalf("clusterenv: %v", lastErr)
	return nil
}

var errPortTaken = errors.New("a chosen port was taken")

func startEtcd(t testing.TB, bin string, n int, certs *TestCerts) (*Etcd, error) {
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if certs != nil {
		scheme = "https"
	}
	e := &Etcd{t: t, bin: bin, certs: certs, token: fmt.Sprintf("dnnfs-test-%d-%d", os.Getpid(), time.Now().UnixNano())}
	root := t.TempDir()
	var initial []string
	for i := 0; i < n; i++ {
		m := &member{
			name:   fmt.Sprintf("m%d", i),
			dir:    filepath.Join(root, fmt.Sprintf("m%d", i)),
			client: fmt.Sprintf("%s://127.0.0.1:%d", scheme, ports[2*i]),
			peer:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
		}
		e.members = append(e.members, m)
		initial = append(initial, m.name+"="+m.peer)
	}
	e.initial = strings.Join(initial, ",")
	t.Cleanup(e.killAll)
	for i := range e.members {
		if err := e.spawn(i); err != nil {
			e.killAll()
			return nil, err
		}
	}
	for i := range e.members {
		if err := e.waitHealthy(i); err != nil {
			e.killAll()
			return nil, err
		}
	}
	return e, nil
}

// freePorts returns n distinct ports that were free on 127.0.0.1 a moment
// ago (all held open together, so they differ).
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var ports []int
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("choosing a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// spawn starts member i's process (its data directory decides whether it
// joins as new or restarts from its own state).
func (e *Etcd) spawn(i int) error {
	m := e.members[i]
	m.mu.Lock()
	defer m.mu.Unlock()
	m.started++
	m.log = filepath.Join(filepath.Dir(m.dir), fmt.Sprintf("%s.%d.log", m.name, m.started))
	state := "new"
	if m.started > 1 {
		state = "existing"
	}
	args := []string{
		"--name", m.name,
		"--data-dir", m.dir,
		"--listen-client-urls", m.client,
		"--advertise-client-urls", m.client,
		"--listen-peer-urls", m.peer,
		"--initial-advertise-peer-urls", m.peer,
		"--initial-cluster", e.initial,
		"--initial-cluster-state", state,
		"--initial-cluster-token", e.token,
		// Short raft timings so a killed member's leadership moves in
		// well under a second; the tests run on one machine.
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		// Test data: fsync buys nothing and costs much on a shared disk.
		"--unsafe-no-fsync",
		"--log-level", "warn",
	}
	if e.certs != nil {
		args = append(args, "--cert-file", e.certs.ServerCert, "--key-file", e.certs.ServerKey,
			"--trusted-ca-file", e.certs.CA, "--client-cert-auth")
	}
	if err := m.launch(e.bin, args, m.log); err != nil {
		return fmt.Errorf("starting etcd member %s: %w", m.name, err)
	}
	return nil
}

// waitHealthy waits until member i answers /health with "true" (it has a
// leader and its cluster has a quorum).
func (e *Etcd) waitHealthy(i int) error {
	m := e.members[i]
	exited := m.done()
	hc := e.httpClient()
	deadline := time.Now().Add(startWait)
	for {
		select {
		case <-exited:
			log := tail(m.log)
			if strings.Contains(log, "address already in use") {
				return fmt.Errorf("etcd member %s: %w:\n%s", m.name, errPortTaken, log)
			}
			return fmt.Errorf("etcd member %s exited at start:\n%s", m.name, log)
		default:
		}
		if e.healthy(hc, m.client) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("etcd member %s not healthy after %v:\n%s", m.name, startWait, tail(m.log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (e *Etcd) httpClient() *http.Client {
	hc := &http.Client{Timeout: 2 * time.Second}
	if e.certs != nil {
		hc.Transport = &http.Transport{TLSClientConfig: e.certs.ClientTLS(), DisableKeepAlives: true}
	}
	return hc
}

func (e *Etcd) healthy(hc *http.Client, client string) bool { return EtcdHealthy(hc, client) }

// EtcdHealthy reports whether the etcd member at client URL answers
// /health with "true" (it has a leader and a quorum).
func EtcdHealthy(hc *http.Client, client string) bool {
	resp, err := hc.Get(client + "/health")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var h struct {
		Health string `json:"health"`
	}
	return resp.StatusCode == http.StatusOK && json.NewDecoder(resp.Body).Decode(&h) == nil && h.Health == "true"
}

// tail returns the end of a log file for a failure message.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(bytes.TrimSpace(b))
}

// Endpoints returns every member's client URL.
func (e *Etcd) Endpoints() []string {
	var eps []string
	for _, m := range e.members {
		eps = append(eps, m.client)
	}
	return eps
}

// Endpoint returns member i's client URL.
func (e *Etcd) Endpoint(i int) string { return e.members[i].client }

// Members returns the number of members.
func (e *Etcd) Members() int { return len(e.members) }

// Pid returns member i's process id, or 0 when it is not running.
func (e *Etcd) Pid(i int) int { return e.members[i].pid() }

// Kill sends SIGKILL to member i by its pid and waits until it has exited.
func (e *Etcd) Kill(i int) {
	e.t.Helper()
	if err := e.kill(i); err != nil {
		e.t.Fatalf("clusterenv: killing etcd member %d: %v", i, err)
	}
}

func (e *Etcd) kill(i int) error { return e.members[i].kill() }

// Restart starts member i again (after Kill) from its own data directory
// and waits until it is healthy.
func (e *Etcd) Restart(i int) {
	e.t.Helper()
	if e.Pid(i) != 0 {
		e.t.Fatalf("clusterenv: Restart(%d): member is running", i)
	}
	if err := e.spawn(i); err != nil {
		e.t.Fatalf("clusterenv: %v", err)
	}
	if err := e.waitHealthy(i); err != nil {
		e.t.Fatalf("clusterenv: %v", err)
	}
}

// StartMember starts member i again (after Kill) without waiting for it to
// be healthy: after all members were killed, none is healthy before a
// quorum is back (then WaitHealthy).
func (e *Etcd) StartMember(i int) {
	e.t.Helper()
	if e.Pid(i) != 0 {
		e.t.Fatalf("clusterenv: StartMember(%d): member is running", i)
	}
	if err := e.spawn(i); err != nil {
		e.t.Fatalf("clusterenv: %v", err)
	}
}

// KillAll kills every member (by pid), as at cleanup.
func (e *Etcd) KillAll() { e.killAll() }

func (e *Etcd) killAll() {
	for i := range e.members {
		if err := e.kill(i); err != nil {
			e.t.Errorf("clusterenv: killing etcd member %d: %v", i, err)
		}
	}
}

// WaitHealthy waits until member i reports healthy (e.g. after the others
// were restarted and the quorum is back).
func (e *Etcd) WaitHealthy(i int) {
	e.t.Helper()
	if err := e.waitHealthy(i); err != nil {
		e.t.Fatalf("clusterenv: %v", err)
	}
}

// Health reports whether member i answers /health with "true" right now.
func (e *Etcd) Health(i int) bool {
	return e.healthy(e.httpClient(), e.members[i].client)
}

// String names the cluster for logs.
func (e *Etcd) String() string {
	var s []string
	for i, m := range e.members {
		s = append(s, m.name+"@"+m.client+" pid "+strconv.Itoa(e.Pid(i)))
	}
	return "etcd[" + strings.Join(s, ", ") + "]"
}
