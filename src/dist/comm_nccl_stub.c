/* comm_nccl_stub.c - linked when the build has no NCCL (no CUDA toolkit, or
 * one without nccl.h / libnccl): multi-GPU runs are an error that says so. */
#include "comm.h"
#include "errmsg.h"

#define NO_NCCL                                                                           \
    "this hgrn was built without NCCL (no CUDA toolkit with nccl.h and libnccl found at " \
    "build time), so it cannot run on several GPUs; install NCCL and rebuild"

int comm_nccl_unique_id(void *id, size_t len, char *err, size_t errlen) {
    (void)id;
    (void)len;
    set_err(err, errlen, NO_NCCL);
    return -1;
}

Comm *comm_nccl_create(Backend *bk, int rank, int world, int local_rank, const void *id, int timeout_s, char *err,
                       size_t errlen) {
    (void)bk;
    (void)rank;
    (void)world;
    (void)local_rank;
    (void)id;
    (void)timeout_s;
    set_err(err, errlen, NO_NCCL);
    return NULL;
}
