package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// openProbeKey is the key Open reads to check the credentials and the
// bucket; it is never written.
const openProbeKey = ".dnnfs-open-check"

// DefaultRegion is the region when neither Config.Region nor $AWS_REGION
// names one.
const DefaultRegion = "us-east-1"

// Config says which store and bucket to use.
type Config struct {
	// Endpoint is "http://host:port", "https://host:port", or "host:port"
	// (then Secure chooses https).
	Endpoint string
	Bucket   string
	// Region: "" means $AWS_REGION, else DefaultRegion. Naming it saves
	// minio-go a GetBucketLocation request.
	Region string
	Secure bool
	// AccessKey and SecretKey: "" means $AWS_ACCESS_KEY_ID and
	// $AWS_SECRET_ACCESS_KEY (with $AWS_SESSION_TOKEN), the standard way.
	AccessKey, SecretKey string
	// FSID prefixes every chunk and manifest key; a store opened only to
	// list and read a foreign prefix (attach) may leave it "".
	FSID FSID
	// Retries is how many times minio-go sends a request that failed on
	// the network or with a retryable status; 0 means 3.
	Retries int
	// Transport replaces minio-go's default (e.g. for a private CA).
	Transport http.RoundTripper
}

// Store is one bucket of an S3-compatible store. It is safe for
// concurrent use.
type Store struct {
	cli      *minio.Client
	core     minio.Core
	bucket   string
	fsid     FSID
	endpoint string

	requests     atomic.Int64
	chunkGets    atomic.Int64
	chunkGetB    atomic.Int64
	manifestGets atomic.Int64
	puts         atomic.Int64
	putB         atomic.Int64
	lists        atomic.Int64
}

// Stats are a Store's counters since Open.
type Stats struct {
	ChunkGets     int64 `json:"chunk_gets"`      // GetChunk and GetRange calls that sent a GET
	ChunkGetBytes int64 `json:"chunk_get_bytes"` // bytes those returned
	ManifestGets  int64 `json:"manifest_gets"`
	Puts          int64 `json:"puts"`      // PutChunk and PutManifest calls that sent a PUT
	PutBytes      int64 `json:"put_bytes"` // their payload bytes
	Lists         int64 `json:"lists"`     // ListForeign calls
	Requests      int64 `json:"requests"`  // every HTTP request sent, retries and HEADs included
}

// countingTransport counts every HTTP request minio-go sends.
type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.rt.RoundTrip(r)
}

// Open connects to the store and checks that the credentials work and the
// bucket exists, so a bad configuration fails at mount with a one-line
// error wrapping ErrUnreachable, ErrCredentials or ErrNoBucket.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	host, secure := cfg.Endpoint, cfg.Secure
	if strings.Contains(host, "://") {
		u, err := url.Parse(host)
		if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("S3 endpoint %q: want http://host:port or https://host:port", cfg.Endpoint)
		}
		host, secure = u.Host, u.Scheme == "https"
	}
	if host == "" {
		return nil, errors.New("no S3 endpoint given")
	}
	if cfg.Bucket == "" {
		return nil, errors.New("no S3 bucket given")
	}
	if cfg.FSID != "" {
		if err := cfg.FSID.Valid(); err != nil {
			return nil, fmt.Errorf("fsid %q: %w", cfg.FSID, err)
		}
	}
	region := cfg.Region
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	if region == "" {
		region = DefaultRegion
	}
	ak, sk, token := cfg.AccessKey, cfg.SecretKey, ""
	if ak == "" && sk == "" {
		ak, sk, token = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY"), os.Getenv("AWS_SESSION_TOKEN")
	}
	if ak == "" || sk == "" {
		return nil, fmt.Errorf("%w: none given (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)", ErrCredentials)
	}
	retries := cfg.Retries
	if retries <= 0 {
		retries = 3
	}
	s := &Store{bucket: cfg.Bucket, fsid: cfg.FSID, endpoint: cfg.Endpoint}
	rt := cfg.Transport
	if rt == nil {
		var err error
		if rt, err = minio.DefaultTransport(secure); err != nil {
			return nil, fmt.Errorf("S3 transport: %w", err)
		}
	}
	cli, err := minio.New(host, &minio.Options{
		Creds:        credentials.NewStaticV4(ak, sk, token),
		Secure:       secure,
		Region:       region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   retries,
		Transport:    countingTransport{rt: rt, n: &s.requests},
	})
	if err != nil {
		return nil, fmt.Errorf("S3 endpoint %q: %w", cfg.Endpoint, err)
	}
	s.cli, s.core = cli, minio.Core{Client: cli}
	// One GET of a key nobody writes checks both: unlike a HEAD its error
	// has a body, so an unknown access key (versitygw answers 404
	// XAdminUserNotFound) is told from a missing bucket (NoSuchBucket) and
	// from the expected NoSuchKey; unlike a LIST it is one request, and
	// needs no more permission than reading chunks does.
	var probe minio.GetObjectOptions
	_ = probe.SetRange(0, 0)
	body, _, _, err := s.core.GetObject(ctx, cfg.Bucket, openProbeKey, probe)
	if err == nil {
		body.Close()
	} else if minio.ToErrorResponse(err).Code != "NoSuchKey" {
		return nil, s.classify(err, "bucket "+cfg.Bucket)
	}
	return s, nil
}

// classify wraps a minio-go error in the sentinel that says what happened,
// on one line.
func (s *Store) classify(err error, what string) error {
	if err == nil {
		return nil
	}
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "NoSuchKey":
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	case "NoSuchBucket":
		return fmt.Errorf("%w: %s at %s", ErrNoBucket, s.bucket, s.endpoint)
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken", "ExpiredToken", "XAdminUserNotFound":
		return fmt.Errorf("%w by %s: %s (%s)", ErrCredentials, s.endpoint, resp.Code, what)
	}
	if resp.StatusCode == http.StatusForbidden {
		return fmt.Errorf("%w by %s: access denied (%s)", ErrCredentials, s.endpoint, what)
	}
	var ne net.Error
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the same without the request's URL
	}
	if ue != nil || errors.As(err, &ne) {
		return fmt.Errorf("%w: %s: %s", ErrUnreachable, s.endpoint, oneLine(err))
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s at %s: %w", what, s.endpoint, err)
	}
	return fmt.Errorf("S3 %s at %s: %s", what, s.endpoint, oneLine(err))
}

func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// Bucket returns the bucket's name.
func (s *Store) Bucket() string { return s.bucket }

// FSID returns the fsid the store was opened with.
func (s *Store) FSID() FSID { return s.fsid }

// Stats returns the counters.
func (s *Store) Stats() Stats {
	return Stats{
		ChunkGets:     s.chunkGets.Load(),
		ChunkGetBytes: s.chunkGetB.Load(),
		ManifestGets:  s.manifestGets.Load(),
		Puts:          s.puts.Load(),
		PutBytes:      s.putB.Load(),
		Lists:         s.lists.Load(),
		Requests:      s.requests.Load(),
	}
}

// ChunkKey is a chunk's object key: <fsid>/<id>/<ver>/<chunk, 8 digits>.
func (s *Store) ChunkKey(ref ChunkRef) string {
	return fmt.Sprintf("%s/%s/%d/%08d", s.fsid, ref.File, ref.Ver, ref.Idx)
}

// ManifestKey is a version's manifest key: <fsid>/<id>/<ver>/manifest.
func (s *Store) ManifestKey(id FileID, ver Version) string {
	return fmt.Sprintf("%s/%s/%d/manifest", s.fsid, id, ver)
}

func (s *Store) put(ctx context.Context, key string, data []byte, contentType string) error {
	s.puts.Add(1)
	_, err := s.cli.PutObject(ctx, s.bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: contentType, DisableMultipart: true})
	if err != nil {
		return s.classify(err, "PUT "+key)
	}
	s.putB.Add(int64(len(data)))
	return nil
}

// PutChunk uploads a chunk under ChunkKey(ref) in one PUT (objects are
// immutable: a version's chunks are written once, before its manifest) and
// returns its manifest entry.
func (s *Store) PutChunk(ctx context.Context, ref ChunkRef, data []byte) (ChunkEntry, error) {
	if s.fsid == "" {
		return ChunkEntry{}, ErrNoFSID
	}
	key := s.ChunkKey(ref)
	if err := s.put(ctx, key, data, "application/octet-stream"); err != nil {
		return ChunkEntry{}, err
	}
	return ChunkEntry{Key: key, Size: int64(len(data)), CRC32C: Checksum(data)}, nil
}

// PutManifest uploads m (validated, and of this store's fsid) under
// ManifestKey(m.ID, m.Version) and returns that key, which the commit's
// etcd record names.
func (s *Store) PutManifest(ctx context.Context, m *Manifest) (string, error) {
	if s.fsid == "" {
		return "", ErrNoFSID
	}
	if m.FSID != s.fsid {
		return "", fmt.Errorf("%w: fsid %s, the store's is %s", ErrBadManifest, m.FSID, s.fsid)
	}
	b, err := EncodeManifest(m)
	if err != nil {
		return "", err
	}
	key := s.ManifestKey(m.ID, m.Version)
	return key, s.put(ctx, key, b, "application/json")
}

// GetManifest reads and validates the manifest under key; one of another
// fsid is ErrBadManifest.
func (s *Store) GetManifest(ctx context.Context, key string) (*Manifest, error) {
	s.manifestGets.Add(1)
	b, err := s.get(ctx, key, 0, -1, nil)
	if err != nil {
		return nil, err
	}
	m, err := DecodeManifest(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if s.fsid != "" && m.FSID != s.fsid {
		return nil, fmt.Errorf("%s: %w: fsid %s, the store's is %s", key, ErrBadManifest, m.FSID, s.fsid)
	}
	return m, nil
}

// GetChunk reads n bytes from off of the chunk under ChunkKey(ref) (n < 0:
// to its end) with one GET.
func (s *Store) GetChunk(ctx context.Context, ref ChunkRef, off, n int64) ([]byte, error) {
	if s.fsid == "" {
		return nil, ErrNoFSID
	}
	return s.GetRange(ctx, s.ChunkKey(ref), off, n)
}

// GetRange reads n bytes from off of any object (n < 0: to its end) with
// one GET: a manifest entry's key (which may name an older version's
// object) or an attached foreign object's chunk.
func (s *Store) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	s.chunkGets.Add(1)
	return s.get(ctx, key, off, n, &s.chunkGetB)
}

func (s *Store) get(ctx context.Context, key string, off, n int64, bytesRead *atomic.Int64) ([]byte, error) {
	if off < 0 || n == 0 {
		return nil, fmt.Errorf("S3 GET %s: bad range %d+%d", key, off, n)
	}
	var opts minio.GetObjectOptions
	switch {
	case n > 0:
		if err := opts.SetRange(off, off+n-1); err != nil {
			return nil, err
		}
	case off > 0:
		if err := opts.SetRange(off, 0); err != nil {
			return nil, err
		}
	}
	body, _, _, err := s.core.GetObject(ctx, s.bucket, key, opts)
	if err != nil {
		return nil, s.classify(err, "GET "+key)
	}
	defer body.Close()
	var b []byte
	if n > 0 {
		// One buffer of the range's size, read straight into (a
		// bytes.Buffer of that capacity would still grow and copy it
		// all to see EOF).
		b = make([]byte, n)
		var k int
		k, err = io.ReadFull(body, b)
		b = b[:k]
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			err = fmt.Errorf("%w: %s: %d bytes at %d, asked for %d", ErrShort, key, k, off, n)
		}
	} else {
		b, err = io.ReadAll(body)
	}
	if bytesRead != nil {
		bytesRead.Add(int64(len(b)))
	}
	if errors.Is(err, ErrShort) {
		return nil, err
	}
	if err != nil {
		return nil, s.classify(err, "GET "+key)
	}
	return b, nil
}

// ObjectInfo is what a listing or HEAD says about an object.
type ObjectInfo struct {
	Key  string
	Size int64
	ETag string // without quotes
}

// ListForeign lists every object under prefix (recursively), for attach.
func (s *Store) ListForeign(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	s.lists.Add(1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out []ObjectInfo
	for o := range s.cli.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, s.classify(o.Err, "LIST "+prefix)
		}
		if strings.HasSuffix(o.Key, "/") {
			continue // a directory marker, no data
		}
		out = append(out, ObjectInfo{Key: o.Key, Size: o.Size, ETag: strings.Trim(o.ETag, `"`)})
	}
	return out, nil
}

// Stat returns an object's size and etag (one HEAD).
func (s *Store) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	o, err := s.cli.StatObject(ctx, s.bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return ObjectInfo{}, s.classify(err, "HEAD "+key)
	}
	return ObjectInfo{Key: o.Key, Size: o.Size, ETag: strings.Trim(o.ETag, `"`)}, nil
}
