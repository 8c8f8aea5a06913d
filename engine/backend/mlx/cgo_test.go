//go:build cgo

package mlx

const cgoEnabled = true
