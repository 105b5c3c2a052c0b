package peer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/dnnfs/dnnfs/cluster/peer"
)

// BenchmarkFetch loads a file of 8 chunks of 16 MiB on a fresh node per
// iteration: from S3 (versitygw on this machine, the node alone), and
// from a peer that holds it, over plain HTTP and over mutual TLS. Not part
// of the suite (no -bench, no run); the ratios are what it is for:
//
//	go test -run '^$' -bench BenchmarkFetch -benchtime 5x -count 3 ./cluster/peer/
func BenchmarkFetch(b *testing.B) {
	const cs, n = 16 << 20, 8
	e := newEnv(b)
	f := e.commitSized(1, n, cs, n*cs)
	good := makePKI(b)
	srvTLS, err := peer.ServerTLS(good.cert, good.key, good.ca)
	if err != nil {
		b.Fatal(err)
	}
	cliTLS, err := peer.ClientTLS(good.cert, good.key, good.ca)
	if err != nil {
		b.Fatal(err)
	}
	load := func(b *testing.B, nd *node, want peer.Source) {
		for i := 0; i < n; i++ {
			_, src, err := nd.peer.Fetch(context.Background(), f.ref(i))
			if err != nil || src != want {
				b.Fatalf("chunk %d from %s, want %s: %v", i, src, want, err)
			}
		}
	}
	for _, c := range []struct {
		name string
		opts nodeOpts
		src  peer.Source
	}{
		{"s3", nodeOpts{}, peer.SourceS3},
		{"peer-http", nodeOpts{}, peer.SourcePeer},
		{"peer-tls", nodeOpts{serverTLS: srvTLS, client: peer.NewClient(cliTLS)}, peer.SourcePeer},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(n * cs)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				e.dir = &fixedDir{} // a new cluster: nobody holds the file
				var holder *node
				if c.src == peer.SourcePeer {
					holder = e.addNode("holder", c.opts)
					load(b, holder, peer.SourceS3)
				}
				reader := e.addNode(fmt.Sprintf("r%d", i), c.opts)
				b.StartTimer()
				load(b, reader, c.src)
				b.StopTimer()
				// Their pools go now, not at the end: 128 MiB a node.
				reader.srv.Close()
				reader.local.drop()
				if holder != nil {
					holder.srv.Close()
					holder.local.drop()
				}
			}
		})
	}
}
