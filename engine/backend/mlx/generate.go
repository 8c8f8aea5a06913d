package mlx

//go:generate go run ./internal/shimgen/cmd/shimgen -in mlxc.decl -h shim.h -c shim.c
