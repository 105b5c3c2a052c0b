package cluster

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/dnnfs/dnnfs/cluster/namespace"
	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/cluster/peer"
	"github.com/dnnfs/dnnfs/core"
	"github.com/dnnfs/dnnfs/format"
)

// Attached objects (dnnfs attach s3://bucket/prefix DIR): every object
// under the prefix becomes a file of the namespace at DIR/<key without the
// prefix>, version 1, whose record's manifest field names the object
// instead of a manifest: "attach:<etag>:<bucket>:<key>" (the FileID binds
// bucket, key and etag: objstore.ForeignFileID). Its chunks are byte ranges
// of the object, fetched through the same peer tier as any chunk; the
// files are read-only (ErrReadOnly).
const attachPrefix = "attach:"

func isAttached(manifest string) bool { return strings.HasPrefix(manifest, attachPrefix) }

func attachManifest(bucket string, o objstore.ObjectInfo) string {
	return attachPrefix + o.ETag + ":" + bucket + ":" + o.Key
}

func parseAttachManifest(m string, size int64) (bucket string, o objstore.ObjectInfo, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(m, attachPrefix), ":", 3)
	if !isAttached(m) || len(parts) != 3 || parts[1] == "" || parts[2] == "" {
		return "", o, false
	}
	return parts[1], objstore.ObjectInfo{Key: parts[2], Size: size, ETag: parts[0]}, true
}

// catalog resolves chunks of attached objects (learning them from their
// file records, so that a home node with no name for a file can fill it)
// and of dnnfs's own files (their manifests).
type catalog struct {
	n         *Node
	attach    *peer.AttachCatalog
	manifests manifestCatalog

	mu      sync.Mutex
	own     map[objstore.FileID]bool // files known to have manifests
	buckets map[string]*objstore.Store
}

func (c *catalog) Chunk(ctx context.Context, ref objstore.ChunkRef) (peer.ChunkInfo, error) {
	info, err := c.attach.Chunk(ctx, ref)
	if !errors.Is(err, peer.ErrNotInCatalog) {
		return info, err
	}
	c.mu.Lock()
	own := c.own[ref.File]
	c.mu.Unlock()
	if !own {
		rec, _, err := c.n.ns.File(ctx, namespace.FileID(ref.File))
		if err == nil && isAttached(rec.Manifest) {
			if err := c.learn(ctx, rec); err != nil {
				return peer.ChunkInfo{}, err
			}
			return c.attach.Chunk(ctx, ref)
		}
		if err == nil {
			c.mu.Lock()
			c.own[ref.File] = true
			c.mu.Unlock()
		}
	}
	return c.manifests.Chunk(ctx, ref)
}

// learn puts an attached object's record into the attach catalog.
func (c *catalog) learn(ctx context.Context, rec namespace.FileRecord) error {
	bucket, o, ok := parseAttachManifest(rec.Manifest, rec.Size)
	if !ok {
		return fmt.Errorf("%w: bad attached record %q", ErrCluster, rec.Manifest)
	}
	store, err := c.bucket(ctx, bucket)
	if err != nil {
		return err
	}
	c.attach.Add(store, o, rec.ChunkSize)
	return nil
}

// bucket returns a store of another bucket on the cluster's endpoint (the
// same credentials), opened once.
func (c *catalog) bucket(ctx context.Context, name string) (*objstore.Store, error) {
	c.mu.Lock()
	s, ok := c.buckets[name]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s3OpenTimeout)
	defer cancel()
	s, err := objstore.Open(ctx, objstore.Config{Endpoint: c.n.cfg.S3Endpoint, Bucket: name, Region: c.n.cfg.S3Region})
	if err != nil {
		return nil, ioErr("bucket "+name, err)
	}
	c.mu.Lock()
	if old, ok := c.buckets[name]; ok {
		s = old
	} else {
		c.buckets[name] = s
	}
	c.mu.Unlock()
	return s, nil
}

// Attach names every object under s3://bucket/prefix in the namespace
// below dir (one transaction per object; an object attached before under
// the same name is left as it is) and returns how many it named.
func (n *Node) Attach(ctx context.Context, dir *core.Inode, url string) (int, error) {
	if n == nil {
		return 0, ErrNotShared
	}
	ctx = uninterrupted(ctx)
	rest, ok := strings.CutPrefix(url, "s3://")
	bucket, prefix, _ := strings.Cut(rest, "/")
	if !ok || bucket == "" {
		return 0, fmt.Errorf("%w: %q", ErrBadURL, url)
	}
	store, err := n.cat.bucket(ctx, bucket)
	if err != nil {
		return 0, err
	}
	objs, err := store.ListForeign(ctx, prefix)
	if err != nil {
		return 0, ioErr("listing "+url, err)
	}
	dirPath := n.pathOf(dir)
	a := dir.Attr()
	named := 0
	for _, o := range objs {
		rel := strings.TrimPrefix(strings.TrimPrefix(o.Key, prefix), "/")
		if rel == "" {
			rel = path.Base(o.Key)
		}
		p := join(dirPath, rel)
		if namespace.CleanPath(p) != nil {
			n.log.Warn("attach: skipping an object whose key is no path here: " + o.Key)
			continue
		}
		id := namespace.FileID(objstore.ForeignFileID(bucket, o.Key, o.ETag))
		rec := namespace.FileRecord{Version: 1, Size: o.Size, ChunkSize: n.ns.ChunkSize(), Manifest: attachManifest(bucket, o),
			Mode: format.ModeReg | 0o444, Mtime: time.Now().UnixNano(), UID: a.UID, GID: a.GID}
		if _, err := n.ns.Commit(ctx, p, id, 0, rec, namespace.Chunks{}); err != nil {
			if cur, lerr := n.ns.Lookup(ctx, p); lerr == nil && cur == id {
				continue // attached before
			}
			return named, ioErr("attach "+o.Key+" as "+p, err)
		}
		named++
	}
	return named, nil
}
