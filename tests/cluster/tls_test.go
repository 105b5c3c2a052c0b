package cluster_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dnnfs/dnnfs/tests/clusterenv"
	"github.com/dnnfs/dnnfs/tests/harness"
)

// peerCerts makes a throw-away CA and one node certificate for 127.0.0.1
// to 127.0.0.3, good for serving and for presenting as a client (a node
// is both), as PEM files: ca, cert, key.
func peerCerts(t *testing.T) (ca, cert, key string) {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "dnnfs peer CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	nodeKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "dnnfs node"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(127, 0, 0, 2), net.IPv4(127, 0, 0, 3)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &nodeKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(nodeKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("node.pem", "CERTIFICATE", der), write("node-key.pem", "EC PRIVATE KEY", kder)
}

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
	ca, cert, key := peerCerts(t)
	mount := func(id, ip string) *harness.FS {
		var args []string
		for _, a := range e.clusterArgs(t, id, ip) {
			if a != "--peer-insecure" {
				args = append(args, a)
			}
		}
		args = append(args, "--etcd-cert", certs.ClientCert, "--etcd-key", certs.ClientKey, "--etcd-cacert", certs.CA,
			"--peer-cert", cert, "--peer-key", key, "--peer-cacert", ca)
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
