package main

// The cluster phase (DESIGN.md §Cluster): a checkpoint written on one
// node and loaded by 1, 2 and 4 others, against plain reads of the same
// objects from the S3 server with rclone.
//
// Layout, all on this machine: one etcd member and one versitygw (posix
// backend, its data directory under --disk-dir) started by the driver and
// stopped by the pids it started; a writer node (peer address 127.0.0.1)
// and up to 4 reader nodes (127.0.0.2 .. 127.0.0.5), each a dnnfs daemon
// with its own pool. The writer writes the file, closes it (the commit
// uploads it to S3) and unmounts: the checkpoint was written by an earlier
// job, so every byte the readers load comes from S3 once, then peer to
// peer. Every round gets fresh reader pools (made, mounted, read,
// unmounted, removed), so nothing is cached from an earlier round.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dnnfs/dnnfs/tests/clusterenv"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// clusterChunk is the chunk size of the benchmark's cluster: the daemon's
// default (--chunk-size 32MiB), given explicitly so the report states it.
const clusterChunk = 32 * MiB

// clusterReaderCounts are the rounds of readers that start together.
var clusterReaderCounts = []int{1, 2, 4}

// clusterS3Counts are the rounds of the S3-only peer: the same concurrency
// as every dnnfs round, and 3 for the staggered round's later readers.
var clusterS3Counts = []int{1, 2, 3, 4}

// clusterLayout is what the report says about where everything ran.
type clusterLayout struct {
	FileBytes   int64             `json:"file_bytes"`
	ChunkBytes  int64             `json:"chunk_bytes"`
	Etcd        string            `json:"etcd"`
	EtcdVersion string            `json:"etcd_version"`
	S3          string            `json:"s3"`
	S3Version   string            `json:"s3_version"`
	S3Dir       string            `json:"s3_dir"`      // versitygw's posix root (on the disk)
	Pools       string            `json:"pools"`       // shm or disk: where the reader pools live
	PoolDir     string            `json:"pool_dir"`    // their directory
	WriterPool  string            `json:"writer_pool"` // the writer's pool directory
	Nodes       map[string]string `json:"nodes"`       // node id -> peer address
	Rclone      string            `json:"rclone"`      // rclone version
	RcloneCmd   string            `json:"rclone_cmd"`  // one S3-only reader's command
	MountCmd    string            `json:"mount_cmd"`   // one reader's mount command
	WriteMiBps  []float64         `json:"write_mibps"` // the writer's write+close (commit), per run
	MemNote     string            `json:"mem_note"`    // why the pools are where they are
	// S3LimitMiBps: when not 0, the nodes and rclone reached S3 through
	// the driver's pacing proxy, all GET replies together at most this fast.
	S3LimitMiBps float64 `json:"s3_limit_mibps,omitempty"`
}

// clusterRound is one round: N readers together, the staggered variant,
// or N S3-only readers.
type clusterRound struct {
	Run     int             `json:"run"`
	Variant string          `json:"variant"` // together, staggered, s3only
	Readers int             `json:"readers"`
	Reader  []clusterReader `json:"reader"`
	// S3Bytes: chunk bytes every node of the round got from S3 (each node's
	// objstore chunk_get_bytes, fills for others included); for s3only the
	// bytes rclone read.
	S3Bytes int64  `json:"s3_bytes"`
	Err     string `json:"error,omitempty"`
}

// clusterReader is one reader of a round.
type clusterReader struct {
	Node    string  `json:"node"`
	Group   int     `json:"group"` // staggered: 1 = the first reader, 2 = the later ones; else 1
	MiBps   float64 `json:"mibps"`
	Seconds float64 `json:"seconds"`
	Bytes   int64   `json:"bytes"`
	Cmd     string  `json:"cmd"`
	// From `dnnfs status --json` after the round: chunk bytes by the
	// source they came from, and the bytes this node got from S3 (its own
	// reads and fills for others).
	Local   int64  `json:"local_bytes"`
	Peer    int64  `json:"peer_bytes"`
	Home    int64  `json:"home_bytes"`
	S3      int64  `json:"s3_bytes"`
	S3Gets  int64  `json:"s3_gets"`
	S3Fetch int64  `json:"s3_fetch_bytes"` // the s3 source of its fetches (its own reads and fills as a home)
	Served  int64  `json:"served_bytes"`   // bytes its chunk server sent to others
	Err     string `json:"error,omitempty"`
}

// clusterResults are the phase's results in results.json.
type clusterResults struct {
	Layout clusterLayout  `json:"layout"`
	Rounds []clusterRound `json:"rounds"`
}

// clusterEnv is the etcd member and the S3 server of the phase.
type clusterEnv struct {
	dir     string // on the disk: etcd's data, versitygw's root, the token
	etcdURL string
	s3Addr  string
	bucket  string
	access  string
	secret  string
	region  string
	token   string // token file
	procs   []*clusterProc
	proxy   *http.Server // the pacing proxy in front of S3, or nil
	pxAddr  string
	paced   bool // the rounds now read S3 through the proxy
}

type clusterProc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// engineBinary finds an engine: $env, $PATH, then $GOPATH/bin (where `make deps`
// puts etcd and versitygw).
func engineBinary(env, name string) string {
	if p := os.Getenv(env); p != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if gp := strings.TrimSpace(output(context.Background(), "", "go", "env", "GOPATH")); gp != "" {
		for _, d := range filepath.SplitList(gp) {
			if st, err := os.Stat(filepath.Join(d, "bin", name)); err == nil && !st.IsDir() {
				return filepath.Join(d, "bin", name)
			}
		}
	}
	return ""
}

// freeAddr returns host:port free on ip a moment ago.
func freeAddr(ip string) (string, error) {
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		return "", fmt.Errorf("choosing a free port on %s: %w", ip, err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startProc starts an engine with its output in log; it dies with the
// driver (Pdeathsig) and is stopped by its pid at stop.
func (e *clusterEnv) startProc(name string, args []string) (*clusterProc, error) {
	log := filepath.Join(e.dir, name+".log")
	lf, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &clusterProc{name: name, cmd: cmd, done: make(chan struct{}), log: log}
	go func() { cmd.Wait(); close(p.done) }()
	e.procs = append(e.procs, p)
	return p, nil
}

// startClusterEnv starts etcd and versitygw in a new directory under dir
// and creates the bucket.
func startClusterEnv(ctx context.Context, dir string) (*clusterEnv, error) {
	etcd := engineBinary("DNNFS_ETCD_BIN", "etcd")
	gw := engineBinary("DNNFS_VERSITYGW_BIN", "versitygw")
	if etcd == "" || gw == "" {
		return nil, fmt.Errorf("etcd (%q) or versitygw (%q) not found: run `make deps` (it builds both into $GOPATH/bin)", etcd, gw)
	}
	d, err := os.MkdirTemp(dir, "dnnfs-bench-cluster.")
	if err != nil {
		return nil, err
	}
	e := &clusterEnv{dir: d, bucket: "dnnfs-bench", access: "dnnfs-bench-access", secret: "dnnfs-bench-secret-key", region: "us-east-1",
		token: filepath.Join(d, "token")}
	if err := os.WriteFile(e.token, []byte(fmt.Sprintf("dnnfs-bench-token-%d\n", time.Now().UnixNano())), 0o600); err != nil {
		return e, err
	}
	client, err := freeAddr("127.0.0.1")
	if err != nil {
		return e, err
	}
	peerAddr, err := freeAddr("127.0.0.1")
	if err != nil {
		return e, err
	}
	e.etcdURL = "http://" + client
	p, err := e.startProc("etcd", []string{etcd, "--name", "b0", "--data-dir", filepath.Join(d, "etcd"),
		"--listen-client-urls", e.etcdURL, "--advertise-client-urls", e.etcdURL,
		"--listen-peer-urls", "http://" + peerAddr, "--initial-advertise-peer-urls", "http://" + peerAddr,
		"--initial-cluster", "b0=http://" + peerAddr, "--initial-cluster-state", "new", "--log-level", "warn"})
	if err != nil {
		return e, err
	}
	if err := waitFor(ctx, p, 60*time.Second, func() bool { return etcdHealthy(e.etcdURL) }); err != nil {
		return e, err
	}
	if e.s3Addr, err = freeAddr("127.0.0.1"); err != nil {
		return e, err
	}
	root := filepath.Join(d, "s3")
	if err := os.Mkdir(root, 0o755); err != nil {
		return e, err
	}
	p, err = e.startProc("versitygw", []string{gw, "--access", e.access, "--secret", e.secret, "--region", e.region,
		"--port", e.s3Addr, "--quiet", "posix", root})
	if err != nil {
		return e, err
	}
	cli, err := e.client()
	if err != nil {
		return e, err
	}
	if err := waitFor(ctx, p, 60*time.Second, func() bool {
		c, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := cli.ListBuckets(c)
		return err == nil
	}); err != nil {
		return e, err
	}
	if err := cli.MakeBucket(ctx, e.bucket, minio.MakeBucketOptions{Region: e.region}); err != nil {
		return e, fmt.Errorf("creating bucket %s: %w", e.bucket, err)
	}
	return e, nil
}

func (e *clusterEnv) client() (*minio.Client, error) {
	return minio.New(e.s3Addr, &minio.Options{Creds: credentials.NewStaticV4(e.access, e.secret, ""),
		Region: e.region, BucketLookup: minio.BucketLookupPath})
}

// s3URL is the S3 endpoint the nodes and rclone use: the server, or the
// pacing proxy in front of it.
func (e *clusterEnv) s3URL() string {
	if e.paced && e.proxy != nil {
		return "http://" + e.pxAddr
	}
	return "http://" + e.s3Addr
}

// startProxy puts a reverse proxy in front of S3 that paces the bodies of
// all its replies together to mibps: a store across a network, shared by
// the nodes, instead of one at memory speed on this machine. Requests and
// their bodies (uploads) pass unpaced. The Host header is kept, so the
// clients' SigV4 signatures (made for the proxy's address) still verify.
func (e *clusterEnv) startProxy(mibps float64) error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("the S3 pacing proxy: %w", err)
	}
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: e.s3Addr})
	pc := &pacer{rate: mibps * float64(MiB)}
	rp.ModifyResponse = func(r *http.Response) error {
		r.Body = &pacedBody{r: r.Body, p: pc}
		return nil
	}
	rp.ErrorLog = log.New(io.Discard, "", 0)
	e.proxy, e.pxAddr = &http.Server{Handler: rp}, l.Addr().String()
	go e.proxy.Serve(l)
	return nil
}

// pacer hands out byte slots at rate bytes/s to all its users together,
// in the order they ask.
type pacer struct {
	mu   sync.Mutex
	rate float64
	next time.Time
}

// pacerCredit is how far the schedule may lag behind the clock: a sleep
// overshoots by up to a millisecond or so, and a schedule reset to now at
// every wait would lose that each time (the rate would be bounded by the
// timer, not by the pacer).
const pacerCredit = 50 * time.Millisecond

// wait returns when n more bytes fit in the rate.
func (p *pacer) wait(n int) {
	p.mu.Lock()
	now := time.Now()
	if p.next.Before(now.Add(-pacerCredit)) {
		p.next = now.Add(-pacerCredit)
	}
	p.next = p.next.Add(time.Duration(float64(n) / p.rate * float64(time.Second)))
	at := p.next
	p.mu.Unlock()
	time.Sleep(time.Until(at))
}

type pacedBody struct {
	r io.ReadCloser
	p *pacer
}

func (b *pacedBody) Read(buf []byte) (int, error) {
	if len(buf) > 64<<10 {
		buf = buf[:64<<10]
	}
	n, err := b.r.Read(buf)
	if n > 0 {
		b.p.wait(n)
	}
	return n, err
}

func (b *pacedBody) Close() error { return b.r.Close() }

// awsEnv is the environment of the daemons and of rclone: the S3
// credentials, the standard way.
func (e *clusterEnv) awsEnv() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + e.access, "AWS_SECRET_ACCESS_KEY=" + e.secret, "AWS_REGION=" + e.region}
}

// rcloneEnv configures rclone's remote "bench" by environment (no config
// file): an S3 remote of the server, path-style.
func (e *clusterEnv) rcloneEnv() []string {
	return []string{"RCLONE_CONFIG=" + filepath.Join(e.dir, "rclone.conf"),
		"RCLONE_CONFIG_BENCH_TYPE=s3", "RCLONE_CONFIG_BENCH_PROVIDER=Other",
		"RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=" + e.access, "RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=" + e.secret,
		"RCLONE_CONFIG_BENCH_REGION=" + e.region, "RCLONE_CONFIG_BENCH_ENDPOINT=" + e.s3URL(),
		"RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE=true"}
}

// withoutEnv drops the variable name from env. rclone's S3 SDK fails on
// AWS_CA_BUNDLE ("unable to load custom CA bundle") with rclone's own
// transport; the server speaks plain HTTP anyway.
func withoutEnv(env []string, name string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// waitFor polls ok until it holds, p exits or the time is up.
func waitFor(ctx context.Context, p *clusterProc, limit time.Duration, ok func() bool) error {
	deadline := time.Now().Add(limit)
	for !ok() {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited at start: %s", p.name, tailFile(p.log, 1500))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %s", p.name, limit, tailFile(p.log, 1500))
		}
	}
	return nil
}

func etcdHealthy(url string) bool {
	return clusterenv.EtcdHealthy(&http.Client{Timeout: 2 * time.Second}, url)
}

// stop kills the engines by the pids it started and removes the directory.
func (e *clusterEnv) stop() {
	if e == nil {
		return
	}
	for i := len(e.procs) - 1; i >= 0; i-- {
		p := e.procs[i]
		select {
		case <-p.done:
			continue
		default:
		}
		syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			syscall.Kill(p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	e.procs = nil
	if e.proxy != nil {
		e.proxy.Close()
	}
	if e.dir != "" && !anyMountUnder(e.dir) {
		os.RemoveAll(e.dir)
	}
}

// node makes a cluster node (not yet started): id, peer IP 127.0.0.ip,
// pool in poolDir.
func (b *Bench) clusterNode(e *clusterEnv, id string, ip int, poolDir string) (*System, error) {
	addr, err := freeAddr(fmt.Sprintf("127.0.0.%d", ip))
	if err != nil {
		return nil, err
	}
	s := &System{Name: "cluster-" + id, kind: "dnnfs", lock: "range", b: b,
		Desc: "dnnfs cluster node " + id + " (peer " + addr + ")",
		dir:  filepath.Join(b.w, "mnt", "cluster-"+id), pool: filepath.Join(poolDir, "pool-"+id)}
	s.logPath = filepath.Join(b.logs, s.Name+".log")
	s.extra = []string{"--etcd", e.etcdURL, "--s3-endpoint", e.s3URL(), "--s3-bucket", e.bucket,
		"--node-id", id, "--peer-listen", addr, "--cluster-token-file", e.token, "--peer-insecure",
		"--chunk-size", sizeName(clusterChunk)}
	s.env = e.awsEnv()
	if b.cluster != nil {
		b.cluster.Layout.Nodes[id] = fmt.Sprintf("127.0.0.%d", ip)
	}
	return s, nil
}

// nodeStatus is the part of `dnnfs status --json` the phase reads.
type nodeStatus struct {
	Cluster *struct {
		Node  string `json:"node"`
		FSID  string `json:"fsid"`
		Fetch struct {
			Local       srcStats `json:"local"`
			Peer        srcStats `json:"peer"`
			Home        srcStats `json:"home"`
			S3          srcStats `json:"s3"`
			ServedBytes int64    `json:"served_bytes"`
		} `json:"fetch"`
		S3 struct {
			ChunkGets     int64 `json:"chunk_gets"`
			ChunkGetBytes int64 `json:"chunk_get_bytes"`
			PutBytes      int64 `json:"put_bytes"`
		} `json:"s3"`
		Held []struct {
			ID      string `json:"id"`
			Version uint64 `json:"version"`
		} `json:"held"`
	} `json:"cluster"`
}

type srcStats struct {
	Requests int64 `json:"requests"`
	Hits     int64 `json:"hits"`
	Bytes    int64 `json:"bytes"`
}

func (b *Bench) nodeStatus(ctx context.Context, s *System) (*nodeStatus, error) {
	out, err := exec.CommandContext(ctx, b.dnnfs, "status", "--json", s.dir).Output()
	if err != nil {
		return nil, fmt.Errorf("dnnfs status --json %s: %w", s.dir, err)
	}
	var st nodeStatus
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("dnnfs status --json %s: %w", s.dir, err)
	}
	if st.Cluster == nil {
		return nil, fmt.Errorf("dnnfs status --json %s: no cluster section (is the daemon a cluster node?)", s.dir)
	}
	return &st, nil
}

// memAvailable is /proc/meminfo's MemAvailable in bytes (0 if unknown).
func memAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// runCluster is one run of the cluster phase.
func (b *Bench) runCluster(ctx context.Context, run int) error {
	size := b.p.ClusterBytes
	if b.cenv == nil {
		if _, err := exec.LookPath("rclone"); err != nil {
			return errors.New("rclone is missing and could not be installed (apt-get install rclone): it is the S3-only peer")
		}
		b.logf("cluster: starting etcd and versitygw (data under %s)", b.o.diskDir)
		e, err := startClusterEnv(ctx, b.o.diskDir)
		b.cenv = e
		if err != nil {
			return fmt.Errorf("starting the cluster's engines: %w", err)
		}
		if b.o.clusterS3MiBps > 0 {
			if err := e.startProxy(b.o.clusterS3MiBps); err != nil {
				return err
			}
			b.logf("cluster: S3 through a proxy pacing its replies to %g MiB/s in all", b.o.clusterS3MiBps)
		}
		b.cluster = &clusterResults{Layout: b.clusterLayout(e, size)}
		b.cluster.Layout.S3LimitMiBps = 0 // section 5 reads S3 directly; 5b through the proxy
	}
	e, lay := b.cenv, &b.cluster.Layout
	if err := os.MkdirAll(lay.PoolDir, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(lay.WriterPool, 0o755); err != nil {
		return err
	}

	// The checkpoint, written and closed on the writer, which then leaves.
	name := fmt.Sprintf("ckpt-%d", run)
	w, err := b.clusterNode(e, "w", 1, lay.WriterPool)
	if err != nil {
		return err
	}
	if err := w.Start(ctx, size); err != nil {
		return fmt.Errorf("writer: %w", err)
	}
	buf := make([]byte, MiB)
	fillRandom(buf, uint64(run)+11)
	start := time.Now()
	err = writeFile(filepath.Join(w.dir, name), size, buf)
	wsec := time.Since(start).Seconds()
	var ref string
	if err == nil {
		var st *nodeStatus
		if st, err = b.nodeStatus(ctx, w); err == nil {
			for _, h := range st.Cluster.Held {
				ref = fmt.Sprintf("%s/%s/%d", st.Cluster.FSID, h.ID, h.Version)
			}
			if ref == "" || len(st.Cluster.Held) != 1 {
				err = fmt.Errorf("the writer holds %d file versions after the close, want 1", len(st.Cluster.Held))
			} else if st.Cluster.S3.PutBytes < size {
				err = fmt.Errorf("the writer put %d bytes to S3, want at least %d", st.Cluster.S3.PutBytes, size)
			}
		}
	}
	if serr := w.Stop(); serr != nil && err == nil {
		err = fmt.Errorf("writer: %w", serr)
	}
	if err != nil {
		return fmt.Errorf("writing the checkpoint on the writer: %w", err)
	}
	lay.WriteMiBps = append(lay.WriteMiBps, float64(size)/float64(MiB)/wsec)
	b.logf("  cluster: wrote %s on w and closed it (committed) at %.0f MiB/s; the writer left; objects %s/", sizeName(size), float64(size)/float64(MiB)/wsec, ref)

	if err := b.clusterRounds(ctx, run, name, ref, buf); err != nil {
		return err
	}
	// Once, in the first run: the same rounds on the same checkpoint with
	// S3 behind the pacing proxy (section 5b), a store across a network.
	if run == 0 && e.proxy != nil {
		b.logf("cluster: the same rounds with S3 paced to %g MiB/s in all", b.o.clusterS3MiBps)
		direct := b.cluster
		if b.clusterPaced == nil {
			b.clusterPaced = &clusterResults{Layout: direct.Layout}
			b.clusterPaced.Layout.Nodes = map[string]string{}
			b.clusterPaced.Layout.S3LimitMiBps = b.o.clusterS3MiBps
		}
		b.cluster, e.paced = b.clusterPaced, true
		err := b.clusterRounds(ctx, run, name, ref, buf)
		b.cluster, e.paced = direct, false
		if err != nil {
			return err
		}
	}
	// The next run writes its own file; this one's objects stay on the
	// disk until the engines stop.
	return ctx.Err()
}

// clusterRounds reads the checkpoint with 1, 2 and 4 readers at once, 4
// staggered, and 1 to 4 S3-only readers, into b.cluster.
func (b *Bench) clusterRounds(ctx context.Context, run int, name, ref string, buf []byte) error {
	for _, n := range clusterReaderCounts {
		b.clusterRound(ctx, run, "together", n, name, buf)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	b.clusterRound(ctx, run, "staggered", 4, name, buf)
	for _, n := range clusterS3Counts {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		b.s3OnlyRound(ctx, run, n, ref)
	}
	return ctx.Err()
}

func (b *Bench) clusterLayout(e *clusterEnv, size int64) clusterLayout {
	lay := clusterLayout{FileBytes: size, ChunkBytes: clusterChunk, Etcd: e.etcdURL, S3: e.s3URL(), S3LimitMiBps: b.o.clusterS3MiBps,
		S3Dir: filepath.Join(e.dir, "s3"), Nodes: map[string]string{}, WriterPool: filepath.Join(b.w, "cluster-pools")}
	lay.EtcdVersion = firstLine(output(context.Background(), "", engineBinary("DNNFS_ETCD_BIN", "etcd"), "--version"))
	lay.S3Version = moduleVersion(engineBinary("DNNFS_VERSITYGW_BIN", "versitygw"), "github.com/versity/versitygw")
	lay.Rclone = firstLine(output(context.Background(), "", "rclone", "version"))
	need := 4*poolSize(size) + size + 2*GiB // reader pools, the S3 files in the page cache, room
	avail := memAvailable()
	pools := b.o.clusterPools
	if pools == "" || pools == "auto" {
		pools = "disk"
		if avail > need {
			pools = "shm"
		}
		lay.MemNote = fmt.Sprintf("4 reader pools of %s, the file in the page cache and 2 GiB of room need %s; %s were available at the start",
			sizeName(poolSize(size)), gibs(need), gibs(avail))
	} else {
		lay.MemNote = "chosen with -cluster-pools " + pools
	}
	lay.Pools = pools
	if pools == "shm" {
		lay.PoolDir = filepath.Join(b.w, "cluster-pools")
	} else {
		lay.PoolDir = filepath.Join(e.dir, "pools")
	}
	return lay
}

// moduleVersion is "path version" of a Go binary's main module (`go
// version -m`): versitygw built by `go install` says only "git" itself.
func moduleVersion(bin, path string) string {
	for _, l := range strings.Split(output(context.Background(), "", "go", "version", "-m", bin), "\n") {
		if f := strings.Fields(l); len(f) >= 3 && f[0] == "mod" && f[1] == path {
			return "versitygw " + f[2]
		}
	}
	return "versitygw (version unknown)"
}

func gibs(n int64) string { return fmt.Sprintf("%.1f GiB", float64(n)/float64(GiB)) }

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// clusterRound mounts n fresh readers, has them read the file (all
// together, or reader 1 first and the others after it), records each
// reader's rate and sources, and removes them again.
func (b *Bench) clusterRound(ctx context.Context, run int, variant string, n int, name string, pattern []byte) {
	e, lay := b.cenv, &b.cluster.Layout
	r := clusterRound{Run: run, Variant: variant, Readers: n}
	b.logf("  cluster: %d reader(s), %s", n, variant)
	var nodes []*System
	defer func() {
		for _, s := range nodes {
			if err := s.Stop(); err != nil {
				b.fail(s.Name, "unmount after cluster "+variant, s.mountCmd, err)
			}
		}
		b.cluster.Rounds = append(b.cluster.Rounds, r)
	}()
	fail := func(err error) {
		r.Err = err.Error()
		b.fail("dnnfs-cluster", fmt.Sprintf("cluster %s, %d reader(s)", variant, n), "", err)
	}
	for i := 1; i <= n; i++ {
		s, err := b.clusterNode(e, fmt.Sprintf("r%d", i), i+1, lay.PoolDir)
		if err != nil {
			fail(err)
			return
		}
		nodes = append(nodes, s)
		if err := s.Start(ctx, lay.FileBytes); err != nil {
			fail(err)
			return
		}
		lay.MountCmd = s.mountCmd
	}
	// A new mount sees the committed file once its name is there (the
	// name watch or a lookup in etcd).
	for _, s := range nodes {
		if err := waitFile(ctx, filepath.Join(s.dir, name), lay.FileBytes); err != nil {
			fail(err)
			return
		}
	}
	r.Reader = make([]clusterReader, n)
	read := func(idx []int, group int) {
		var wg sync.WaitGroup
		for _, i := range idx {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				r.Reader[i] = b.clusterRead(ctx, nodes[i], name, lay.FileBytes, group)
			}(i)
		}
		wg.Wait()
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	if variant == "staggered" {
		read(all[:1], 1)
		read(all[1:], 2)
	} else {
		read(all, 1)
	}
	if err := verifySample(filepath.Join(nodes[n-1].dir, name), lay.FileBytes, pattern); err != nil {
		fail(err)
	}
	for i, s := range nodes {
		st, err := b.nodeStatus(ctx, s)
		if err != nil {
			if r.Reader[i].Err == "" {
				r.Reader[i].Err = err.Error()
			}
			continue
		}
		c := st.Cluster
		rd := &r.Reader[i]
		rd.Local, rd.Peer, rd.Home, rd.S3Fetch = c.Fetch.Local.Bytes, c.Fetch.Peer.Bytes, c.Fetch.Home.Bytes, c.Fetch.S3.Bytes
		rd.S3, rd.S3Gets, rd.Served = c.S3.ChunkGetBytes, c.S3.ChunkGets, c.Fetch.ServedBytes
		r.S3Bytes += c.S3.ChunkGetBytes
	}
	var rates []string
	for _, rd := range r.Reader {
		rates = append(rates, fmt.Sprintf("%s %.0f MiB/s (S3 %s)", rd.Node, rd.MiBps, sizeName(rd.S3)))
	}
	b.logf("    %s; S3 total %.2f× the file", strings.Join(rates, ", "), float64(r.S3Bytes)/float64(lay.FileBytes))
}

// clusterRead reads the whole file on s with fio, 1 MiB reads.
func (b *Bench) clusterRead(ctx context.Context, s *System, name string, size int64, group int) clusterReader {
	rd := clusterReader{Node: strings.TrimPrefix(s.Name, "cluster-"), Group: group}
	args := []string{"--directory=" + s.dir, "--filename=" + name, "--name=load", "--ioengine=psync",
		"--rw=read", "--bs=1M", fmt.Sprintf("--size=%d", size), "--invalidate=0"}
	start := time.Now()
	res, cmd, err := b.fio(ctx, nil, args)
	rd.Seconds, rd.Cmd = time.Since(start).Seconds(), cmd
	if err == nil && len(res) != 1 {
		err = fmt.Errorf("fio reported %d groups, want 1", len(res))
	}
	if err == nil {
		rd.MiBps, rd.Bytes = res[0].ReadBW/float64(MiB), res[0].ReadBytes
		if rd.Bytes < size {
			err = fmt.Errorf("fio read %d bytes of %d", rd.Bytes, size)
		}
	}
	if err != nil {
		rd.Err = err.Error()
		rd.MiBps = 0
		b.fail(s.Name, "cluster read", cmd, err)
	}
	return rd
}

// waitFile waits until path exists with the size (the name reaches a new
// node through etcd).
func waitFile(ctx context.Context, path string, size int64) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		st, err := os.Stat(path)
		if err == nil && st.Size() == size {
			return nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("size %d, want %d", st.Size(), size)
			}
			return fmt.Errorf("%s not there 30 s after the mount: %w", path, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// verifySample compares the first, a middle and the last MiB of the file
// read on a reader with what writeFile wrote (the pattern, its first byte
// the block number): the readers loaded the writer's bytes.
func verifySample(path string, size int64, pattern []byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	want := make([]byte, MiB)
	got := make([]byte, MiB)
	for _, off := range []int64{0, size / 2 / MiB * MiB, (size - 1) / MiB * MiB} {
		n := min(MiB, size-off)
		copy(want, pattern)
		want[0] = byte(off >> 20)
		if _, err := f.ReadAt(got[:n], off); err != nil && err != io.EOF {
			return fmt.Errorf("reading %s at %d: %w", path, off, err)
		}
		if string(got[:n]) != string(want[:n]) {
			return fmt.Errorf("%s: the MiB at %d differs from what the writer wrote", path, off)
		}
	}
	return nil
}

// s3OnlyRound has n rclone processes read the checkpoint's objects from
// the S3 server at once, each all of them, to a counter.
func (b *Bench) s3OnlyRound(ctx context.Context, run, n int, ref string) {
	e, lay := b.cenv, &b.cluster.Layout
	r := clusterRound{Run: run, Variant: "s3only", Readers: n, Reader: make([]clusterReader, n)}
	b.logf("  cluster: %d S3-only reader(s) (rclone cat)", n)
	args := []string{"rclone", "-q", "cat", "bench:" + e.bucket + "/" + ref, "--exclude", "manifest"}
	cmdLine := shellJoin(args)
	lay.RcloneCmd = "RCLONE_CONFIG_BENCH_TYPE=s3 RCLONE_CONFIG_BENCH_PROVIDER=Other RCLONE_CONFIG_BENCH_ENDPOINT=" + e.s3URL() +
		" RCLONE_CONFIG_BENCH_ACCESS_KEY_ID=… RCLONE_CONFIG_BENCH_SECRET_ACCESS_KEY=… RCLONE_CONFIG_BENCH_FORCE_PATH_STYLE=true " + cmdLine
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			rd := clusterReader{Node: fmt.Sprintf("rclone%d", i+1), Group: 1, Cmd: cmdLine}
			cmd := exec.CommandContext(ctx, args[0], args[1:]...)
			cmd.Env = append(withoutEnv(os.Environ(), "AWS_CA_BUNDLE"), e.rcloneEnv()...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err == nil {
				start := time.Now()
				if err = cmd.Start(); err == nil {
					buf := make([]byte, MiB)
					rd.Bytes, err = readAll(out, buf)
					if werr := cmd.Wait(); err == nil && werr != nil {
						err = fmt.Errorf("%s: %v: %s", cmdLine, werr, tail(stderr.String(), 800))
					}
				}
				rd.Seconds = time.Since(start).Seconds()
			}
			if err == nil && rd.Bytes != lay.FileBytes {
				err = fmt.Errorf("%s read %d bytes, want %d: %s", cmdLine, rd.Bytes, lay.FileBytes, tail(stderr.String(), 800))
			}
			if err != nil {
				rd.Err = err.Error()
				b.fail("s3-rclone", fmt.Sprintf("S3-only read, %d reader(s)", n), cmdLine, err)
			} else {
				rd.MiBps = float64(rd.Bytes) / float64(MiB) / rd.Seconds
			}
			rd.S3 = rd.Bytes
			r.Reader[i] = rd
		}(i)
	}
	wg.Wait()
	var rates []string
	for _, rd := range r.Reader {
		r.S3Bytes += rd.Bytes
		rates = append(rates, fmt.Sprintf("%.0f", rd.MiBps))
	}
	b.logf("    rclone: %s MiB/s", strings.Join(rates, ", "))
	b.cluster.Rounds = append(b.cluster.Rounds, r)
}
