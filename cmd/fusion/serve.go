package main

import (
	"context"
	"errors"
	"io"
)

// runServe will start a node; the server lands with the OpenAI API issue.
func runServe(_ context.Context, _ []string, _, _ io.Writer) error {
	return errors.New("the server is not built yet (see issue 4, 'A node that serves the OpenAI API'); " +
		"what works today: `fusion models create-demo`, `fusion tokenize`, `make test`, `make bench`")
}
