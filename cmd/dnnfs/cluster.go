package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/dnnfs/dnnfs/cluster"
	"github.com/dnnfs/dnnfs/cluster/peer"
)

// clusterFlagSet are the mount flags of the cluster (DESIGN §Cluster);
// without --etcd none of them is used.
type clusterFlagSet struct {
	etcd                         *[]string
	prefix                       *string
	etcdCert, etcdKey, etcdCA    *string
	s3Endpoint, s3Bucket, region *string
	node, listen, url, token     *string
	peerCert, peerKey, peerCA    *string
	insecure                     *bool
	chunkSize                    *string
	minFree                      *string
}

func clusterFlags(fl *pflag.FlagSet) *clusterFlagSet {
	return &clusterFlagSet{
		etcd:       fl.StringSlice("etcd", nil, "join a cluster: etcd client URLs, comma-separated (http://127.0.0.1:2379); without it the mount is a single node and no other cluster flag is used"),
		prefix:     fl.String("etcd-prefix", "/dnnfs", "prefix of the cluster's etcd keys"),
		etcdCert:   fl.String("etcd-cert", "", "client certificate for https etcd endpoints"),
		etcdKey:    fl.String("etcd-key", "", "key of --etcd-cert"),
		etcdCA:     fl.String("etcd-cacert", "", "CA certificate that signed the etcd servers' certificates"),
		s3Endpoint: fl.String("s3-endpoint", "", "S3 endpoint of the cluster's durable tier (http://host:port); credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
		s3Bucket:   fl.String("s3-bucket", "", "S3 bucket of the cluster"),
		region:     fl.String("s3-region", "", "S3 region (default $AWS_REGION, else us-east-1)"),
		node:       fl.String("node-id", "", "this node's name in the cluster: 1 to 64 of [a-z0-9._-], unique among live nodes"),
		listen:     fl.String("peer-listen", "", "HOST:PORT where this node serves its chunks to the other nodes"),
		url:        fl.String("peer-url", "", "URL the other nodes reach the chunk server at (default: from --peer-listen)"),
		token:      fl.String("cluster-token-file", "", "file holding the cluster token every node presents to the others"),
		peerCert:   fl.String("peer-cert", "", "TLS certificate of the chunk server (and client certificate towards peers)"),
		peerKey:    fl.String("peer-key", "", "key of --peer-cert"),
		peerCA:     fl.String("peer-cacert", "", "CA certificate that signed the peers' certificates (verifies servers and requires client certificates)"),
		insecure:   fl.Bool("peer-insecure", false, "serve and fetch chunks over plain HTTP (without --peer-cert)"),
		chunkSize:  fl.String("chunk-size", "32MiB", "chunk size of a cluster this node creates (an existing cluster keeps its own)"),
		minFree:    fl.String("cluster-cache-min-free", fmt.Sprintf("%d%%", cluster.DefaultCacheMinFreePct), "free space kept in the pool: below it, the least recently read chunks of other nodes' committed files are evicted (SIZE, or a percentage of the pool: 10%)"),
	}
}

// check refuses cluster flags that cannot work, before any daemon starts.
func (c *clusterFlagSet) check(readOnly bool) error {
	if len(*c.etcd) == 0 {
		return nil
	}
	if readOnly {
		return usageError{"--etcd: not with --read-only (a cluster node stores the chunks it reads)"}
	}
	if *c.peerCert == "" && !*c.insecure {
		return usageError{"--etcd: give --peer-cert and --peer-key, or --peer-insecure for plain HTTP between nodes"}
	}
	if (*c.peerCert == "") != (*c.peerKey == "") {
		return usageError{"--peer-cert and --peer-key go together"}
	}
	if n, err := parseSize(*c.chunkSize); err != nil || n < 1<<20 || n > 1<<30 {
		return usageError{fmt.Sprintf("--chunk-size %q: want a size from 1MiB to 1GiB", *c.chunkSize)}
	}
	if _, _, err := parseMinFree(*c.minFree); err != nil {
		return err
	}
	return nil
}

// parseMinFree reads --cluster-cache-min-free: a size, or a percentage of
// the pool below 100.
func parseMinFree(s string) (bytes int64, pct float64, err error) {
	if p, ok := strings.CutSuffix(strings.TrimSpace(s), "%"); ok {
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || v <= 0 || v >= 100 {
			return 0, 0, usageError{fmt.Sprintf("--cluster-cache-min-free %q: want a size or a percentage above 0%% and below 100%%", s)}
		}
		return 0, v, nil
	}
	v, err := parseSize(s)
	if err != nil || v <= 0 {
		return 0, 0, usageError{fmt.Sprintf("--cluster-cache-min-free %q: want a size or a percentage above 0%% and below 100%%", s)}
	}
	return v, 0, nil
}

// dial joins the cluster; nil without --etcd.
func (c *clusterFlagSet) dial(log *zap.Logger) (*cluster.Node, error) {
	if len(*c.etcd) == 0 {
		return nil, nil
	}
	cs, _ := parseSize(*c.chunkSize)
	cfg := cluster.Config{Etcd: *c.etcd, EtcdPrefix: *c.prefix, S3Endpoint: *c.s3Endpoint, S3Bucket: *c.s3Bucket,
		S3Region: *c.region, Node: *c.node, PeerListen: *c.listen, PeerURL: *c.url, ChunkSize: cs, Log: log}
	cfg.CacheMinFree, cfg.CacheMinFreePct, _ = parseMinFree(*c.minFree) // checked by check
	if *c.token == "" {
		return nil, usageError{"--etcd: --cluster-token-file is required"}
	}
	tok, err := peer.ReadTokenFile(*c.token)
	if err != nil {
		return nil, err
	}
	cfg.Token = tok
	if *c.etcdCert != "" || *c.etcdCA != "" {
		if cfg.EtcdTLS, err = peer.ClientTLS(*c.etcdCert, *c.etcdKey, *c.etcdCA); err != nil {
			return nil, fmt.Errorf("--etcd-cert: %w", err)
		}
	}
	if *c.peerCert != "" {
		if cfg.ServerTLS, err = peer.ServerTLS(*c.peerCert, *c.peerKey, *c.peerCA); err != nil {
			return nil, fmt.Errorf("--peer-cert: %w", err)
		}
		if cfg.ClientTLS, err = peer.ClientTLS(*c.peerCert, *c.peerKey, *c.peerCA); err != nil {
			return nil, fmt.Errorf("--peer-cert: %w", err)
		}
	}
	// No deadline: etcd's dial timeout and S3's bound each step.
	n, err := cluster.Dial(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("cluster: %s", strings.TrimSpace(err.Error()))
	}
	return n, nil
}

// notifier invalidates the kernel's caches through the FUSE server (node
// ids are inode numbers: fs mounts with ExternalNodeID).
type notifier struct{ s *fuse.Server }

func (n notifier) InodeNotify(ino uint64, off, length int64) { n.s.InodeNotify(ino, off, length) }
func (n notifier) EntryNotify(parent uint64, name string)    { n.s.EntryNotify(parent, name) }
