package core

import (
	"errors"
	"slices"
	"testing"

	"github.com/dnnfs/dnnfs/format"
)

const noID = 0xffffffff

func acl(es ...aclEntry) []byte { return encodeACL(es) }

func TestParseACLValidates(t *testing.T) {
	uo, g, o := aclEntry{aclUserObj, 6, noID}, aclEntry{aclGroupObj, 4, noID}, aclEntry{aclOther, 0, noID}
	u, m := aclEntry{aclUser, 4, 65534}, aclEntry{aclMask, 4, noID}
	valid := [][]byte{acl(uo, g, o), acl(uo, u, g, m, o), acl(uo, g, m, o)}
	for _, v := range valid {
		if _, err := parseACL(v); err != nil {
			t.Errorf("parseACL(%x): %v", v, err)
		}
	}
	bad := map[string][]byte{
		"empty":          acl(),
		"no other":       acl(uo, g),
		"named, no mask": acl(uo, u, g, o),
		"out of order":   acl(g, uo, o),
		"two user::":     acl(uo, uo, g, o),
		"perm bits":      acl(uo, aclEntry{aclGroupObj, 8, noID}, o),
		"unknown tag":    acl(uo, g, aclEntry{0x40, 0, noID}, o),
		"after other":    acl(uo, g, o, o),
		"version":        append([]byte{1, 0, 0, 0}, acl(uo, g, o)[4:]...),
		"short":          acl(uo, g, o)[:19],
	}
	for name, v := range bad {
		if _, err := parseACL(v); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: parseACL = %v, want ErrInvalid", name, err)
		}
	}
}

func TestACLModeRules(t *testing.T) {
	def := []aclEntry{{aclUserObj, 7, noID}, {aclUser, 5, 65534}, {aclGroupObj, 7, noID}, {aclMask, 7, noID}, {aclOther, 5, noID}}
	es, mode, ext := aclCreate(def, 0o666)
	if mode != 0o664 || !ext || es[3].perm != 6 || es[1].perm != 5 {
		t.Errorf("aclCreate(0666) = %v %o %v", es, mode, ext)
	}
	if perm, ext := aclEquivMode(es); perm != 0o664 || !ext {
		t.Errorf("aclEquivMode = %o %v", perm, ext)
	}
	ch := aclChmod(es, 0o750)
	if ch[0].perm != 7 || ch[2].perm != 7 || ch[3].perm != 5 || ch[4].perm != 0 {
		t.Errorf("aclChmod(0750) = %v: the mask, not group::, takes the group bits", ch)
	}
	if perm, ext := aclEquivMode(def[:1:1]); perm != 0o700 || ext {
		t.Errorf("aclEquivMode(user:: only) = %o %v", perm, ext)
	}
}

// TestACLInheritedAndPersisted: a file and a directory made in a
// directory with a default ACL get it (the directory as its default
// too) in their create transaction, and a chmod rewrites the access ACL;
// all of it survives a reopen.
func TestACLInheritedAndPersisted(t *testing.T) {
	fs, m := openTestPool(t)
	root := fs.Root()
	dir, err := fs.Create(root, "d", NewInode{Mode: format.ModeDir | 0o755})
	if err != nil {
		t.Fatal(err)
	}
	def := acl(aclEntry{aclUserObj, 7, noID}, aclEntry{aclUser, 7, 65534}, aclEntry{aclGroupObj, 5, noID},
		aclEntry{aclMask, 7, noID}, aclEntry{aclOther, 0, noID})
	if err := fs.SetACL(dir, XattrACLDefault, def, false); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(dir, "f", NewInode{Mode: format.ModeReg | 0o666})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Create(dir, "sub", NewInode{Mode: format.ModeDir | 0o777}); err != nil {
		t.Fatal(err)
	}
	mode := uint32(0o640)
	if err := fs.SetattrAs(Caller{}, f, SetAttr{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	fs, _, err = Open(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	f, _ = fs.Lookup(fs.Root(), "d")
	sub, _ := fs.Lookup(f, "sub")
	f, _ = fs.Lookup(f, "f")
	if a := f.Attr(); a.Mode != format.ModeReg|0o640 {
		t.Errorf("file mode %o, want 100640", a.Mode)
	}
	v, err := fs.Getxattr(f, XattrACLAccess)
	want := acl(aclEntry{aclUserObj, 6, noID}, aclEntry{aclUser, 7, 65534}, aclEntry{aclGroupObj, 5, noID},
		aclEntry{aclMask, 4, noID}, aclEntry{aclOther, 0, noID})
	if err != nil || !slices.Equal(v, want) {
		t.Errorf("file access ACL %x (%v), want %x", v, err, want)
	}
	if a := sub.Attr(); a.Mode != format.ModeDir|0o770 {
		t.Errorf("subdirectory mode %o, want 40770", a.Mode)
	}
	if v, err := fs.Getxattr(sub, XattrACLDefault); err != nil || !slices.Equal(v, def) {
		t.Errorf("subdirectory default ACL %x (%v), want %x", v, err, def)
	}
	if err := fs.SetACL(f, XattrACLAccess, acl(aclEntry{aclUserObj, 7, noID}, aclEntry{aclGroupObj, 0, noID}, aclEntry{aclOther, 4, noID}), false); err != nil {
		t.Fatal(err)
	}
	if _, err := fs.Getxattr(f, XattrACLAccess); !errors.Is(err, ErrNoAttr) {
		t.Errorf("an ACL equivalent to a mode is stored: %v", err)
	}
	if a := f.Attr(); a.Mode != format.ModeReg|0o704 {
		t.Errorf("mode after an equivalent ACL %o, want 100704", a.Mode)
	}
}
