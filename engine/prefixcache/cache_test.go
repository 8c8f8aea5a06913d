package prefixcache

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func block(seed byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	return b
}

func TestChain(t *testing.T) {
	m1, m2 := ModelKey("weights-a", "layers 0-4"), ModelKey("weights-b", "layers 0-4")
	toks := make([]int, 200)
	for i := range toks {
		toks[i] = i * 3
	}
	k := Chain(m1, toks, 64)
	if len(k) != 3 {
		t.Fatalf("%d keys for 200 tokens in blocks of 64, want 3", len(k))
	}
	if got := Chain(m1, toks[:128], 64); got[0] != k[0] || got[1] != k[1] {
		t.Error("a prefix's keys differ from the full prompt's")
	}
	if Chain(m2, toks, 64)[0] == k[0] {
		t.Error("two models share a key")
	}
	other := append([]int{1}, toks[1:]...)
	ko := Chain(m1, other, 64)
	for i := range ko {
		if ko[i] == k[i] {
			t.Errorf("block %d: same key although token 0 differs", i)
		}
	}
	late := append([]int(nil), toks...)
	late[100]++
	kl := Chain(m1, late, 64)
	if kl[0] != k[0] || kl[1] == k[1] || kl[2] == k[2] {
		t.Error("a change in block 1 must change blocks 1 and 2 only")
	}
	if ModelKey("ab", "c") == ModelKey("a", "bc") {
		t.Error("model key parts are not delimited")
	}
}

func TestHotLRU(t *testing.T) {
	c, err := Open(Config{HotBytes: 300, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := ModelKey("m")
	keys := Chain(m, make([]int, 4*64), 64)
	for i := range 3 {
		if !c.Put(m, keys[i], 64, block(byte(i), 100)) {
			t.Fatalf("block %d: not new", i)
		}
	}
	if c.Put(m, keys[0], 64, block(0, 100)) {
		t.Error("a block put twice counted as new")
	}
	// keys[0] is now the most recent; adding a 4th evicts keys[1].
	c.Put(m, keys[3], 64, block(3, 100))
	for i, want := range []Tier{Hot, Miss, Hot, Hot} {
		if got := c.Contains(keys[i]); got != want {
			t.Errorf("block %d: tier %v, want %v", i, got, want)
		}
	}
	if data, tier := c.Get(keys[3]); tier != Hot || !bytes.Equal(data, block(3, 100)) {
		t.Errorf("Get: tier %v, data equal %v", tier, bytes.Equal(data, block(3, 100)))
	}
	s := c.Stats()
	if s.HotBlocks != 3 || s.HotBytes != 300 || s.HotEvicted != 1 || s.HotHits != 1 {
		t.Errorf("stats %+v", s)
	}
	if got := c.ClearHot(); got.Blocks != 3 || got.Bytes != 300 {
		t.Errorf("ClearHot: %+v", got)
	}
	if _, tier := c.Get(keys[0]); tier != Miss {
		t.Error("a block survived ClearHot")
	}
}

// fill opens a cache on dir, stores n blocks and closes it (which writes
// them all).
func fill(t *testing.T, dir string, n, size int) []Key {
	t.Helper()
	c, err := Open(Config{HotBytes: 1 << 20, Dir: dir, DiskBytes: 1 << 20, WriteQueue: n, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	m := ModelKey("m")
	keys := Chain(m, make([]int, n*64), 64)
	for i, k := range keys {
		c.Put(m, k, 64, block(byte(i), size))
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.DiskWrites != int64(n) || s.DiskBlocks != n {
		t.Fatalf("after close: %+v", s)
	}
	return keys
}

func TestDiskSurvivesReopen(t *testing.T) {
	dir := t.TempDir()
	keys := fill(t, dir, 4, 1000)
	c, err := Open(Config{HotBytes: 1 << 20, Dir: dir, DiskBytes: 1 << 20, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := c.Stats(); s.DiskBlocks != 4 || s.DiskBytes != 4*(1000+headerSize) || s.HotBlocks != 0 {
		t.Fatalf("reopened: %+v", s)
	}
	data, tier := c.Get(keys[2])
	if tier != Disk || !bytes.Equal(data, block(2, 1000)) {
		t.Fatalf("Get after reopen: tier %v, data equal %v", tier, bytes.Equal(data, block(2, 1000)))
	}
	if _, tier := c.Get(keys[2]); tier != Hot {
		t.Errorf("a block read from the SSD was not promoted: second Get from %v", tier)
	}
	if got, err := c.ClearDisk(); err != nil || got.Blocks != 4 {
		t.Errorf("ClearDisk: %+v %v", got, err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*"+fileExt))
	if len(files) != 0 {
		t.Errorf("%d files left after ClearDisk", len(files))
	}
}

func TestCorruptFiles(t *testing.T) {
	cases := []struct {
		name string
		harm func(t *testing.T, path string)
		// atOpen: found by the index scan (size or header), else on read.
		atOpen bool
	}{
		{"flipped data byte", func(t *testing.T, p string) { flip(t, p, headerSize+500) }, false},
		{"flipped last byte", func(t *testing.T, p string) { flip(t, p, headerSize+999) }, false},
		{"flipped header byte", func(t *testing.T, p string) { flip(t, p, 20) }, true},
		{"bad magic", func(t *testing.T, p string) { flip(t, p, 0) }, true},
		{"truncated data", func(t *testing.T, p string) { os.Truncate(p, headerSize+10) }, true},
		{"truncated header", func(t *testing.T, p string) { os.Truncate(p, 40) }, true},
		{"empty", func(t *testing.T, p string) { os.Truncate(p, 0) }, true},
		{"grown", func(t *testing.T, p string) {
			f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			f.Write([]byte("xx"))
			f.Close()
		}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			keys := fill(t, dir, 3, 1000)
			bad := blockPath(dir, keys[1])
			tc.harm(t, bad)
			c, err := Open(Config{HotBytes: 1 << 20, Dir: dir, DiskBytes: 1 << 20, Logger: quiet()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := c.Stats().Corrupt; (got == 1) != tc.atOpen {
				t.Errorf("corrupt after open: %d (expected at open: %v)", got, tc.atOpen)
			}
			if _, tier := c.Get(keys[0]); tier != Disk {
				t.Errorf("a good block: %v", tier)
			}
			if data, tier := c.Get(keys[1]); tier != Miss || data != nil {
				t.Fatalf("a bad block: tier %v", tier)
			}
			if s := c.Stats(); s.Corrupt != 1 || s.DiskBlocks != 2 {
				t.Errorf("stats %+v, want 1 corrupt and 2 blocks left", s)
			}
			if _, err := os.Stat(bad); !os.IsNotExist(err) {
				t.Errorf("the bad file is still there: %v", err)
			}
			// Recomputed and stored again: replaced by a good file.
			m := ModelKey("m")
			c.Put(m, keys[1], 64, block(1, 1000))
			c.Flush()
			if _, data, err := readBlock(bad, keys[1]); err != nil || !bytes.Equal(data, block(1, 1000)) {
				t.Errorf("the replaced file: %v", err)
			}
		})
	}
}

func flip(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x55
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestDiskCapAndLeftovers(t *testing.T) {
	dir := t.TempDir()
	fill(t, dir, 5, 1000)
	// A temporary file of an interrupted write, and a foreign file.
	os.WriteFile(filepath.Join(dir, "ab", ".x.kvb.tmp123"), []byte("junk"), 0o644)
	os.WriteFile(filepath.Join(dir, "README"), []byte("mine"), 0o644)
	c, err := Open(Config{HotBytes: 1 << 20, Dir: dir, DiskBytes: 3 * (1000 + headerSize), Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if s := c.Stats(); s.DiskBlocks != 3 || s.DiskEvicted != 2 || s.Corrupt != 0 {
		t.Errorf("reopened under a smaller cap: %+v", s)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*"+fileExt))
	if len(files) != 3 {
		t.Errorf("%d block files, want 3", len(files))
	}
	if _, err := os.Stat(filepath.Join(dir, "ab", ".x.kvb.tmp123")); !os.IsNotExist(err) {
		t.Error("a leftover temporary file survived")
	}
	if _, err := os.Stat(filepath.Join(dir, "README")); err != nil {
		t.Error("a foreign file was removed")
	}
}

func TestQueueFullDropsAreCounted(t *testing.T) {
	dir := t.TempDir()
	c, err := Open(Config{HotBytes: 1 << 30, Dir: dir, DiskBytes: 1 << 30, WriteQueue: 1, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	m := ModelKey("m")
	const n = 200
	keys := Chain(m, make([]int, n*64), 64)
	for i, k := range keys {
		c.Put(m, k, 64, block(byte(i), 64<<10))
	}
	c.Close()
	s := c.Stats()
	if s.Dropped == 0 {
		t.Skip("the writer kept up with a queue of 1; nothing to check")
	}
	if s.Dropped+s.DiskWrites != n || s.Stored != n {
		t.Errorf("dropped %d + written %d != %d (stored %d)", s.Dropped, s.DiskWrites, n, s.Stored)
	}
}

// TestPutChecksUnreadFiles: putting a block whose file was found at Open
// but never read checks the file behind the request: a good one stays (no
// write), a bad one is counted and replaced.
func TestPutChecksUnreadFiles(t *testing.T) {
	dir := t.TempDir()
	keys := fill(t, dir, 2, 1000)
	flip(t, blockPath(dir, keys[1]), headerSize+300)
	c, err := Open(Config{HotBytes: 1 << 20, Dir: dir, DiskBytes: 1 << 20, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := ModelKey("m")
	for i, k := range keys {
		c.Put(m, k, 64, block(byte(i), 1000))
	}
	c.Flush()
	if s := c.Stats(); s.Corrupt != 1 || s.DiskWrites != 1 || s.DiskBlocks != 2 || s.Stored != 0 {
		t.Errorf("stats %+v, want the bad file counted and rewritten, the good one left", s)
	}
	for i, k := range keys {
		if _, data, err := readBlock(blockPath(dir, k), k); err != nil || !bytes.Equal(data, block(byte(i), 1000)) {
			t.Errorf("block %d: %v", i, err)
		}
	}
	// Both are verified now: putting them again queues nothing.
	c.ClearHot()
	for i, k := range keys {
		c.Put(m, k, 64, block(byte(i), 1000))
	}
	c.Flush()
	if s := c.Stats(); s.DiskWrites != 1 {
		t.Errorf("verified files written again: %+v", s)
	}
}
