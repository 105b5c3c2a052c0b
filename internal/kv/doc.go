// Package kv parses the comma-separated options dnnfs takes in virtual
// xattr values and on its command line: 'rows=R,dim=D,dtype=f32',
// 'threads=4,size=1GiB', 'bw=800MiB/s,lat=90us', '16,4,1'. One parser, so
// every option value has the same syntax and the same errors: items are
// separated by commas, white space around items, keys and values is
// ignored, a key appears at most once, and an empty item is an error. It
// depends on the standard library and internal/units only (the client
// uses it).
//
// What it owns: the k=v,k=v syntax and its errors. What it must not do:
// know any option's meaning (its callers do).
package kv
