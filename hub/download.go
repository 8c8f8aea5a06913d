package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// ErrChecksum is a downloaded file whose content is not what the Hub
// lists (its sha256, or its git blob id).
var ErrChecksum = errors.New("hub: checksum mismatch")

// ChunkSize is the size of one read from a download into its file: at
// most this much is fetched again when a download resumes (what was read
// but not yet written when it stopped).
const ChunkSize = 256 << 10

// sha256Hex matches an LFS object id as the Hub's ETag carries it.
var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Split is how DownloadFile cuts one file into ranged parts fetched at
// once: a file of at least 2*MinPart bytes is cut into up to Parts parts
// of at least MinPart each. The zero value fetches files in one stream.
type Split struct {
	Parts   int
	MinPart int64
}

// parts is how many parts a file of size bytes is cut into (1: one
// stream).
func (s Split) parts(size int64) int {
	if s.Parts < 2 || s.MinPart <= 0 {
		return 1
	}
	return int(max(1, min(int64(s.Parts), size/s.MinPart)))
}

// DownloadFile fetches f of repo at commit into dst in one stream; see
// DownloadFileSplit.
func (c *Client) DownloadFile(ctx context.Context, repo, commit string, f File, dst string, progress func(int64)) error {
	return c.DownloadFileSplit(ctx, repo, commit, f, dst, Split{}, progress)
}

// DownloadFileSplit fetches f of repo at commit into dst, resuming from
// what dst already holds (a Range request; a server that ignores it makes
// the download start over). The file's bytes are located first (locate:
// the Hub's redirects to a CDN or Xet's CAS bridge, the token kept to the
// Hub), and what the Hub says of them (X-Linked-Size, X-Linked-Etag) is
// checked against f before a byte is fetched. A file split cuts into
// parts is fetched as that many ranged requests at once, each resumable
// (their progress is kept beside dst, in dst+".parts"). It then checks
// the whole file against f (size, and sha256 for an LFS file or the git
// blob id otherwise) and returns ErrChecksum when it does not match.
// progress is called with the bytes on disk as they grow (may be nil).
func (c *Client) DownloadFileSplit(ctx context.Context, repo, commit string, f File, dst string, split Split, progress func(int64)) error {
	if progress == nil {
		progress = func(int64) {}
	}
	what := "file " + f.Path + " of " + repo
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer out.Close()
	have, err := out.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	side := dst + partsSuffix
	done, parted := readParts(side, f.Size)
	if !parted && have > f.Size {
		if err := out.Truncate(0); err != nil {
			return fmt.Errorf("hub: %w", err)
		}
		have = 0
	}
	if parted || have < f.Size || f.Size == 0 {
		src, err := c.locate(ctx, c.ResolveURL(repo, commit, f.Path), what)
		if err != nil {
			return err
		}
		if err := src.check(f); err != nil {
			return fmt.Errorf("hub: %s: %w", what, err)
		}
		// A file begun in one stream goes on in one; parts go on as
		// they were cut.
		if !parted && have == 0 && split.parts(f.Size) > 1 {
			done, parted = make([]int64, split.parts(f.Size)), true
		}
		if parted {
			err = c.fetchParts(ctx, src, f, out, side, done, progress, what)
			if errors.Is(err, errNoRange) {
				// A server that ignores Range: one stream from byte 0.
				if rerr := os.Remove(side); rerr != nil {
					return fmt.Errorf("hub: %w", rerr)
				}
				err = c.fetchInto(ctx, src, f, out, 0, progress, what)
			}
		} else {
			err = c.fetchInto(ctx, src, f, out, have, progress, what)
		}
		if err != nil {
			return err
		}
		if parted {
			if err := os.Remove(side); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("hub: %w", err)
			}
		}
	}
	return verify(out, f)
}

// source is where a file's bytes are, once the Hub's redirects are
// followed, and what the Hub said of them.
type source struct {
	url        string
	linkedSize string // X-Linked-Size ("" not said)
	etag       string // X-Linked-Etag, or the ETag of an answer not redirected
	xetHash    string // X-Xet-Hash: a Xet-backed file (its bytes from the CAS bridge)
}

// locate finds where the bytes of the file at u are: HEAD requests that
// follow the Hub's redirects on its own origin and stop at the first one
// to another origin (a CDN's or the CAS bridge's signed URL, fetched
// without the token), as huggingface_hub does; the X-Linked-* and X-Xet-*
// headers are read from the answer that carries them. ModelScope's file
// route is its own source (its answers are checked as they come).
func (c *Client) locate(ctx context.Context, u, what string) (source, error) {
	src := source{url: u}
	if c.modelScope() {
		return src, nil
	}
	for range maxRedirects {
		resp, err := c.do(ctx, c.noRedirect, http.MethodHead, src.url, http.Header{"Accept-Encoding": {"identity"}}, what)
		if err != nil {
			return source{}, err
		}
		resp.Body.Close()
		h := resp.Header
		if src.linkedSize == "" && src.etag == "" {
			src.linkedSize, src.etag = h.Get("X-Linked-Size"), h.Get("X-Linked-Etag")
		}
		if src.xetHash == "" {
			src.xetHash = h.Get("X-Xet-Hash")
		}
		loc := h.Get("Location")
		if resp.StatusCode < 300 || loc == "" {
			if resp.StatusCode > 299 {
				return source{}, fmt.Errorf("hub: %s: %s without a Location", what, resp.Status)
			}
			if src.etag == "" {
				src.etag = h.Get("ETag") // the Hub's own answer: a CDN's is never asked
			}
			return src, nil
		}
		next, err := resp.Request.URL.Parse(loc)
		if err != nil {
			return source{}, fmt.Errorf("hub: %s: redirect to %q: %w", what, loc, err)
		}
		src.url = next.String()
		if !c.sameOrigin(next) {
			return src, nil // signed: fetched as it is, without the token
		}
	}
	return source{}, fmt.Errorf("hub: %s: more than %d redirects", what, maxRedirects)
}

// check compares what the Hub said of the file with its listing.
func (s source) check(f File) error {
	return checkMeta(s.linkedSize, s.etag, f)
}

// checkMeta compares a size and an ETag the server announced with f's
// listing: an ETag that is a sha256 must be f's LFS oid (other ETags — a
// git blob id, a CDN's MD5 — are not compared).
func checkMeta(size, etag string, f File) error {
	if size != "" {
		if n, err := strconv.ParseInt(size, 10, 64); err == nil && n != f.Size {
			return fmt.Errorf("%w: X-Linked-Size %d, listed %d", ErrChecksum, n, f.Size)
		}
	}
	etag = strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
	if f.SHA256 != "" && sha256Hex.MatchString(etag) && etag != f.SHA256 {
		return fmt.Errorf("%w: the server's ETag %s is not the listed sha256 %s", ErrChecksum, etag, f.SHA256)
	}
	return nil
}

// fetchInto writes f's bytes from offset have on into out (positioned at
// have).
func (c *Client) fetchInto(ctx context.Context, src source, f File, out *os.File, have int64, progress func(int64), what string) error {
	h := http.Header{}
	if have > 0 {
		h.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := c.get(ctx, src.url, h, what)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if c.modelScope() {
		if err := checkMeta(resp.Header.Get("X-Linked-Size"), resp.Header.Get("ETag"), f); err != nil {
			return fmt.Errorf("hub: %s: %w", what, err)
		}
	}
	switch {
	case have > 0 && resp.StatusCode == http.StatusPartialContent:
		start, total, ok := contentRange(resp.Header.Get("Content-Range"))
		if !ok || start != have || (total >= 0 && total != f.Size) {
			return fmt.Errorf("hub: %s: Content-Range %q does not continue at %d of %d", what, resp.Header.Get("Content-Range"), have, f.Size)
		}
		progress(have)
	case resp.StatusCode == http.StatusOK:
		// The whole file (the server ignored the Range, or none was sent).
		if err := out.Truncate(0); err != nil {
			return fmt.Errorf("hub: %w", err)
		}
		have = 0
	default:
		return fmt.Errorf("hub: %s: unexpected %s", what, resp.Status)
	}
	n, err := copyAt(resp.Body, out, have, f.Size, func(n int64) { progress(have + n) })
	if err != nil {
		return fmt.Errorf("hub: %s: %w", what, err)
	}
	if have+n != f.Size {
		return fmt.Errorf("hub: %s: the answer ended at %d of %d bytes", what, have+n, f.Size)
	}
	return nil
}

// copyAt writes r into out from offset off on, one read (≤ ChunkSize) at
// a time, each written at once (so a stop loses at most one read in
// flight), never past limit; wrote is called with the bytes written so
// far after each write.
func copyAt(r io.Reader, out *os.File, off, limit int64, wrote func(int64)) (int64, error) {
	buf := make([]byte, ChunkSize)
	var n int64
	for {
		m, rerr := r.Read(buf)
		if m > 0 {
			if off+n+int64(m) > limit {
				return n, fmt.Errorf("more than the %d bytes listed", limit)
			}
			if _, err := out.WriteAt(buf[:m], off+n); err != nil {
				return n, err
			}
			n += int64(m)
			wrote(n)
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// partsSuffix names the file beside a download cut into parts that keeps
// each part's progress: one little-endian int64 per part, the bytes of it
// on disk, written after the bytes themselves.
const partsSuffix = ".parts"

// errNoRange: the server answered a ranged part with the whole file.
var errNoRange = errors.New("hub: the server ignores Range")

// partBounds is part k of n of size bytes: [start, end).
func partBounds(size int64, k, n int) (start, end int64) {
	return size * int64(k) / int64(n), size * int64(k+1) / int64(n)
}

// readParts reads the progress of a download cut into parts ("parted"
// false: none, or one that does not fit size).
func readParts(side string, size int64) (done []int64, parted bool) {
	b, err := os.ReadFile(side)
	if err != nil || len(b) == 0 || len(b)%8 != 0 {
		return nil, false
	}
	done = make([]int64, len(b)/8)
	for k := range done {
		done[k] = int64(binary.LittleEndian.Uint64(b[8*k:]))
		start, end := partBounds(size, k, len(done))
		if done[k] < 0 || done[k] > end-start {
			return nil, false
		}
	}
	return done, true
}

// stagedBytes is the bytes of a staged download on disk: its parts'
// progress when it is cut into parts, else its length.
func stagedBytes(part string, size int64) int64 {
	if done, ok := readParts(part+partsSuffix, size); ok {
		var n int64
		for _, d := range done {
			n += d
		}
		return n
	}
	if st, err := os.Stat(part); err == nil && st.Size() <= size {
		return st.Size()
	}
	return 0
}

// fetchParts fetches the parts of f not yet whole into out at once, each
// a ranged request from where it stopped, keeping their progress in side.
func (c *Client) fetchParts(ctx context.Context, src source, f File, out *os.File, side string, done []int64, progress func(int64), what string) error {
	sf, err := os.OpenFile(side, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer sf.Close()
	var mu sync.Mutex
	var total int64
	var sideErr error
	rec := make([]byte, 8*len(done))
	for k, d := range done {
		total += d
		binary.LittleEndian.PutUint64(rec[8*k:], uint64(d))
	}
	if _, err := sf.WriteAt(rec, 0); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	progress(total)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, len(done))
	var wg sync.WaitGroup
	for k := range done {
		start, end := partBounds(f.Size, k, len(done))
		if start+done[k] == end {
			continue
		}
		wg.Go(func() {
			from := start + done[k]
			resp, err := c.get(ctx, src.url, http.Header{"Range": {fmt.Sprintf("bytes=%d-%d", from, end-1)}}, what)
			if err == nil {
				defer resp.Body.Close()
				err = checkPart(resp, from, f.Size, what)
			}
			if err == nil {
				var record [8]byte
				base := done[k]
				_, err = copyAt(resp.Body, out, from, end, func(n int64) {
					mu.Lock()
					defer mu.Unlock()
					total += base + n - done[k]
					done[k] = base + n
					binary.LittleEndian.PutUint64(record[:], uint64(done[k]))
					if _, werr := sf.WriteAt(record[:], int64(8*k)); werr != nil && sideErr == nil {
						sideErr = fmt.Errorf("hub: %w", werr)
						cancel()
					}
					progress(total)
				})
				if err == nil && start+done[k] != end {
					err = fmt.Errorf("hub: %s: part %d ended at %d of %d", what, k, start+done[k], end)
				} else if err != nil {
					err = fmt.Errorf("hub: %s: %w", what, err)
				}
			}
			if err != nil {
				errs[k] = err
				cancel()
			}
		})
	}
	wg.Wait()
	if sideErr != nil {
		return sideErr
	}
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return nil
}

// checkPart accepts the answer to a ranged part starting at from: a 206
// whose Content-Range starts there (a 200 is errNoRange).
func checkPart(resp *http.Response, from, size int64, what string) error {
	switch resp.StatusCode {
	case http.StatusPartialContent:
		start, total, ok := contentRange(resp.Header.Get("Content-Range"))
		if !ok || start != from || (total >= 0 && total != size) {
			return fmt.Errorf("hub: %s: Content-Range %q is not the part at %d of %d", what, resp.Header.Get("Content-Range"), from, size)
		}
		return nil
	case http.StatusOK:
		return errNoRange
	}
	return fmt.Errorf("hub: %s: unexpected %s", what, resp.Status)
}

// contentRange parses "bytes START-END/TOTAL" (TOTAL -1 when "*").
func contentRange(h string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(h, "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	s, _, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		if total, err = strconv.ParseInt(tot, 10, 64); err != nil {
			return 0, 0, false
		}
	}
	return start, total, true
}

// verify hashes the whole of out and compares it with f.
func verify(out *os.File, f File) error {
	if _, err := out.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	var h hash.Hash
	want := f.SHA256
	if want != "" {
		h = sha256.New()
	} else {
		if f.OID == "" {
			return nil // nothing listed to check against
		}
		h = sha1.New()
		fmt.Fprintf(h, "blob %d\x00", f.Size)
		want = f.OID
	}
	n, err := io.Copy(h, out)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if n != f.Size {
		return fmt.Errorf("%w: %s has %d bytes, listed %d", ErrChecksum, f.Path, n, f.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%w: %s hashes to %s, listed %s", ErrChecksum, f.Path, got, want)
	}
	return nil
}
