package cluster_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dnnfs/dnnfs/tests/clusterenv"
	"github.com/dnnfs/dnnfs/tests/harness"
)

// TestTLS runs two nodes against an etcd that requires client
// certificates, their chunk servers over mutual TLS: a file written on one
// is read on the other from its pool.
func TestTLS(t *testing.T) {
	certs := clusterenv.NewTestCerts(t)
	e := &env{etcd: clusterenv.StartEtcdTLS(t, 1, certs), s3: clusterenv.StartS3(t), prefix: "/dnnfs-tls", top: t}
	t.Setenv("AWS_ACCESS_KEY_ID", e.s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", e.s3.SecretKey)
	t.Setenv("AWS_REGION", e.s3.Region)
	e.token = filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(e.token, []byte("tls-token"), 0o600); err != nil {
		t.Fatal(err)
	}
	mount := func(id, ip string) *harness.FS {
		var args []string
		for _, a := range e.clusterArgs(t, id, ip) {
			if a != "--peer-insecure" {
				args = append(args, a)
			}
		}
		args = append(args, "--etcd-cert", certs.ClientCert, "--etcd-key", certs.ClientKey, "--etcd-cacert", certs.CA,
			"--peer-cert", certs.NodeCert, "--peer-key", certs.NodeKey, "--peer-cacert", certs.CA)
		return harness.Mount(t, harness.Mkfs(t, "200MiB"), args...)
	}
	a, b := mount("a", "127.0.0.1"), mount("b", "127.0.0.2")
	data := randomBytes(chunk+100, 20)
	writeFile(t, a.Path("tls.bin"), data)
	checkFile(t, b.Path("tls.bin"), data)
	st := status(t, b)
	if st.Fetch.Peer.Bytes+st.Fetch.Home.Bytes != int64(len(data)) || st.Fetch.Unauthorized != 0 || st.Fetch.S3.Hits != 0 {
		t.Errorf("b fetched peer %d + home %d bytes, %d chunks from S3, %d refusals; want all %d bytes from a over TLS",
			st.Fetch.Peer.Bytes, st.Fetch.Home.Bytes, st.Fetch.S3.Hits, st.Fetch.Unauthorized, len(data))
	}
}
