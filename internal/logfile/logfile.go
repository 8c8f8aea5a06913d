// Package logfile keeps the server's structured log in
// <data-dir>/logs/server.log, rotated by size (lumberjack), and reads it
// back for the admin API: the last lines of the current and rotated
// files, and the new lines as they are written.
package logfile

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"gopkg.in/natefinch/lumberjack.v2"
)

// Name is the log file's name in its directory.
const Name = "server.log"

// Defaults of Options.
const (
	DefaultMaxSizeMB = 100
	DefaultMaxFiles  = 5
	followBuffer     = 1024 // lines a slow follower may lag before it loses some
	maxLineBytes     = 1 << 20
)

// Options set the rotation.
type Options struct {
	// MaxSizeMB rotates the file once it would grow past this many
	// megabytes (default 100).
	MaxSizeMB int
	// MaxFiles is how many rotated files are kept (default 5).
	MaxFiles int
}

// File is the log file: an io.Writer for a slog handler (one record per
// Write), and its reader.
type File struct {
	dir string
	lj  *lumberjack.Logger

	mu     sync.Mutex
	subs   map[int]*follower
	nextID int
}

type follower struct {
	level int
	lines chan string
}

// Open creates dir if needed and opens dir/server.log for appending.
func Open(dir string, o Options) (*File, error) {
	if o.MaxSizeMB <= 0 {
		o.MaxSizeMB = DefaultMaxSizeMB
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = DefaultMaxFiles
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("logfile: %w", err)
	}
	return &File{dir: dir, subs: map[int]*follower{},
		lj: &lumberjack.Logger{Filename: filepath.Join(dir, Name), MaxSize: o.MaxSizeMB, MaxBackups: o.MaxFiles}}, nil
}

// Write appends p (one or more whole lines) to the file and hands each
// line to the followers.
func (f *File) Write(p []byte) (int, error) {
	n, err := f.lj.Write(p)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.subs) == 0 {
		return n, err
	}
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		lv := levelOf(line)
		for _, s := range f.subs {
			if lv < s.level {
				continue
			}
			select {
			case s.lines <- line:
			default: // a follower that cannot keep up loses lines
			}
		}
	}
	return n, err
}

// Close closes the file.
func (f *File) Close() error { return f.lj.Close() }

// Levels, in order; a line whose level is unknown counts as info.
var levels = []string{"debug", "info", "warn", "error"}

// CheckLevel says whether level is "" (every line) or a level name.
func (f *File) CheckLevel(level string) error {
	_, err := levelIndex(level)
	return err
}

func levelIndex(level string) (int, error) {
	if level == "" {
		return 0, nil
	}
	for i, l := range levels {
		if strings.EqualFold(level, l) || (l == "warn" && strings.EqualFold(level, "warning")) {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%q is not a level (debug, info, warn, error)", level)
}

// levelOf reads a line's level: slog's JSON "level" or text level=.
func levelOf(line string) int {
	var rec struct {
		Level string `json:"level"`
	}
	name := ""
	if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &rec) == nil {
		name = rec.Level
	} else if i := strings.Index(line, "level="); i >= 0 {
		name, _, _ = strings.Cut(line[i+len("level="):], " ")
	}
	// slog writes DEBUG, INFO, WARN, ERROR, with "+n"/"-n" offsets.
	name = strings.ToLower(strings.TrimRight(name, "+-0123456789"))
	if i, err := levelIndex(name); err == nil && name != "" {
		return i
	}
	return 1
}

// Tail returns up to n of the last lines at level or above, oldest
// first: from the current file, then the rotated ones, newest first.
func (f *File) Tail(n int, level string) ([]string, error) {
	min, err := levelIndex(level)
	if err != nil {
		return nil, err
	}
	files, err := f.files()
	if err != nil {
		return nil, err
	}
	var out []string // newest first while collecting
	for _, path := range files {
		lines, err := readLines(path)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // rotated away meanwhile
			}
			return nil, fmt.Errorf("logfile: %w", err)
		}
		for i := len(lines) - 1; i >= 0 && len(out) < n; i-- {
			if levelOf(lines[i]) >= min {
				out = append(out, lines[i])
			}
		}
		if len(out) >= n {
			break
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out, nil
}

// files lists the current file and the rotated ones, newest first
// (lumberjack names them server-<timestamp>.log, which sort by time).
func (f *File) files() ([]string, error) {
	des, err := os.ReadDir(f.dir)
	if err != nil {
		return nil, fmt.Errorf("logfile: %w", err)
	}
	base := strings.TrimSuffix(Name, filepath.Ext(Name))
	var rotated []string
	for _, de := range des {
		n := de.Name()
		if n != Name && strings.HasPrefix(n, base+"-") && strings.HasSuffix(n, filepath.Ext(Name)) {
			rotated = append(rotated, n)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(rotated)))
	out := []string{filepath.Join(f.dir, Name)}
	for _, n := range rotated {
		out = append(out, filepath.Join(f.dir, n))
	}
	return out, nil
}

func readLines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), maxLineBytes)
	for sc.Scan() {
		if l := sc.Text(); l != "" {
			out = append(out, l)
		}
	}
	return out, sc.Err()
}

// Follow calls fn with every line written from now on at level or above,
// until ctx ends (then it returns nil).
func (f *File) Follow(ctx context.Context, level string, fn func(line string)) error {
	min, err := levelIndex(level)
	if err != nil {
		return err
	}
	s := &follower{level: min, lines: make(chan string, followBuffer)}
	f.mu.Lock()
	id := f.nextID
	f.nextID++
	f.subs[id] = s
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.subs, id)
		f.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case l := <-s.lines:
			fn(l)
		}
	}
}
