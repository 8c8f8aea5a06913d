//go:build cgo

package mlx

/*
#include "errors.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
)

// ErrClosed is returned by Do after Close.
var ErrClosed = errors.New("mlx: runtime closed")

// Error is a failure reported by MLX: the mlx-c function that failed and
// MLX's message (which ends with " at file:line").
type Error struct {
	Op  string
	Msg string
}

func (e *Error) Error() string { return "mlx: " + e.Op + ": " + e.Msg }

// Runtime is the one goroutine, locked to its OS thread, that all MLX work
// runs on: MLX's default streams are thread-local and its graph building
// is not made for concurrent mutation. Do hands it a function; arenas,
// arrays and memory calls must only be used inside such a function.
type Runtime struct {
	jobs chan job
	quit chan struct{}
	done chan struct{}
	once sync.Once

	// Set on the worker before Open returns, read-only afterwards.
	stream C.mlx_stream
	gpu    bool
}

type job struct {
	fn  func() error
	out chan result
}

type result struct {
	err   error
	panic any
}

// Open starts the MLX thread. It fails with Available's error when the
// library is missing. The thread computes on the GPU stream when MLX
// reports Metal, on the CPU stream otherwise; Close stops it.
func Open() (*Runtime, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	r := &Runtime{jobs: make(chan job), quit: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan struct{})
	go r.loop(ready)
	<-ready
	return r, nil
}

func (r *Runtime) loop(ready chan<- struct{}) {
	// The goroutine never unlocks: its thread holds MLX's thread-local
	// state and exits with it.
	runtime.LockOSThread()
	defer close(r.done)
	C.fusion_mlx_set_worker()
	var metal C.bool
	C.fusion_mlx_begin()
	if C.mlx_metal_is_available(&metal) == 0 && bool(metal) {
		r.stream, r.gpu = C.mlx_default_gpu_stream_new(), true
	} else {
		r.stream = C.mlx_default_cpu_stream_new()
	}
	close(ready)
	for {
		select {
		case j := <-r.jobs:
			j.out <- run(j.fn, j.out)
		case <-r.quit:
			C.mlx_stream_free(r.stream)
			return
		}
	}
}

// errGoexit is Do's answer when fn called runtime.Goexit (t.FailNow in a
// test): the MLX thread is gone with it.
var errGoexit = errors.New("mlx: the function given to Do called runtime.Goexit (t.Fatal?); the runtime is closed")

// run calls fn, turning a panic into a result for the caller to re-raise.
// If fn calls runtime.Goexit, the worker dies; the caller still gets an
// answer on out.
func run(fn func() error, out chan<- result) (res result) {
	returned := false
	defer func() {
		if p := recover(); p != nil {
			res.panic = p
		} else if !returned {
			out <- result{err: errGoexit}
		}
	}()
	err := fn()
	returned = true
	return result{err: err}
}

// Do runs fn on the MLX thread and returns its error. ctx cancels the
// call only while it waits for the thread; once fn runs it runs to the
// end. A panic in fn is re-raised on the caller.
func (r *Runtime) Do(ctx context.Context, fn func() error) error {
	// A context already done never runs fn (select alone would pick at
	// random between it and a free thread).
	if err := ctx.Err(); err != nil {
		return err
	}
	j := job{fn: fn, out: make(chan result, 1)}
	select {
	case r.jobs <- j:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.done:
		return ErrClosed
	}
	res := <-j.out
	if res.panic != nil {
		panic(res.panic)
	}
	return res.err
}

// GPU reports whether the runtime computes on the GPU (Metal).
func (r *Runtime) GPU() bool { return r.gpu }

// Close stops the MLX thread after the running call. Arrays made on it
// must have been freed; Do fails with ErrClosed afterwards.
func (r *Runtime) Close() error {
	r.once.Do(func() { close(r.quit) })
	<-r.done
	return nil
}

// check runs an mlx-c call on the MLX thread and turns a failure into an
// *Error naming op. It panics when called from another thread: that is a
// bug (the call must be inside Do).
func check(op string, call func() C.int) error {
	if C.fusion_mlx_begin() == 0 {
		panic(fmt.Sprintf("mlx: %s called outside Runtime.Do", op))
	}
	if call() != 0 {
		return &Error{Op: op, Msg: C.GoString(C.fusion_mlx_error())}
	}
	return nil
}

// Memory is MLX's allocator counters, in bytes.
type Memory struct {
	Active int64 // held by live arrays
	Peak   int64 // most ever active since start or ResetPeak
	Cache  int64 // freed buffers kept for reuse
}

// Memory reads the allocator counters on the MLX thread (it must not be
// called inside Do).
func (r *Runtime) Memory(ctx context.Context) (Memory, error) {
	var a, p, c C.size_t
	err := r.Do(ctx, func() error {
		return errors.Join(
			check("mlx_get_active_memory", func() C.int { return C.mlx_get_active_memory(&a) }),
			check("mlx_get_peak_memory", func() C.int { return C.mlx_get_peak_memory(&p) }),
			check("mlx_get_cache_memory", func() C.int { return C.mlx_get_cache_memory(&c) }),
		)
	})
	return Memory{Active: int64(a), Peak: int64(p), Cache: int64(c)}, err
}

// ResetPeak sets the peak counter to the active memory.
func (r *Runtime) ResetPeak(ctx context.Context) error {
	return r.Do(ctx, func() error {
		return check("mlx_reset_peak_memory", func() C.int { return C.mlx_reset_peak_memory() })
	})
}

// ClearCache returns the allocator's cached buffers to the system.
func (r *Runtime) ClearCache(ctx context.Context) error {
	return r.Do(ctx, func() error {
		return check("mlx_clear_cache", func() C.int { return C.mlx_clear_cache() })
	})
}

// SetMemoryLimit sets MLX's memory limit (the active memory past which
// allocations wait for memory to be freed, or fail), in bytes, and
// returns the previous one.
func (r *Runtime) SetMemoryLimit(ctx context.Context, limit int64) (int64, error) {
	return r.setLimit(ctx, "mlx_set_memory_limit", limit, func(prev *C.size_t, n C.size_t) C.int { return C.mlx_set_memory_limit(prev, n) })
}

// SetCacheLimit sets how much freed memory MLX's allocator keeps for
// reuse, in bytes, and returns the previous limit. MLX's CPU allocator
// keeps none (and reports 0).
func (r *Runtime) SetCacheLimit(ctx context.Context, limit int64) (int64, error) {
	return r.setLimit(ctx, "mlx_set_cache_limit", limit, func(prev *C.size_t, n C.size_t) C.int { return C.mlx_set_cache_limit(prev, n) })
}

func (r *Runtime) setLimit(ctx context.Context, op string, limit int64, set func(prev *C.size_t, n C.size_t) C.int) (int64, error) {
	if limit < 0 {
		return 0, fmt.Errorf("mlx: %s: negative limit %d", op, limit)
	}
	var prev C.size_t
	err := r.Do(ctx, func() error {
		return check(op, func() C.int { return set(&prev, C.size_t(limit)) })
	})
	return int64(prev), err
}
