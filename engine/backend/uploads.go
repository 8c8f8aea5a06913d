package backend

// Uploads holds what one model put on a backend while loading: its
// weights and vectors, their size, and the first error. Once an upload
// has failed (or Fail was called), further uploads do nothing and return
// nil, so a loader can upload its whole graph and check Err once.
// Release frees everything on backends that hold memory of their own.
// It is the loaders' shared bookkeeping; not safe for concurrent use.
type Uploads struct {
	be      Backend
	weights []Weight
	vectors []Vector
	bytes   int64
	err     error
}

// NewUploads starts an empty holder for uploads to be.
func NewUploads(be Backend) *Uploads { return &Uploads{be: be} }

// Fail records err as the loading's error unless one is recorded.
func (u *Uploads) Fail(err error) {
	if u.err == nil && err != nil {
		u.err = err
	}
}

// Err is the first error recorded.
func (u *Uploads) Err() error { return u.err }

// Weight uploads d, or returns nil (recording the error) if it or an
// earlier step failed.
func (u *Uploads) Weight(d WeightData) Weight {
	if u.err != nil {
		return nil
	}
	w, err := u.be.Weight(d)
	if err != nil {
		u.Fail(err)
		return nil
	}
	u.weights = append(u.weights, w)
	u.bytes += w.Bytes()
	return w
}

// Vector uploads d, or returns nil (recording the error) if it or an
// earlier step failed.
func (u *Uploads) Vector(d VectorData) Vector {
	if u.err != nil {
		return nil
	}
	v, err := u.be.Vector(d)
	if err != nil {
		u.Fail(err)
		return nil
	}
	u.vectors = append(u.vectors, v)
	u.bytes += v.Bytes()
	return v
}

// Bytes is the memory the backend holds for the uploads.
func (u *Uploads) Bytes() int64 { return u.bytes }

// Release frees the uploads on a backend that is a Releaser; they must
// not be used afterwards. Calling it again does nothing.
func (u *Uploads) Release() {
	if r, ok := u.be.(Releaser); ok && (len(u.weights) > 0 || len(u.vectors) > 0) {
		r.Release(u.weights, u.vectors)
	}
	u.weights, u.vectors = nil, nil
}
