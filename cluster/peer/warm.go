package peer

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/dnnfs/dnnfs/cluster/objstore"
)

// Warm has a chunk's home node pull it from S3 into its pool ahead of the
// job (dnnfs warmup), without bringing the bytes here: the request is
// ?fill=1 with "Range: bytes=0-0", so the home fills the whole chunk,
// keeps it and announces it, and answers one byte. Chunks spread over the
// live nodes as their homes do. It returns the home; a home that fails is
// an error (warm-up reports it, a later read still has every source).
func (p *Peer) Warm(ctx context.Context, ref objstore.ChunkRef) (NodeID, error) {
	home, ok := Home(HashKey(ref), p.cfg.Dir.LiveNodes())
	if !ok {
		return "", fmt.Errorf("warm %s: no live nodes", ref)
	}
	if home.ID == p.cfg.Self {
		_, _, err := p.fill(context.WithoutCancel(ctx), ref)
		if err != nil {
			return home.ID, fmt.Errorf("warm %s here: %w", ref, err)
		}
		return home.ID, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, home.URL+chunkPath(ref)+"?fill=1", nil)
	if err != nil {
		return home.ID, err
	}
	req.Header.Set("Authorization", "Bearer "+p.cfg.Token)
	req.Header.Set("Range", "bytes=0-0")
	resp, err := p.client.Do(req)
	if err != nil {
		return home.ID, fmt.Errorf("warm %s on %s: %w", ref, home.ID, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusPartialContent {
		return home.ID, fmt.Errorf("warm %s on %s: %s: %s", ref, home.ID, resp.Status, strings.Join(strings.Fields(string(msg)), " "))
	}
	return home.ID, nil
}
