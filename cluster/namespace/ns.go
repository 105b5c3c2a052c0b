package namespace

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Defaults of Config.
const (
	DefaultPrefix      = "/dnnfs"
	DefaultDialTimeout = 5 * time.Second
	DefaultLeaseTTL    = 5 * time.Second
	DefaultOpTimeout   = 5 * time.Second
	DefaultChunkSize   = 16 << 20
	DefaultMaxTxnOps   = 128
)

// Config says how to reach etcd and who this node is.
type Config struct {
	// Endpoints are etcd client URLs (http://host:port, https://host:port)
	// or host:port (plain HTTP).
	Endpoints []string
	// Prefix of every key (--etcd-prefix); DefaultPrefix when empty.
	Prefix string
	// Node is this daemon's --node-id.
	Node NodeID
	// PeerURL is where this node's chunk server answers (in nodes/<node>).
	PeerURL string
	// TLS for https endpoints (client certificate, CA); nil uses the
	// system roots for https endpoints.
	TLS *tls.Config
	// DialTimeout bounds Open's connection and first requests when ctx
	// has no deadline; DefaultDialTimeout when zero.
	DialTimeout time.Duration
	// LeaseTTL of the node lease (rounded up to whole seconds): how long
	// a killed node's records outlive it. DefaultLeaseTTL when zero.
	LeaseTTL time.Duration
	// OpTimeout bounds every call whose ctx has no deadline, so no call
	// waits for an unreachable etcd forever; DefaultOpTimeout when zero.
	OpTimeout time.Duration
	// ChunkSize is the cluster's chunk size if this node creates the
	// fsid record; an existing record's wins. DefaultChunkSize when zero.
	ChunkSize int64
	// MaxTxnOps is etcd's --max-txn-ops (DefaultMaxTxnOps, etcd's own
	// default, when zero): a directory rename moves up to half as many
	// files in its one transaction.
	MaxTxnOps int
	// Logger for lease loss and watch restarts; none when nil.
	Logger *zap.Logger
}

// NS is this node's connection to the cluster's namespace in etcd.
type NS struct {
	cfg       Config
	cli       *clientv3.Client
	prefix    string // cfg.Prefix + "/"
	fsid      FSID
	chunkSize int64
	log       *zap.Logger
	self      NodeInfo

	ctx    context.Context // canceled by Close
	closed atomic.Bool
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	lease     clientv3.LeaseID // 0 while lost
	leaseErr  error            // why there is no lease (ErrDuplicateNode is final)
	nodes     map[NodeID]NodeInfo
	nodesFns  []func([]NodeInfo)
	holdings  map[FileVersion]Chunks // this node's holder records
	dirty     map[FileVersion]bool   // holdings not yet written
	writers   map[FileID]clientv3.LeaseID
	flushMu   sync.Mutex // serializes holder record writes
	flushKick chan struct{}
}

// Open connects to etcd, reads or creates the fsid record, registers this
// node under a fresh lease (ErrDuplicateNode if the node id is taken),
// keeps the lease alive and follows the live nodes. Close undoes it.
func Open(ctx context.Context, cfg Config) (*NS, error) {
	if err := cfg.Node.Valid(); err != nil {
		return nil, err
	}
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: no etcd endpoints", ErrInvalid)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !strings.HasPrefix(cfg.Prefix, "/") || strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("%w: etcd prefix %q: must start with '/' and not end with one", ErrInvalid, cfg.Prefix)
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.LeaseTTL <= 0 {
		cfg.LeaseTTL = DefaultLeaseTTL
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = DefaultOpTimeout
	}
	if cfg.ChunkSize <= 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.MaxTxnOps <= 0 {
		cfg.MaxTxnOps = DefaultMaxTxnOps
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	eps, tlsCfg, err := endpoints(cfg.Endpoints, cfg.TLS)
	if err != nil {
		return nil, err
	}
	cfg.TLS = tlsCfg
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: cfg.DialTimeout,
		TLS:         tlsCfg,
		Logger:      log.Named("etcd-client"),
		// Keepalive pings find a silent member in seconds, not the
		// kernel's minutes; no more often than etcd's
		// --grpc-keepalive-min-time (5 s), which answers faster pings
		// with GOAWAY.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		// gRPC's default reconnect backoff grows to two minutes: a node
		// would stay cut off that long after etcd came back.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		})},
	})
	if err != nil {
		return nil, fmt.Errorf("%w: etcd at %s: %v", ErrUnavailable, strings.Join(cfg.Endpoints, ","), err)
	}
	nctx, cancel := context.WithCancel(context.Background())
	ns := &NS{
		cfg: cfg, cli: cli, prefix: cfg.Prefix + "/", log: log,
		self: NodeInfo{ID: cfg.Node, Peer: cfg.PeerURL, Started: time.Now().UnixNano(), PID: os.Getpid()},
		ctx:  nctx, cancel: cancel,
		nodes: map[NodeID]NodeInfo{}, holdings: map[FileVersion]Chunks{}, dirty: map[FileVersion]bool{},
		writers: map[FileID]clientv3.LeaseID{}, flushKick: make(chan struct{}, 1),
	}
	octx, ocancel := ctx, context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		octx, ocancel = context.WithTimeout(ctx, cfg.DialTimeout)
	}
	defer ocancel()
	if err := ns.open(octx); err != nil {
		ns.cancel()
		ns.wg.Wait()
		if l := ns.Lease(); l != 0 {
			// Registered already: free the node id for the next try.
			ns.revokeQuietly(clientv3.LeaseID(l))
		}
		cli.Close()
		if errors.Is(err, ErrUnavailable) {
			// Say why in one line: which endpoint, refused or TLS.
			if why := probe(cfg.Endpoints, tlsCfg, cfg.DialTimeout); why != nil {
				return nil, fmt.Errorf("%w: %v", ErrUnavailable, why)
			}
		}
		return nil, err
	}
	return ns, nil
}

func (ns *NS) open(ctx context.Context) error {
	if err := ns.loadFSID(ctx); err != nil {
		return err
	}
	lease, _, err := ns.register(ctx)
	if err != nil {
		return err
	}
	ns.mu.Lock()
	ns.lease = lease
	ns.mu.Unlock()
	ns.wg.Add(2)
	go ns.keepAlive(lease)
	go ns.flusher()
	return ns.followNodes(ctx)
}

// endpoints turns the configured endpoints into the client's and picks
// the TLS configuration for https ones.
func endpoints(in []string, tlsCfg *tls.Config) ([]string, *tls.Config, error) {
	var out []string
	https := false
	for _, e := range in {
		if !strings.Contains(e, "://") {
			e = "http://" + e
		}
		u, err := url.Parse(e)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") || (u.Path != "" && u.Path != "/") {
			return nil, nil, fmt.Errorf("%w: etcd endpoint %q: want http(s)://host:port", ErrInvalid, e)
		}
		if u.Scheme == "https" {
			https = true
		}
		out = append(out, u.Scheme+"://"+u.Host)
	}
	if https && tlsCfg == nil {
		tlsCfg = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	return out, tlsCfg, nil
}

// probe dials each endpoint (TCP, then TLS for https) and returns the
// first failure, naming the endpoint; nil when all of them answer.
func probe(eps []string, tlsCfg *tls.Config, timeout time.Duration) error {
	if timeout > 3*time.Second {
		timeout = 3 * time.Second
	}
	var failures []string
	for _, e := range eps {
		if !strings.Contains(e, "://") {
			e = "http://" + e
		}
		u, err := url.Parse(e)
		if err != nil {
			continue
		}
		d := &net.Dialer{Timeout: timeout}
		c, err := d.Dial("tcp", u.Host)
		if err != nil {
			failures = append(failures, fmt.Sprintf("etcd endpoint %s: %v", e, err))
			continue
		}
		if u.Scheme == "https" {
			cfg := tlsCfg.Clone()
			if cfg.ServerName == "" {
				cfg.ServerName = u.Hostname()
			}
			tc := tls.Client(c, cfg)
			c.SetDeadline(time.Now().Add(timeout))
			err := tc.Handshake()
			if err == nil {
				// Under TLS 1.3 a server refuses a client certificate
				// after the client's handshake is done: its alert is
				// the next thing to read.
				tc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
				var b [1]byte
				if _, rerr := tc.Read(b[:]); rerr != nil && !errors.Is(rerr, os.ErrDeadlineExceeded) {
					err = rerr
				}
			}
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("%w (does it serve plain HTTP?)", err)
			}
			if err != nil {
				failures = append(failures, fmt.Sprintf("etcd endpoint %s: TLS handshake: %v", e, err))
			}
		}
		c.Close()
	}
	if len(failures) == 0 {
		return nil
	}
	return errors.New(strings.Join(failures, "; "))
}

// Close revokes the node lease (so this node's node, holder and writer
// records vanish at once), stops the watches and disconnects.
func (ns *NS) Close() error {
	if ns.closed.Swap(true) {
		return nil
	}
	ns.cancel()
	ns.wg.Wait()
	ns.mu.Lock()
	lease := ns.lease
	ns.lease = 0
	ns.leaseErr = ErrClosed
	ns.mu.Unlock()
	var err error
	if lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), ns.cfg.OpTimeout)
		_, err = ns.cli.Revoke(ctx, lease)
		cancel()
		err = ns.wrap("revoke lease", err)
	}
	if cerr := ns.cli.Close(); err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
		err = cerr
	}
	return err
}

// FSID returns the cluster's id.
func (ns *NS) FSID() FSID { return ns.fsid }

// ChunkSize returns the cluster's chunk size (from the fsid record).
func (ns *NS) ChunkSize() int64 { return ns.chunkSize }

// Self returns this node's record.
func (ns *NS) Self() NodeInfo { return ns.self }

// key returns the full etcd key of a relative one ("nodes/a").
func (ns *NS) key(rel string) string { return ns.prefix + rel }

// opCtx applies OpTimeout when ctx has no deadline.
func (ns *NS) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, ns.cfg.OpTimeout)
}

// wrap classifies an etcd client error: an unreachable or leaderless etcd
// (or a deadline that passed waiting for it) becomes ErrUnavailable naming
// the endpoints; the caller's own cancellation stays context.Canceled.
func (ns *NS) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	if unavailable(err) {
		return fmt.Errorf("%w: %s at %s: %v", ErrUnavailable, op, strings.Join(ns.cfg.Endpoints, ","), err)
	}
	return fmt.Errorf("etcd %s: %w", op, err)
}

func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return true
		}
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		switch ee.Code() {
		case codes.Unavailable, codes.DeadlineExceeded:
			return true
		}
	}
	return false
}

// loadFSID reads the fsid record, creating it if absent (one txn, so two
// first nodes agree on one).
func (ns *NS) loadFSID(ctx context.Context) error {
	k := ns.key("fsid")
	rec := fsidRecord{FSID: NewFSID(), ChunkSize: ns.cfg.ChunkSize}
	resp, _, err := ns.txn(ctx, "reading the fsid",
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(k, mustJSON(rec))},
		[]clientv3.Op{clientv3.OpGet(k)})
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			return fmt.Errorf("%w: fsid record vanished", ErrConflict)
		}
		if rec, err = decodeFSID(k, kvs[0].Value); err != nil {
			return err
		}
	}
	ns.fsid, ns.chunkSize = rec.FSID, rec.ChunkSize
	return nil
}

// leaseSeconds is LeaseTTL rounded up to whole seconds, at least 1.
func (ns *NS) leaseSeconds() int64 {
	s := int64((ns.cfg.LeaseTTL + time.Second - 1) / time.Second)
	if s < 1 {
		s = 1
	}
	return s
}

// register grants a lease and creates nodes/<node> under it if absent;
// ErrDuplicateNode when present, with the lease it is under.
func (ns *NS) register(ctx context.Context) (clientv3.LeaseID, clientv3.LeaseID, error) {
	var g *clientv3.LeaseGrantResponse
	err := ns.retry(ctx, func() error {
		var err error
		g, err = ns.cli.Grant(ctx, ns.leaseSeconds())
		return ns.wrap("granting the node lease", err)
	})
	if err != nil {
		return 0, 0, err
	}
	k := ns.key("nodes/" + string(ns.cfg.Node))
	resp, ambiguous, err := ns.txn(ctx, "registering the node",
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(k), "=", 0)},
		[]clientv3.Op{clientv3.OpPut(k, mustJSON(ns.self), clientv3.WithLease(g.ID))},
		[]clientv3.Op{clientv3.OpGet(k)})
	if err != nil {
		ns.revokeQuietly(g.ID)
		return 0, 0, err
	}
	if resp.Succeeded {
		return g.ID, 0, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); ambiguous && len(kvs) > 0 && clientv3.LeaseID(kvs[0].Lease) == g.ID {
		return g.ID, 0, nil // an attempt that seemed to fail did register
	}
	ns.revokeQuietly(g.ID)
	msg := fmt.Sprintf("%v: --node-id %s", ErrDuplicateNode, ns.cfg.Node)
	var holder clientv3.LeaseID
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		holder = clientv3.LeaseID(kvs[0].Lease)
		var other NodeInfo
		if decode(k, kvs[0].Value, &other) == nil {
			msg += fmt.Sprintf(" is registered by pid %d (peer %s, since %s)", other.PID, other.Peer, time.Unix(0, other.Started).UTC().Format(time.RFC3339))
		}
		if ttl, err := ns.cli.TimeToLive(ctx, clientv3.LeaseID(kvs[0].Lease)); err == nil && ttl.TTL > 0 {
			msg += fmt.Sprintf("; if that daemon is dead, its lease expires in %d s", ttl.TTL)
		}
	}
	return 0, holder, fmt.Errorf("%w%s", ErrDuplicateNode, strings.TrimPrefix(msg, ErrDuplicateNode.Error()))
}

func (ns *NS) revokeQuietly(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), ns.cfg.OpTimeout)
	defer cancel()
	ns.cli.Revoke(ctx, id)
}

// keepAlive keeps the node lease alive. When the client loses it (etcd
// unreachable for longer than its TTL) the node's lease-bound records may
// be gone: as soon as etcd answers it keeps the old lease if etcd still
// has it (a restarted cluster extends its leases), else registers again
// under a new lease and rewrites its holder records; the writer locks of
// the old lease are lost then (their commits fail with ErrWriterLost).
func (ns *NS) keepAlive(lease clientv3.LeaseID) {
	defer ns.wg.Done()
	for {
		ch, err := ns.cli.KeepAlive(ns.ctx, lease)
		if err == nil {
			for range ch {
			}
		}
		if ns.ctx.Err() != nil {
			return
		}
		ns.log.Warn("node lease lost; registering again", zap.String("node", string(ns.cfg.Node)), zap.Int64("lease", int64(lease)))
		ns.mu.Lock()
		if ns.lease == lease {
			ns.lease = 0
			ns.leaseErr = fmt.Errorf("%w: the node lease expired: no member of %s kept it alive", ErrUnavailable, strings.Join(ns.cfg.Endpoints, ","))
		}
		ns.mu.Unlock()
		l, err := ns.reregister(lease)
		if err != nil {
			ns.mu.Lock()
			if ns.leaseErr == nil || !errors.Is(ns.leaseErr, ErrClosed) {
				ns.leaseErr = err
			}
			ns.mu.Unlock()
			if ns.ctx.Err() == nil {
				ns.log.Error("node id taken while this node's lease was lost; the node stays unregistered", zap.Error(err))
			}
			return
		}
		ns.mu.Lock()
		ns.lease, ns.leaseErr = l, nil
		if l != lease {
			// ns.writers keeps the locks of the old lease: their commits
			// fail with ErrWriterLost until released.
			for fv := range ns.holdings {
				ns.dirty[fv] = true
			}
		}
		ns.mu.Unlock()
		ns.kickFlush()
		lease = l
	}
}

// reregister gets a lease back after old was lost: old itself while etcd
// still has it, else a new one with the node registered under it. It
// gives up only when the NS closes (ErrClosed) or another process
// registered this node id meanwhile (ErrDuplicateNode).
func (ns *NS) reregister(old clientv3.LeaseID) (clientv3.LeaseID, error) {
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-ns.ctx.Done():
			return 0, ErrClosed
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		ctx, cancel := context.WithTimeout(ns.ctx, ns.cfg.OpTimeout)
		r, err := ns.cli.KeepAliveOnce(ctx, old)
		if err == nil && r.TTL > 0 {
			cancel()
			return old, nil
		}
		l, holder, err := ns.register(ctx)
		cancel()
		if err == nil {
			return l, nil
		}
		if errors.Is(err, ErrDuplicateNode) && holder != old {
			return 0, err
		}
		// Unreachable, or the record is still under the old lease,
		// which is expiring: try again.
	}
}

// currentLease returns the node lease, or why there is none.
func (ns *NS) currentLease() (clientv3.LeaseID, error) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.lease == 0 {
		if ns.leaseErr != nil {
			return 0, ns.leaseErr
		}
		return 0, ErrClosed
	}
	return ns.lease, nil
}

// Lease returns the node lease's id (0 while it is lost), for tests and
// status.
func (ns *NS) Lease() int64 {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return int64(ns.lease)
}

// followNodes lists nodes/ and then follows it with a watch, keeping
// ns.nodes current; it returns once the first listing is in.
func (ns *NS) followNodes(ctx context.Context) error {
	prefix := ns.key("nodes/")
	list := func(ctx context.Context) (int64, error) {
		resp, err := ns.get(ctx, "listing nodes", prefix, clientv3.WithPrefix())
		if err != nil {
			return 0, err
		}
		nodes := map[NodeID]NodeInfo{}
		for _, kv := range resp.Kvs {
			if n, ok := ns.decodeNode(string(kv.Key), kv.Value); ok {
				nodes[n.ID] = n
			}
		}
		ns.mu.Lock()
		ns.nodes = nodes
		ns.mu.Unlock()
		ns.nodesChanged()
		return resp.Header.Revision, nil
	}
	rev, err := list(ctx)
	if err != nil {
		return err
	}
	ns.wg.Add(1)
	go func() {
		defer ns.wg.Done()
		ns.follow(ns.ctx, prefix, rev, list, func(evs []*clientv3.Event) {
			ns.mu.Lock()
			for _, ev := range evs {
				id := NodeID(strings.TrimPrefix(string(ev.Kv.Key), prefix))
				if ev.Type == clientv3.EventTypeDelete {
					delete(ns.nodes, id)
				} else if n, ok := ns.decodeNode(string(ev.Kv.Key), ev.Kv.Value); ok {
					ns.nodes[n.ID] = n
				}
			}
			ns.mu.Unlock()
			ns.nodesChanged()
		})
	}()
	return nil
}

func (ns *NS) decodeNode(key string, val []byte) (NodeInfo, bool) {
	var n NodeInfo
	if err := decode(key, val, &n); err != nil {
		ns.log.Warn("skipping a node record", zap.Error(err))
		return n, false
	}
	n.ID = NodeID(strings.TrimPrefix(key, ns.key("nodes/")))
	return n, n.ID.Valid() == nil
}

// follow watches prefix from rev+1 and hands each batch of events to
// apply; when the watch breaks (member lost, no leader) it watches again
// from where it was, and when that history is compacted it lists again
// with relist. It returns when ctx is done.
func (ns *NS) follow(ctx context.Context, prefix string, rev int64, relist func(context.Context) (int64, error), apply func([]*clientv3.Event)) {
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		wch := ns.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
		compacted := false
		for resp := range wch {
			if err := resp.Err(); err != nil {
				compacted = errors.Is(err, rpctypes.ErrCompacted)
				break
			}
			if len(resp.Events) > 0 {
				apply(resp.Events)
				backoff = 50 * time.Millisecond
			}
			// Resume after the last event handed on, not the header's
			// revision: that may run ahead of events still to come.
			for _, ev := range resp.Events {
				rev = max(rev, ev.Kv.ModRevision)
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if backoff < time.Second {
			backoff *= 2
		}
		if compacted {
			lctx, c := context.WithTimeout(ctx, ns.cfg.OpTimeout)
			r, err := relist(lctx)
			c()
			if err == nil {
				rev = r
			}
		}
	}
}

// Nodes returns the live nodes (this one included), sorted by id, as the
// watch on nodes/ last saw them.
func (ns *NS) Nodes() []NodeInfo {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.nodesLocked()
}

func (ns *NS) nodesLocked() []NodeInfo {
	out := make([]NodeInfo, 0, len(ns.nodes))
	for _, n := range ns.nodes {
		out = append(out, n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Node returns a live node's record.
func (ns *NS) Node(id NodeID) (NodeInfo, bool) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	n, ok := ns.nodes[id]
	return n, ok
}

// OnNodesChange calls fn with the live nodes after each change (and once
// now). Calls come one at a time from the watch; fn must not block (Close
// waits for it).
func (ns *NS) OnNodesChange(fn func([]NodeInfo)) {
	ns.mu.Lock()
	ns.nodesFns = append(ns.nodesFns, fn)
	nodes := ns.nodesLocked()
	ns.mu.Unlock()
	fn(nodes)
}

func (ns *NS) nodesChanged() {
	ns.mu.Lock()
	fns := slices.Clone(ns.nodesFns)
	nodes := ns.nodesLocked()
	ns.mu.Unlock()
	for _, fn := range fns {
		fn(nodes)
	}
}

// retry runs fn again while it fails with ErrUnavailable (a member lost, a
// leader being elected, every member down) until ctx ends; the last error
// is returned.
func (ns *NS) retry(ctx context.Context, fn func() error) error {
	backoff := 50 * time.Millisecond
	for {
		err := fn()
		if err == nil || !errors.Is(err, ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// get is a read, retried while etcd is unavailable.
func (ns *NS) get(ctx context.Context, op, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	var resp *clientv3.GetResponse
	err := ns.retry(ctx, func() error {
		var err error
		resp, err = ns.cli.Get(ctx, key, opts...)
		return ns.wrap(op, err)
	})
	return resp, err
}

// txn runs one transaction, retried while etcd is unavailable. ambiguous
// reports that an attempt failed after it may have been applied: then a
// compare that fails may fail because of that attempt, and the caller
// checks (with its Else reads) whether its own write is there.
func (ns *NS) txn(ctx context.Context, op string, cmps []clientv3.Cmp, then, els []clientv3.Op) (resp *clientv3.TxnResponse, ambiguous bool, err error) {
	err = ns.retry(ctx, func() error {
		var err error
		resp, err = ns.cli.Txn(ctx).If(cmps...).Then(then...).Else(els...).Commit()
		if err != nil {
			ambiguous = true
		}
		return ns.wrap(op, err)
	})
	return resp, ambiguous, err
}
