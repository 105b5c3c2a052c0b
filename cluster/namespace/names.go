package namespace

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Entry is one direct child of a directory: a file (names/<path>) or a
// directory implied by names below it.
type Entry struct {
	Name string
	Dir  bool
	ID   FileID // files only
}

func (ns *NS) nameKey(path string) string { return ns.key("names/" + path) }
func (ns *NS) fileKey(id FileID) string   { return ns.key("files/" + string(id)) }

// Lookup returns the file a path names: ErrNotFound when none does,
// ErrIsDir when the path is a directory implied by names below it.
func (ns *NS) Lookup(ctx context.Context, path string) (FileID, error) {
	if err := CleanPath(path); err != nil {
		return "", err
	}
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	k := ns.nameKey(path)
	resp, _, err := ns.txn(ctx, "lookup "+path, nil, []clientv3.Op{
		clientv3.OpGet(k),
		clientv3.OpGet(k+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
	}, nil)
	if err != nil {
		return "", err
	}
	if kvs := resp.Responses[0].GetResponseRange().GetKvs(); len(kvs) > 0 {
		return decodeName(k, kvs[0].Value)
	}
	if resp.Responses[1].GetResponseRange().GetCount() > 0 {
		return "", fmt.Errorf("%w: %s", ErrIsDir, path)
	}
	return "", fmt.Errorf("%w: %s", ErrNotFound, path)
}

// listPage is how many keys List reads per request.
const listPage = 512

// List returns the direct children of a directory ("" is the root), sorted
// by name, all read at one revision. A directory with no names below it
// does not exist: ErrNotFound (except the root, which is always there).
// Pages skip over a child directory's subtree rather than reading it.
func (ns *NS) List(ctx context.Context, dir string) ([]Entry, error) {
	if dir != "" {
		if err := CleanPath(dir); err != nil {
			return nil, err
		}
	}
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	prefix := ns.key("names/")
	if dir != "" {
		prefix = ns.nameKey(dir) + "/"
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	var rev int64
	var out []Entry
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(listPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := ns.get(ctx, "list "+dir, from, opts...)
		if err != nil {
			return nil, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		next := ""
		for _, kv := range resp.Kvs {
			rel := strings.TrimPrefix(string(kv.Key), prefix)
			name, below, isDir := strings.Cut(rel, "/")
			if isDir && below != "" {
				if len(out) == 0 || out[len(out)-1].Name != name {
					out = append(out, Entry{Name: name, Dir: true})
				}
				// The subtree ends before name+"0" ('0' follows '/').
				next = prefix + name + "0"
				continue
			}
			id, err := decodeName(string(kv.Key), kv.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, Entry{Name: rel, ID: id})
			next = string(kv.Key) + "\x00"
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = next
	}
	if len(out) == 0 && dir != "" {
		if _, err := ns.Lookup(ctx, dir); err == nil {
			return nil, fmt.Errorf("%w: %s is a file", ErrNotDir, dir)
		}
		return nil, fmt.Errorf("%w: directory %s", ErrNotFound, dir)
	}
	// Key order puts "d.x" before the directory "d" (whose keys go on
	// with '/'); entries go by name.
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Rename moves a file's name from oldPath to newPath in one transaction,
// replacing a file at newPath (whose file record goes with it, as unlink
// would). The file keeps its id. A directory moves with every name below
// it, also in one transaction (the checkpoint pattern: write a temporary
// directory, then rename it), if the transaction fits etcd's
// --max-txn-ops (Config.MaxTxnOps: 2 per file), else ErrTooLarge. Errors:
// ErrNotFound when oldPath names nothing, ErrIsDir for a file onto a
// directory, ErrNotDir for a directory onto a file or under a file,
// ErrNotEmpty for a directory onto a directory (in etcd a directory is
// never empty), ErrConflict when another node changed a name involved
// meanwhile (nothing was changed: try again).
func (ns *NS) Rename(ctx context.Context, oldPath, newPath string) error {
	if err := CleanPath(oldPath); err != nil {
		return err
	}
	if err := CleanPath(newPath); err != nil {
		return err
	}
	if oldPath == newPath {
		if _, err := ns.Lookup(ctx, oldPath); err != nil && !errors.Is(err, ErrIsDir) {
			return err
		}
		return nil // POSIX: renaming a file or directory onto itself does nothing
	}
	if strings.HasPrefix(newPath, oldPath+"/") {
		return fmt.Errorf("%w: rename %s under itself (%s)", ErrInvalid, oldPath, newPath)
	}
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	ok, nk := ns.nameKey(oldPath), ns.nameKey(newPath)
	resp, _, err := ns.txn(ctx, "rename "+oldPath, nil, []clientv3.Op{
		clientv3.OpGet(ok), clientv3.OpGet(nk),
		clientv3.OpGet(nk+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(ok+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()),
	}, nil)
	if err != nil {
		return err
	}
	oldKVs, newKVs := resp.Responses[0].GetResponseRange().GetKvs(), resp.Responses[1].GetResponseRange().GetKvs()
	if len(oldKVs) == 0 {
		if resp.Responses[3].GetResponseRange().GetCount() > 0 {
			switch {
			case len(newKVs) > 0:
				return fmt.Errorf("%w: rename directory %s onto file %s", ErrNotDir, oldPath, newPath)
			case resp.Responses[2].GetResponseRange().GetCount() > 0:
				return fmt.Errorf("%w: rename directory %s onto %s", ErrNotEmpty, oldPath, newPath)
			}
			return ns.renameDir(ctx, oldPath, newPath)
		}
		return fmt.Errorf("%w: %s", ErrNotFound, oldPath)
	}
	if resp.Responses[2].GetResponseRange().GetCount() > 0 {
		return fmt.Errorf("%w: rename onto %s: a directory", ErrIsDir, newPath)
	}
	id, err := decodeName(ok, oldKVs[0].Value)
	if err != nil {
		return err
	}
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(ok), "=", oldKVs[0].ModRevision),
		clientv3.Compare(clientv3.CreateRevision(nk), "=", 0),
	}
	ops := []clientv3.Op{clientv3.OpDelete(ok), clientv3.OpPut(nk, mustJSON(nameRecord{ID: id}))}
	if len(newKVs) > 0 {
		victim, err := decodeName(nk, newKVs[0].Value)
		if err != nil {
			return err
		}
		cmps[1] = clientv3.Compare(clientv3.ModRevision(nk), "=", newKVs[0].ModRevision)
		if victim != id {
			ops = append(ops, clientv3.OpDelete(ns.fileKey(victim)))
		}
	}
	cmps = append(cmps, ns.placeCmps(newPath)...)
	tresp, ambiguous, err := ns.txn(ctx, "rename "+oldPath, cmps, ops, []clientv3.Op{clientv3.OpGet(ok), clientv3.OpGet(nk)})
	if err != nil {
		return err
	}
	if !tresp.Succeeded && ambiguous && len(tresp.Responses[0].GetResponseRange().GetKvs()) == 0 {
		if kvs := tresp.Responses[1].GetResponseRange().GetKvs(); len(kvs) > 0 && kvs[0].ModRevision > oldKVs[0].ModRevision {
			if moved, err := decodeName(nk, kvs[0].Value); err == nil && moved == id {
				return nil // an attempt that seemed to fail did it
			}
		}
	}
	if !tresp.Succeeded {
		if err := ns.placeError(ctx, newPath); err != nil {
			return err
		}
		return fmt.Errorf("%w: rename %s to %s: a name changed meanwhile", ErrConflict, oldPath, newPath)
	}
	return nil
}

// renameDir moves every name below oldPath to below newPath in one
// transaction (Rename checked that newPath names nothing).
func (ns *NS) renameDir(ctx context.Context, oldPath, newPath string) error {
	op, np := ns.nameKey(oldPath)+"/", ns.nameKey(newPath)+"/"
	resp, err := ns.get(ctx, "rename "+oldPath, op, clientv3.WithPrefix())
	if err != nil {
		return err
	}
	n := len(resp.Kvs)
	if n == 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, oldPath)
	}
	if 2*n > ns.cfg.MaxTxnOps || n+3+strings.Count(newPath, "/") > ns.cfg.MaxTxnOps {
		return fmt.Errorf("%w: rename %s: %d files, one transaction takes %d", ErrTooLarge, oldPath, n, ns.cfg.MaxTxnOps/2)
	}
	rev := resp.Header.Revision
	cmps := []clientv3.Cmp{
		// Nothing new below oldPath since rev (each key below is
		// compared on its own, which sees a deletion too).
		clientv3.Compare(clientv3.ModRevision(op), "<", rev+1).WithPrefix(),
		clientv3.Compare(clientv3.CreateRevision(strings.TrimSuffix(np, "/")), "=", 0),
	}
	cmps = append(cmps, ns.placeCmps(newPath)...)
	ops := make([]clientv3.Op, 0, 2*n)
	for _, kv := range resp.Kvs {
		k := string(kv.Key)
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", kv.ModRevision))
		ops = append(ops, clientv3.OpDelete(k), clientv3.OpPut(np+strings.TrimPrefix(k, op), string(kv.Value)))
	}
	tresp, ambiguous, err := ns.txn(ctx, "rename "+oldPath, cmps, ops, []clientv3.Op{
		clientv3.OpGet(op, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(np, clientv3.WithPrefix(), clientv3.WithCountOnly()),
	})
	if err != nil {
		return err
	}
	if tresp.Succeeded {
		return nil
	}
	if ambiguous && tresp.Responses[0].GetResponseRange().GetCount() == 0 && tresp.Responses[1].GetResponseRange().GetCount() == int64(n) {
		return nil // an attempt that seemed to fail did it
	}
	if err := ns.placeError(ctx, newPath); err != nil {
		return err
	}
	return fmt.Errorf("%w: rename %s to %s: a name changed meanwhile", ErrConflict, oldPath, newPath)
}

// placeCmps are the conditions for a file name at path: no name below it
// (that would make it a directory too) and no file at any of its parent
// directories.
func (ns *NS) placeCmps(path string) []clientv3.Cmp {
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(ns.nameKey(path)+"/"), "=", 0).WithPrefix()}
	for i := 0; i < len(path); i++ {
		if path[i] == '/' {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(ns.nameKey(path[:i])), "=", 0))
		}
	}
	return cmps
}

// placeError tells why placeCmps(path) failed: ErrIsDir, ErrNotDir, or
// nil when they hold now (a race: the caller says ErrConflict).
func (ns *NS) placeError(ctx context.Context, path string) error {
	ops := []clientv3.Op{clientv3.OpGet(ns.nameKey(path)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())}
	for i := 0; i < len(path); i++ {
		if path[i] == '/' {
			ops = append(ops, clientv3.OpGet(ns.nameKey(path[:i]), clientv3.WithCountOnly()))
		}
	}
	resp, _, err := ns.txn(ctx, "checking "+path, nil, ops, nil)
	if err != nil {
		return err
	}
	if resp.Responses[0].GetResponseRange().GetCount() > 0 {
		return fmt.Errorf("%w: %s", ErrIsDir, path)
	}
	for _, r := range resp.Responses[1:] {
		if r.GetResponseRange().GetCount() > 0 {
			return fmt.Errorf("%w: %s", ErrNotDir, path)
		}
	}
	return nil
}

// Remove deletes a file's name and its file record in one transaction.
// ErrNotFound when the path names no file, ErrConflict when it changed
// meanwhile (nothing was removed). The chunk objects stay (garbage of
// the object store), and holder records vanish with their nodes' leases
// or their DropSuperseded.
func (ns *NS) Remove(ctx context.Context, path string) error {
	if err := CleanPath(path); err != nil {
		return err
	}
	ctx, cancel := ns.opCtx(ctx)
	defer cancel()
	k := ns.nameKey(path)
	resp, err := ns.get(ctx, "remove "+path, k)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		return fmt.Errorf("%w: %s", ErrNotFound, path)
	}
	id, err := decodeName(k, resp.Kvs[0].Value)
	if err != nil {
		return err
	}
	tresp, ambiguous, err := ns.txn(ctx, "remove "+path,
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(k), "=", resp.Kvs[0].ModRevision)},
		[]clientv3.Op{clientv3.OpDelete(k), clientv3.OpDelete(ns.fileKey(id))},
		[]clientv3.Op{clientv3.OpGet(k)})
	if err != nil {
		return err
	}
	if !tresp.Succeeded && ambiguous && len(tresp.Responses[0].GetResponseRange().GetKvs()) == 0 {
		return nil // an attempt that seemed to fail removed it
	}
	if !tresp.Succeeded {
		return fmt.Errorf("%w: remove %s: the name changed meanwhile", ErrConflict, path)
	}
	return nil
}
