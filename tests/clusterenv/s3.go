package clusterenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3BinEnv names the versitygw binary to use instead of looking it up.
const S3BinEnv = "DNNFS_VERSITYGW_BIN"

// s3StartWait bounds how long versitygw may take to answer; a guard against
// a hung start, not a measurement.
const s3StartWait = 60 * time.Second

// S3 is a running versitygw S3 server (posix backend) started by StartS3.
// Its fields are fixed for its life: Stop and Start keep the port, the
// directory and the bucket.
type S3 struct {
	Endpoint  string // http://127.0.0.1:port
	Bucket    string // created at start
	AccessKey string
	SecretKey string
	Region    string
	Dir       string // the posix backend's root: one subdirectory per bucket

	t      testing.TB
	bin    string
	addr   string     // 127.0.0.1:port
	mu     sync.Mutex // starts, log
	starts int
	log    string
	proc
}

// VersitygwBin returns the versitygw binary's path, or "" when there is
// none: $DNNFS_VERSITYGW_BIN, `versitygw` on $PATH, or $GOPATH/bin, where
// `make deps` installs it.
func VersitygwBin() string { return findBin(S3BinEnv, "versitygw") }

// StartS3 starts versitygw on a free 127.0.0.1 port with its own temporary
// directory, waits until it answers S3 requests and creates the bucket
// "dnnfs". It is killed (SIGKILL, by pid) at t.Cleanup. A missing binary
// skips the test, or fails it when DNNFS_REQUIRE_CLUSTER is set.
func StartS3(t testing.TB) *S3 {
	t.Helper()
	bin := VersitygwBin()
	if bin == "" {
		needBinary(t, "versitygw", "run `make deps`, or set "+S3BinEnv)
	}
	if st, err := os.Stat(bin); err != nil || st.IsDir() {
		t.Fatalf("clusterenv: versitygw binary %q: not a file (%v)", bin, err)
	}
	root := t.TempDir()
	s := &S3{
		Bucket:    "dnnfs",
		AccessKey: "dnnfs-test-access",
		SecretKey: "dnnfs-test-secret-key",
		Region:    "us-east-1",
		Dir:       filepath.Join(root, "gw"),
		t:         t,
		bin:       bin,
	}
	if err := os.Mkdir(s.Dir, 0o755); err != nil {
		t.Fatalf("clusterenv: %v", err)
	}
	t.Cleanup(func() {
		if err := s.kill(); err != nil {
			t.Errorf("clusterenv: killing versitygw: %v", err)
		}
	})
	// A port chosen free may be taken by someone else before versitygw
	// binds it; then it is started again on another.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var l net.Listener
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatalf("clusterenv: choosing a free port: %v", err)
		}
		s.addr = l.Addr().String()
		l.Close()
		s.Endpoint = "http://" + s.addr
		if err = s.start(); err == nil || !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	if err != nil {
		t.Fatalf("clusterenv: %v", err)
	}
	if err := s.Client().MakeBucket(context.Background(), s.Bucket, minio.MakeBucketOptions{Region: s.Region}); err != nil {
		t.Fatalf("clusterenv: creating bucket %s: %v", s.Bucket, err)
	}
	return s
}

// start spawns versitygw and waits until it answers.
func (s *S3) start() error {
	s.mu.Lock()
	s.starts++
	s.log = filepath.Join(filepath.Dir(s.Dir), fmt.Sprintf("versitygw.%d.log", s.starts))
	log := s.log
	s.mu.Unlock()
	if err := s.launch(s.bin, []string{"--access", s.AccessKey, "--secret", s.SecretKey,
		"--region", s.Region, "--port", s.addr, "--quiet", "posix", s.Dir}, log); err != nil {
		return fmt.Errorf("starting versitygw: %w", err)
	}
	exited := s.done()

	// Ready means an authenticated request is answered: ListBuckets.
	cli := s.Client()
	deadline := time.Now().Add(s3StartWait)
	for {
		select {
		case <-exited:
			return fmt.Errorf("versitygw on %s exited at start:\n%s", s.addr, s3Tail(s.log))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := cli.ListBuckets(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw on %s not answering after %v (%v):\n%s", s.addr, s3StartWait, err, s3Tail(s.log))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Client returns a minio-go client of the server with the root
// credentials, for tests that put or inspect objects directly.
func (s *S3) Client() *minio.Client {
	cli, err := minio.New(s.addr, &minio.Options{
		Creds:        credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Region:       s.Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
	if err != nil {
		s.t.Fatalf("clusterenv: S3 client: %v", err)
	}
	return cli
}

// Pid returns the server's process id, or 0 when it is not running.
func (s *S3) Pid() int { return s.pid() }

// Stop kills the server (SIGKILL, by pid) and waits until it has exited:
// the endpoint then refuses connections ("S3 unreachable").
func (s *S3) Stop() {
	s.t.Helper()
	if err := s.kill(); err != nil {
		s.t.Fatalf("clusterenv: killing versitygw: %v", err)
	}
}

// Start starts the server again after Stop, on the same port and directory
// (its objects and bucket are still there), and waits until it answers.
func (s *S3) Start() {
	s.t.Helper()
	if s.Pid() != 0 {
		s.t.Fatalf("clusterenv: S3.Start: versitygw is running (pid %d)", s.Pid())
	}
	if err := s.start(); err != nil {
		s.t.Fatalf("clusterenv: %v", err)
	}
}

// String names the server for logs.
func (s *S3) String() string {
	return fmt.Sprintf("versitygw[%s bucket %s pid %d]", s.Endpoint, s.Bucket, s.Pid())
}

// s3Tail returns the end of a log file for a failure message.
func s3Tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return strings.TrimSpace(string(b))
}
