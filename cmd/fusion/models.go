package main

import (
	"context"
	"errors"
	"io"
)

func runModels(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("models: not built yet")
}
