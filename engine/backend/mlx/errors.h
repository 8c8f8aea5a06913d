// The error handler and the MLX thread's marker, shared by the cgo files
// of package mlx (errors.c defines them).
#ifndef FUSION_MLX_ERRORS_H
#define FUSION_MLX_ERRORS_H

#include "shim.h"

// fusion_mlx_install_handler makes mlx-c report errors into a buffer of
// the failing thread instead of printing them and calling exit(-1).
void fusion_mlx_install_handler(void);

// fusion_mlx_set_worker marks the calling thread as the one MLX work runs
// on.
void fusion_mlx_set_worker(void);

// fusion_mlx_begin clears the calling thread's error and returns 1 if it
// is the MLX thread, 0 otherwise.
int fusion_mlx_begin(void);

// fusion_mlx_error is the calling thread's last error message ("" if
// none since fusion_mlx_begin).
const char* fusion_mlx_error(void);

#endif
