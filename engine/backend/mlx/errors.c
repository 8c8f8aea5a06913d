//go:build cgo

#include <string.h>

#include "errors.h"

// mlx-c calls the handler synchronously on the thread whose call failed;
// the message ends with " at file:line".
static __thread char fusion_mlx_msg[4096];
static __thread int fusion_mlx_worker;

static void fusion_mlx_handler(const char* msg, void* data) {
  (void)data;
  if (msg == NULL) {
    msg = "unknown MLX error";
  }
  strncpy(fusion_mlx_msg, msg, sizeof(fusion_mlx_msg) - 1);
  fusion_mlx_msg[sizeof(fusion_mlx_msg) - 1] = 0;
}

void fusion_mlx_install_handler(void) {
  mlx_set_error_handler(fusion_mlx_handler, NULL, NULL);
}

void fusion_mlx_set_worker(void) {
  fusion_mlx_worker = 1;
}

int fusion_mlx_begin(void) {
  fusion_mlx_msg[0] = 0;
  return fusion_mlx_worker;
}

const char* fusion_mlx_error(void) {
  return fusion_mlx_msg;
}
