package hub

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
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

// DownloadFile fetches f of repo at commit into dst, resuming from what
// dst already holds (a Range request; a server that ignores it makes the
// download start over). It then checks the whole file against f (size,
// and sha256 for an LFS file or the git blob id otherwise) and returns
// ErrChecksum when it does not match. progress is called with the bytes
// written as they are written (may be nil).
func (c *Client) DownloadFile(ctx context.Context, repo, commit string, f File, dst string, progress func(int64)) error {
	if progress == nil {
		progress = func(int64) {}
	}
	out, err := os.OpenFile(dst, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer out.Close()
	have, err := out.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	if have > f.Size {
		if err := out.Truncate(0); err != nil {
			return fmt.Errorf("hub: %w", err)
		}
		have = 0
	}
	if have < f.Size || f.Size == 0 {
		if err := c.fetchInto(ctx, repo, commit, f, out, have, progress); err != nil {
			return err
		}
	}
	return verify(out, f)
}

// fetchInto writes f's bytes from offset have on into out (positioned at
// have).
func (c *Client) fetchInto(ctx context.Context, repo, commit string, f File, out *os.File, have int64, progress func(int64)) error {
	what := "file " + f.Path + " of " + repo
	h := http.Header{}
	if have > 0 {
		h.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := c.get(ctx, c.ResolveURL(repo, commit, f.Path), h, what)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := checkHeaders(resp, f); err != nil {
		return fmt.Errorf("hub: %s: %w", what, err)
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
		if _, err := out.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("hub: %w", err)
		}
		have = 0
	default:
		return fmt.Errorf("hub: %s: unexpected %s", what, resp.Status)
	}
	buf := make([]byte, ChunkSize)
	for {
		// Each read is written at once, so what a stop loses is at most
		// one read (≤ ChunkSize) in flight.
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if have+int64(n) > f.Size {
				return fmt.Errorf("hub: %s: more than the %d bytes listed", what, f.Size)
			}
			if _, err := out.Write(buf[:n]); err != nil {
				return fmt.Errorf("hub: %w", err)
			}
			have += int64(n)
			progress(have)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("hub: %s: %w", what, rerr)
		}
	}
	if have != f.Size {
		return fmt.Errorf("hub: %s: the answer ended at %d of %d bytes", what, have, f.Size)
	}
	return nil
}

// checkHeaders compares what a resolve answer says of the file with what
// the file listing said: the Hub's X-Linked-Size and X-Linked-Etag (on
// its redirect to the CDN, for LFS files), or the ETag of an answer that
// was not redirected (a CDN's ETag is its own business: a Xet hash, an
// MD5).
func checkHeaders(resp *http.Response, f File) error {
	h := resp.Header
	redirected := false
	for r := resp.Request; r != nil && r.Response != nil; r = r.Response.Request {
		redirected = true
		if r.Response.Header.Get("X-Linked-Etag") != "" || r.Response.Header.Get("X-Linked-Size") != "" {
			h = r.Response.Header
		}
	}
	if s := h.Get("X-Linked-Size"); s != "" {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n != f.Size {
			return fmt.Errorf("%w: X-Linked-Size %d, listed %d", ErrChecksum, n, f.Size)
		}
	}
	etag := h.Get("X-Linked-Etag")
	if etag == "" && !redirected {
		etag = h.Get("ETag")
	}
	etag = strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
	if f.SHA256 != "" && sha256Hex.MatchString(etag) && etag != f.SHA256 {
		return fmt.Errorf("%w: the server's ETag %s is not the listed sha256 %s", ErrChecksum, etag, f.SHA256)
	}
	return nil
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
