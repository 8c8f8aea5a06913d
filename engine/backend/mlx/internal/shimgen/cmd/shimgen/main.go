// Command shimgen writes shim.h and shim.c from mlxc.decl (package mlx
// runs it with go generate).
package main

import (
	"flag"
	"fmt"
	"os"

	"fusion/engine/backend/mlx/internal/shimgen"
)

func main() {
	in := flag.String("in", "mlxc.decl", "declaration file")
	h := flag.String("h", "shim.h", "header to write")
	c := flag.String("c", "shim.c", "C source to write")
	flag.Parse()
	if err := run(*in, *h, *c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(in, h, c string) error {
	src, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	d, err := shimgen.Parse(string(src))
	if err != nil {
		return err
	}
	if err := os.WriteFile(h, []byte(d.Header()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(c, []byte(d.Source()), 0o644)
}
