package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand"
	"net"
	"strings"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/objstore"
	"github.com/dnnfs/dnnfs/tests/clusterenv"
	"github.com/minio/minio-go/v7"
)

const (
	fsid = objstore.FSID("0123456789abcdef0123456789abcdef")
	fid  = objstore.FileID("fedcba9876543210fedcba9876543210")
)

func open(t *testing.T, s3 *clusterenv.S3) *objstore.Store {
	t.Helper()
	st, err := objstore.Open(context.Background(), objstore.Config{
		Endpoint: s3.Endpoint, Bucket: s3.Bucket, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, FSID: fsid,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestOpenBadConfig: each bad configuration gives its own sentinel error,
// on one line, from a real server.
func TestOpenBadConfig(t *testing.T) {
	s3 := clusterenv.StartS3(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String()
	l.Close()
	for _, c := range []struct {
		name string
		cfg  objstore.Config
		want error
	}{
		{"unreachable", objstore.Config{Endpoint: closed, Bucket: s3.Bucket, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey, Retries: 1}, objstore.ErrUnreachable},
		{"bad secret", objstore.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, AccessKey: s3.AccessKey, SecretKey: "wrong-secret"}, objstore.ErrCredentials},
		{"unknown key", objstore.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, AccessKey: "nobody", SecretKey: s3.SecretKey}, objstore.ErrCredentials},
		{"no bucket", objstore.Config{Endpoint: s3.Endpoint, Bucket: "no-such-bucket", AccessKey: s3.AccessKey, SecretKey: s3.SecretKey}, objstore.ErrNoBucket},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := objstore.Open(context.Background(), c.cfg)
			if !errors.Is(err, c.want) {
				t.Fatalf("Open: %v, want %v", err, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			t.Log(err)
		})
	}
	// No credentials at all, from the environment either.
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := objstore.Open(context.Background(), objstore.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket}); !errors.Is(err, objstore.ErrCredentials) {
		t.Fatalf("Open without credentials: %v", err)
	}
	// From the environment, the standard way.
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	if _, err := objstore.Open(context.Background(), objstore.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket}); err != nil {
		t.Fatalf("Open with credentials from the environment: %v", err)
	}
}

// TestChunksAndManifest commits a version as the design's commit does
// (chunks, then the manifest), reads it back whole and in ranges, and
// checks the counters count exactly the requests sent.
func TestChunksAndManifest(t *testing.T) {
	s3 := clusterenv.StartS3(t)
	st := open(t, s3)
	if s := st.Stats(); s.Requests != 1 {
		t.Fatalf("Open sent %d requests, want 1", s.Requests)
	}
	ctx := context.Background()
	const chunkSize = 64 << 10
	data := make([]byte, 3*chunkSize+1000)
	rand.New(rand.NewSource(1)).Read(data)
	m := &objstore.Manifest{FSID: fsid, ID: fid, Version: 1, Size: int64(len(data)), ChunkSize: chunkSize}
	for i := int64(0); i < objstore.Chunks(m.Size, chunkSize); i++ {
		end := min((i+1)*chunkSize, m.Size)
		e, err := st.PutChunk(ctx, objstore.ChunkRef{File: fid, Ver: 1, Idx: objstore.ChunkIdx(i)}, data[i*chunkSize:end])
		if err != nil {
			t.Fatal(err)
		}
		m.Chunks = append(m.Chunks, e)
	}
	key, err := st.PutManifest(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	if want := string(fsid) + "/" + string(fid) + "/1/manifest"; key != want {
		t.Fatalf("manifest key %s, want %s", key, want)
	}
	if m.Chunks[2].Key != string(fsid)+"/"+string(fid)+"/1/00000002" {
		t.Fatalf("chunk key %s", m.Chunks[2].Key)
	}
	// The layout is the design's: the objects are where another client
	// finds them.
	if _, err := s3.Client().StatObject(ctx, s3.Bucket, m.Chunks[3].Key, minio.StatObjectOptions{}); err != nil {
		t.Fatalf("chunk object not in the bucket: %v", err)
	}
	before := st.Stats()
	got, err := st.GetManifest(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Size != m.Size || len(got.Chunks) != 4 || got.Chunks[3] != m.Chunks[3] {
		t.Fatalf("manifest read back %+v, wrote %+v", got, m)
	}
	var all []byte
	for i, e := range got.Chunks {
		b, err := st.GetRange(ctx, e.Key, 0, -1)
		if err != nil {
			t.Fatal(err)
		}
		if objstore.Checksum(b) != e.CRC32C || int64(len(b)) != e.Size {
			t.Fatalf("chunk %d: %d bytes crc %s, manifest says %d bytes crc %s", i, len(b), objstore.Checksum(b), e.Size, e.CRC32C)
		}
		all = append(all, b...)
	}
	if !bytes.Equal(all, data) {
		t.Fatal("chunks read back differ from the data written")
	}
	part, err := st.GetChunk(ctx, objstore.ChunkRef{File: fid, Ver: 1, Idx: 1}, 100, 5000)
	if err != nil || !bytes.Equal(part, data[chunkSize+100:chunkSize+5100]) {
		t.Fatalf("ranged GetChunk: %d bytes, %v", len(part), err)
	}
	tail, err := st.GetChunk(ctx, objstore.ChunkRef{File: fid, Ver: 1, Idx: 3}, 10, -1)
	if err != nil || !bytes.Equal(tail, data[3*chunkSize+10:]) {
		t.Fatalf("GetChunk to the end: %d bytes, %v", len(tail), err)
	}
	d := diff(st.Stats(), before)
	want := objstore.Stats{ChunkGets: 6, ChunkGetBytes: int64(len(data)) + 5000 + 990, ManifestGets: 1, Requests: 7}
	if d != want {
		t.Fatalf("counters moved by %+v, want %+v", d, want)
	}
	if s := st.Stats(); s.Puts != 5 || s.PutBytes <= int64(len(data)) {
		t.Fatalf("put counters %+v", s)
	}

	if _, err := st.GetChunk(ctx, objstore.ChunkRef{File: fid, Ver: 2, Idx: 0}, 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("GetChunk of a missing object: %v", err)
	}
	if _, err := st.GetChunk(ctx, objstore.ChunkRef{File: fid, Ver: 1, Idx: 3}, 0, 2000); !errors.Is(err, objstore.ErrShort) {
		t.Fatalf("GetChunk past the end: %v", err)
	}
	// A manifest of another cluster is refused, written or read.
	other := *m
	other.FSID = "11111111111111111111111111111111"
	if _, err := st.PutManifest(ctx, &other); !errors.Is(err, objstore.ErrBadManifest) {
		t.Fatalf("PutManifest of another fsid: %v", err)
	}
}

func diff(a, b objstore.Stats) objstore.Stats {
	return objstore.Stats{
		ChunkGets: a.ChunkGets - b.ChunkGets, ChunkGetBytes: a.ChunkGetBytes - b.ChunkGetBytes,
		ManifestGets: a.ManifestGets - b.ManifestGets, Puts: a.Puts - b.Puts, PutBytes: a.PutBytes - b.PutBytes,
		Lists: a.Lists - b.Lists, Requests: a.Requests - b.Requests,
	}
}

// TestForeign lists objects another client put under a prefix (attach)
// and reads their ranges.
func TestForeign(t *testing.T) {
	s3 := clusterenv.StartS3(t)
	ctx := context.Background()
	cli := s3.Client()
	objs := map[string][]byte{
		"datasets/imagenet/part-0": bytes.Repeat([]byte{1}, 10000),
		"datasets/imagenet/part-1": bytes.Repeat([]byte{2}, 3),
		"datasets/imagenet/sub/x":  []byte("hello, world"),
		"datasets/other":           []byte("not under the prefix"),
	}
	for k, v := range objs {
		if _, err := cli.PutObject(ctx, s3.Bucket, k, bytes.NewReader(v), int64(len(v)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Opened without an fsid: only for the foreign prefix.
	st, err := objstore.Open(ctx, objstore.Config{Endpoint: s3.Endpoint, Bucket: s3.Bucket, AccessKey: s3.AccessKey, SecretKey: s3.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	list, err := st.ListForeign(ctx, "datasets/imagenet/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 3 {
		t.Fatalf("listed %+v", list)
	}
	for _, o := range list {
		if int64(len(objs[o.Key])) != o.Size || o.ETag == "" || strings.Contains(o.ETag, `"`) {
			t.Errorf("listed %+v", o)
		}
		h, err := st.Stat(ctx, o.Key)
		if err != nil || h != o {
			t.Errorf("Stat %s: %+v, %v; listed %+v", o.Key, h, err, o)
		}
	}
	b, err := st.GetRange(ctx, "datasets/imagenet/sub/x", 7, 5)
	if err != nil || string(b) != "world" {
		t.Fatalf("GetRange: %q, %v", b, err)
	}
	if _, err := st.GetChunk(ctx, objstore.ChunkRef{File: fid, Ver: 1}, 0, -1); !errors.Is(err, objstore.ErrNoFSID) {
		t.Fatalf("GetChunk without an fsid: %v", err)
	}
}

// TestUnreachableThenBack: with the server stopped a GET fails with
// ErrUnreachable, on one line; started again, the same Store works.
func TestUnreachableThenBack(t *testing.T) {
	s3 := clusterenv.StartS3(t)
	st := open(t, s3)
	ctx := context.Background()
	ref := objstore.ChunkRef{File: fid, Ver: 1, Idx: 0}
	if _, err := st.PutChunk(ctx, ref, []byte("chunk zero")); err != nil {
		t.Fatal(err)
	}
	s3.Stop()
	_, err := st.GetChunk(ctx, ref, 0, -1)
	if !errors.Is(err, objstore.ErrUnreachable) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("GetChunk with S3 stopped: %v", err)
	}
	t.Log(err)
	s3.Start()
	b, err := st.GetChunk(ctx, ref, 0, -1)
	if err != nil || string(b) != "chunk zero" {
		t.Fatalf("after restart: %q, %v", b, err)
	}
}
