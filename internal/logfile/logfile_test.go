package logfile

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRotateAndTail: a 1 MB file rotates as a real slog JSON logger fills
// it; Tail reads across the current and rotated files in order, filters
// by level, and the kept files are bounded.
func TestRotateAndTail(t *testing.T) {
	dir := t.TempDir()
	f, err := Open(dir, Options{MaxSizeMB: 1, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log := slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelDebug}))
	pad := strings.Repeat("x", 200)
	const total = 12000 // ~3 MB: two rotations at least
	for i := 0; i < total; i++ {
		if i%100 == 99 {
			log.Warn("line", "i", i, "pad", pad)
		} else {
			log.Info("line", "i", i, "pad", pad)
		}
	}
	files, err := f.files()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("no rotation: %v", files)
	}
	// The newest 6000 lines span the current file and a rotated one.
	lines, err := f.Tail(6000, "")
	if err != nil {
		t.Fatal(err)
	}
	cur, _ := readLines(filepath.Join(dir, Name))
	if len(lines) != 6000 || len(cur) >= 6000 {
		t.Fatalf("tail: %d lines, current file %d", len(lines), len(cur))
	}
	for k, l := range lines {
		if want := fmt.Sprintf(`"i":%d,`, total-6000+k); !strings.Contains(l, want) {
			t.Fatalf("line %d out of order: %.80s (want %s)", k, l, want)
		}
	}
	warns, err := f.Tail(5, "warn")
	if err != nil || len(warns) != 5 || !strings.Contains(warns[4], fmt.Sprintf(`"i":%d,`, total-1)) {
		t.Fatalf("warn tail: %v %d", err, len(warns))
	}
	for _, l := range warns {
		if !strings.Contains(l, `"level":"WARN"`) {
			t.Fatalf("level filter let through: %.80s", l)
		}
	}
	if _, err := f.Tail(1, "loud"); err == nil {
		t.Error("a bad level is accepted")
	}
	// lumberjack removes old files in the background.
	deadline := time.Now().Add(5 * time.Second)
	for {
		des, _ := os.ReadDir(dir)
		if len(des) <= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d files kept, want ≤ 3", len(des))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFollow: a follower gets the lines written after it starts, at its
// level or above, and stops with its context.
func TestFollow(t *testing.T) {
	f, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log := slog.New(slog.NewJSONHandler(f, nil))
	log.Error("before")
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan string, 10)
	done := make(chan error, 1)
	go func() { done <- f.Follow(ctx, "warn", func(l string) { got <- l }) }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		f.mu.Lock()
		n := len(f.subs)
		f.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("follower never registered")
		}
		time.Sleep(time.Millisecond)
	}
	log.Info("quiet")
	log.Warn("loud")
	select {
	case l := <-got:
		if !strings.Contains(l, `"msg":"loud"`) {
			t.Fatalf("followed: %s", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no line followed")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("extra lines: %v", <-got)
	}
}
