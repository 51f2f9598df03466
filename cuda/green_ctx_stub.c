/* green_ctx_stub.c - linked when the build has no CUDA backend: the SM
 * split of gpu_partition.h (cuda/green_ctx.cu) is unavailable, and every call
 * says so. */
#include "gpu_partition.h"

#include <stdio.h>

int gpu_partition_query(int device, int *sms, int *min_sms, int *align, char *why, size_t whylen) {
    (void)device;
    *sms = *min_sms = *align = 0;
    snprintf(why, whylen, "this hgrn was built without CUDA");
    return -1;
}
int gpu_partition_create(int device, int input_sms, char *why, size_t whylen) {
    (void)device;
    (void)input_sms;
    snprintf(why, whylen, "this hgrn was built without CUDA");
    return 0;
}
void gpu_partition_disable(const char *why) { (void)why; }
void gpu_partition_destroy(void) {}
int gpu_partition_sms(int side) {
    (void)side;
    return 0;
}
void *gpu_partition_stream(int side, int priority) {
    (void)side;
    (void)priority;
    return NULL;
}
void gpu_partition_stream_destroy(void *stream) { (void)stream; }
int gpu_partition_stream_side(void *stream) {
    (void)stream;
    return -1;
}
int gpu_partition_probe(void *stream, int blocks, int graph, unsigned char *mask, int nmask) {
    (void)stream;
    (void)blocks;
    (void)graph;
    (void)mask;
    (void)nmask;
    return -1;
}
void gpu_backend_use_partition(Backend *bk, int side) {
    (void)bk;
    (void)side;
}
