package backend

import (
	"errors"
	"testing"
)

type fakeWeight struct{ out, in int }

func (w fakeWeight) Out() int     { return w.out }
func (w fakeWeight) In() int      { return w.in }
func (w fakeWeight) Bytes() int64 { return int64(4 * w.out * w.in) }

type fakeVector int

func (v fakeVector) Len() int     { return int(v) }
func (v fakeVector) Bytes() int64 { return int64(4 * v) }

// fakeBackend uploads anything but a weight named "bad", and counts what
// it is asked to release.
type fakeBackend struct {
	Backend
	uploads, released int
}

func (b *fakeBackend) Weight(d WeightData) (Weight, error) {
	if d.Name == "bad" {
		return nil, errors.New("bad weight")
	}
	b.uploads++
	return fakeWeight{d.Out, d.In}, nil
}

func (b *fakeBackend) Vector(d VectorData) (Vector, error) {
	b.uploads++
	return fakeVector(d.Data.Shape[0]), nil
}

func (b *fakeBackend) Release(w []Weight, v []Vector) { b.released += len(w) + len(v) }

// TestUploads: the holder counts the bytes, keeps the first error, stops
// uploading after it, and releases what it uploaded once.
func TestUploads(t *testing.T) {
	be := &fakeBackend{}
	u := NewUploads(be)
	if w := u.Weight(WeightData{Name: "a", Out: 2, In: 3}); w == nil {
		t.Fatal("no weight")
	}
	vd := VectorData{Name: "v"}
	vd.Data.Shape = []int64{5}
	u.Vector(vd)
	if u.Bytes() != 4*6+4*5 || u.Err() != nil {
		t.Fatalf("%d bytes, err %v", u.Bytes(), u.Err())
	}
	if u.Weight(WeightData{Name: "bad"}) != nil || u.Err() == nil {
		t.Fatal("the bad weight uploaded")
	}
	first := u.Err()
	u.Fail(errors.New("later"))
	if u.Weight(WeightData{Name: "c", Out: 1, In: 1}) != nil || u.Vector(vd) != nil || u.Err() != first || be.uploads != 2 {
		t.Fatalf("uploads after the error: %d, err %v", be.uploads, u.Err())
	}
	u.Release()
	u.Release()
	if be.released != 2 {
		t.Errorf("released %d, want the 2 uploaded, once", be.released)
	}
}
