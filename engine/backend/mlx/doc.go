// Package mlx binds MLX through mlx-c, the foundation of the MLX compute
// backend (fusion's backend on Apple Silicon, and the reference for it
// everywhere mlx-c builds).
//
// The binding is cgo over dlopen: nothing links against MLX at build
// time, and no mlx-c header is part of the project. mlxc.decl declares the
// few mlx-c functions used; go generate turns it into shim.h (a function
// pointer per function and a forwarder with mlx-c's name) and shim.c
// (dlsym of every pointer). Tests check that the generated files are up
// to date and that every declaration compiles against the real headers of
// the library built by scripts/mlxc.sh.
//
// Loading never aborts the process. The first Available or Open looks for
// libmlxc in $FUSION_MLXC when it is set (a file, or a directory holding
// it directly or in lib/), otherwise next to the executable, then in the
// build cache ~/.cache/fusion/mlxc/*/lib; binds it; installs the error handler before
// any other call; and checks that MLX's version is the one the vendored
// mlx-c is written for. Available says why MLX cannot be used, and in a
// CGO_ENABLED=0 build says the build has no cgo.
//
// All MLX work runs on one goroutine locked to its OS thread (Runtime.Do):
// MLX's default stream is thread-local and its graph is not built for
// concurrent mutation. An MLX error is a Go *Error naming the mlx-c
// function, never the library's default exit(-1). Arrays belong to an
// Arena that frees them in bulk (Release after a layer, Free after a
// step); weights are wrapped without a copy (Wrap) and detached from the
// arena that made them.
//
// Backend implements backend.Backend over the binding: its steps record
// the model's ops and build and evaluate MLX's graph on the MLX thread at
// Eval and Read only. By default it computes as mlx-lm does, in the
// model's dtype (bf16 activations and KV caches for a bf16 or
// bf16-scaled quantized checkpoint), and matches mlx-lm's own logits to
// about 5e-6; Options.Float32 computes in float32 like the CPU backend and
// matches its logits to about 3e-6. It is not yet wired into the node
// (--backend).
package mlx
