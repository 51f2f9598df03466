/* cuda_bf16.h (CPU emulation, cuda_runtime.h here): bf16 as its 16 bits,
 * converted from float by round to nearest even, as the device does */
#pragma once
#include <cstdint>
#include <cstring>
struct __nv_bfloat16 {
    uint16_t x;
};
static inline __nv_bfloat16 __float2bfloat16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fff + ((u >> 16) & 1);
    __nv_bfloat16 r;
    r.x = (uint16_t)(u >> 16);
    return r;
}
static inline float __bfloat162float(__nv_bfloat16 b) {
    const uint32_t u = (uint32_t)b.x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
