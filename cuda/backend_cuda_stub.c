/* backend_cuda_stub.c - linked when the build has no CUDA backend: asking for it is
 * an error that says so, never a silent fallback to the CPU. */
#include "backend.h"
#include <stdio.h>

Backend *backend_cuda_create(int device, int bf16, int gemm_tune, char *err, size_t errlen) {
    snprintf(err, errlen,
             "this hgrn was built without CUDA (no toolkit found at build time); "
             "use --device cpu or rebuild on a machine with the CUDA toolkit");
    return NULL;
}

int backend_cuda_available(void) { return 0; }
