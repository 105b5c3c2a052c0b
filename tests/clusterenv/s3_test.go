package clusterenv

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/minio/minio-go/v7"
)

// TestS3StopStart puts an object into a real versitygw, stops the server
// by its pid (requests then fail), starts it again and reads the object
// back: the data and the bucket outlive a restart.
func TestS3StopStart(t *testing.T) {
	s := StartS3(t)
	ctx := context.Background()
	cli := s.Client()
	want := bytes.Repeat([]byte("dnnfs"), 1000)
	if _, err := cli.PutObject(ctx, s.Bucket, "a/b", bytes.NewReader(want), int64(len(want)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	pid := s.Pid()
	s.Stop()
	if s.Pid() != 0 {
		t.Fatalf("versitygw (pid %d) still running after Stop", pid)
	}
	if _, err := cli.ListBuckets(ctx); err == nil {
		t.Fatal("ListBuckets succeeded with the server stopped")
	}
	s.Start()
	if s.Pid() == 0 || s.Pid() == pid {
		t.Fatalf("pid %d after Start (was %d)", s.Pid(), pid)
	}
	obj, err := cli.GetObject(ctx, s.Bucket, "a/b", minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(obj)
	obj.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("after restart: %d bytes, err %v; want %d bytes", len(got), err, len(want))
	}
	t.Log(s)
}
