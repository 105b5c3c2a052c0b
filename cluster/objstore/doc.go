// Package objstore is dnnfs's side of the S3-compatible object store, the
// durable tier of a cluster (DESIGN §Cluster, "Keys"): chunk objects,
// manifests, listing a foreign prefix for attach, and ranged GETs. It
// counts its requests and bytes so tests can assert "at most one GET per
// chunk".
//
// What it owns: the S3 key layout and the manifest codec below, the
// connection to the store (minio-go, path-style, credentials from
// AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) and the one-line errors of a
// bad configuration (ErrUnreachable, ErrCredentials, ErrNoBucket).
// What it must not do: import anything of dnnfs but internal/*, know about
// etcd, peers or pools, or delete objects (an uncommitted version's objects
// are garbage that no record names, never reused).
//
// Keys in the bucket (FSID, FileID: 32 lower-case hex digits; the version
// in decimal; the chunk index in decimal, zero-padded to 8 digits):
//
//	| key                          | what                                                    |
//	|------------------------------|---------------------------------------------------------|
//	| <fsid>/<id>/<ver>/<chunk>    | a chunk's bytes: chunk_size bytes, the last one shorter |
//	| <fsid>/<id>/<ver>/manifest   | the version's manifest (JSON, below)                    |
//
// The manifest, one JSON object (Manifest; EncodeManifest/DecodeManifest):
//
//	| field       | JSON type | meaning                                                        |
//	|-------------|-----------|----------------------------------------------------------------|
//	| fsid        | string    | the cluster's FSID (32 hex)                                    |
//	| id          | string    | the file's FileID (32 hex)                                     |
//	| version     | number    | the version this manifest commits (1 up)                       |
//	| size        | number    | the file's size in bytes                                       |
//	| chunk_size  | number    | bytes per chunk (every chunk but the last is this long)        |
//	| chunks      | array     | one entry per chunk, in order: ceil(size / chunk_size) of them |
//	| chunks[].key    | string | the chunk's object key; a chunk unchanged since an older version names that version's object |
//	| chunks[].size   | number | the chunk's length                                          |
//	| chunks[].crc32c | string | CRC-32C (Castagnoli) of the chunk, 8 lower-case hex digits  |
//
// Open sends one request, a ranged GET of ".dnnfs-open-check" (a key never
// written; NoSuchKey is the good answer), whose error body tells bad
// credentials from a missing bucket.
//
// Attached foreign objects (dnnfs attach) have no manifest: ListForeign
// lists them (key, size, etag) and GetRange reads a chunk's byte range.
//
// Counters (Stats): chunk GETs (GetChunk, GetRange) and their bytes,
// manifest GETs, PUTs and their payload bytes, LISTs, and every HTTP
// request sent, retries included, so a test can tell a GET per chunk from
// a GET per chunk plus hidden retries.
package objstore
