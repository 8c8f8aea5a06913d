package main

import (
	"context"
	"errors"
	"io"
)

func runTokenize(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("tokenize: not built yet")
}
