/* gpu_images.h - the GPU image pipeline: batched nvJPEG decoding and the
 * DeiT/timm training and evaluation transforms as CUDA kernels over a batch.
 *
 * Contract between the loader (loader_gpu_pipe.c, which reads files and
 * draws every random parameter on the CPU with the CPU pipeline's own code)
 * and its implementation (gpu_images.cu, beside this file; gpu_images_stub.c
 * without nvJPEG). Neither side knows the other:
 * the loader never includes a CUDA header, the implementation knows nothing
 * of datasets, loaders or models. Built without CUDA or without nvJPEG,
 * gpu_images_create fails with a message saying so (data.decode = gpu is then
 * an error naming the key; auto falls back to the CPU).
 *
 * One batch goes through three calls:
 *   1. gpu_images_decode   the JPEG samples through nvJPEG on one decode unit
 *                          (below), to planar YCbCr in device memory. A
 *                          sample nvJPEG fails on comes back with status
 *                          GPU_SAMPLE_DECODE_FAILED: the caller decodes it on
 *                          the CPU and passes its pixels instead
 *                          (GPU_SRC_PIXELS), never a blank image.
 *   2. (the caller fixes the failed samples)
 *   3. gpu_images_transform  per sample: YCbCr -> RGB (libjpeg's fancy
 *                          upsampling and integer colour conversion) of the
 *                          source rectangle, PIL's antialiased separable
 *                          resize (bicubic/bilinear) of it, the flip, the
 *                          ImgOp list (image_params.h), random erasing with
 *                          CPU-drawn noise; then Mixup/CutMix over the batch,
 *                          written as uint8 CHW into an output slot.
 * The output stays uint8 CHW: the model's input op (patchify_u8) normalises
 * into its own dtype while it patchifies, so a normalised copy here would
 * only cost memory traffic (4x the bytes for fp32).
 *
 * Decode units. A unit is one nvJPEG handle + decoder state, a CUDA stream
 * and two plane buffers; it decodes one call at a time. Units are numbered
 * 0 .. gpu_images_units() - 1: first cfg->units of the primary backend
 * (hardware engines or GPU-hybrid), then cfg->hybrid_units GPU-hybrid ones
 * (only when the primary backend is the hardware: a batch can then be split
 * between the engines and the CUDA cores). Different units may be driven
 * concurrently from different host threads, and concurrently with the probe,
 * the transform and the slot calls; that is how decoding overlaps across
 * batches (nvJPEG's hardware decode blocks the calling thread until the
 * engines are done). A decode call returns when its decode has finished on
 * the device: the planes are written and nvJPEG no longer reads the JPEG
 * data. A unit keeps the planes of its last two calls: the transform that
 * reads call k's samples must have been queued (or call k abandoned) before
 * the unit's call k + 2 starts. gpu_images_transform is called from one
 * thread at a time.
 *
 * The transform runs on the pipeline's own CUDA stream. Output slots are
 * device buffers owned by the pipeline, each with a "ready" event (its
 * batch is written) and a "consumed" event (its last reader is done): a
 * consumer on another stream calls gpu_images_slot_acquire (its stream waits
 * for ready, no host block) before reading and gpu_images_slot_release after
 * queuing its reads; the next transform into that slot waits for the release
 * on the device. Every CUDA and nvJPEG call is checked; a failure of the
 * device itself prints the call and exits, as the CUDA backend does.
 *
 * nvJPEG's hardware backend writes its output when the call is made, without
 * waiting for work queued before it on the stream (or on streams it was made
 * to wait for): the decode therefore waits on the host for every earlier
 * reader of the plane buffer it writes, and plane buffers of hardware units
 * are never handed out by stream-ordered allocation. */
#ifndef HGRN_GPU_IMAGES_H
#define HGRN_GPU_IMAGES_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "image_params.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct GpuImages GpuImages;

/* nvJPEG backend. AUTO: the hardware engines (NVJPEG_BACKEND_HARDWARE,
 * A100/H100/H200) when nvJPEG can create that backend on this GPU, else the
 * GPU-hybrid one (config key data.jpeg_backend). */
enum { GPU_JPEG_AUTO = 0, GPU_JPEG_HARDWARE = 1, GPU_JPEG_HYBRID = 2 };

typedef struct {
    int max_batch; /* most samples per call */
    int size; /* output S x S */
    int channels; /* C: 3 (RGB) or 1 (gray: the JPEG's Y) */
    int backend; /* GPU_JPEG_* */
    int threads; /* caller threads that call gpu_images_probe: thread ids 0 .. threads-1 */
    int slots; /* output slots, max_batch * C * S * S bytes each */
    int units; /* decode units of the primary backend (0 or 1: one) */
    int hybrid_units; /* extra GPU-hybrid units (used only when the primary backend is the hardware) */
    int layered_ops; /* RandAugment's op layers as kernels of their own, as when the image is too large for the
                        fused kernel's shared memory (tests compare the two) */
} GpuImagesConfig;

/* NULL with a message when there is no GPU, no nvJPEG in this build, or the
 * device cannot be set up. */
GpuImages *gpu_images_create(int device, const GpuImagesConfig *cfg, char *err, size_t errlen);
void gpu_images_destroy(GpuImages *g);

/* 1 when this build has CUDA and nvJPEG and a GPU is visible. */
int gpu_images_available(void);

/* "hardware" or "hybrid": the primary backend. */
const char *gpu_images_backend(const GpuImages *g);

/* 1 when the op layers run as one kernel (k_augment: the image fits the
 * device's shared memory and the config did not ask for layered_ops). */
int gpu_images_fused_ops(const GpuImages *g);

/* Decode units in total, and whether unit u is a GPU-hybrid one. */
int gpu_images_units(const GpuImages *g);
int gpu_images_unit_hybrid(const GpuImages *g, int unit);

/* 1 when the primary units decoded the embedded test image (4:2:0) to
 * exactly libjpeg-turbo's pixels (the hardware engines do: same IDCT
 * results); 0 when they differ in a level anywhere (the GPU-hybrid decoder's
 * IDCT rounds differently). The loader only moves samples between nvJPEG
 * and the CPU decoder for speed when this is 1. */
int gpu_images_exact(const GpuImages *g);

/* The side of the SM split (gpu_partition.h) every stream of the pipeline
 * runs on: GPU_SIDE_INPUT, -1 without a split, -2 if they differ. */
int gpu_images_side(const GpuImages *g);
/* The hardware decoder's engines and cores per engine (0, 0 without). */
void gpu_images_hw_info(const GpuImages *g, int *engines, int *cores);

enum { GPU_SRC_JPEG = 0, GPU_SRC_PIXELS = 1 };
enum { GPU_SAMPLE_OK = 0, GPU_SAMPLE_DECODE_FAILED = 1 };

/* One sample. The geometry is that of the CPU transforms (resize.h): the
 * resampler works on the image (in_x, in_y, in_w, in_h) (full-image pixels;
 * taps clamp at its edges): the RandomResizedCrop box in training
 * (torchvision's crop-then-resize), the whole image in evaluation. It
 * resamples its box (x0, y0, x1, y1, in that image's pixels) to a virtual
 * out_w x out_h image (PIL's Image.resize(size, filter, box)), keeps the
 * window [ox, ox+ow) x [oy, oy+oh) and writes it at (dx, dy) of the S x S
 * output, zero elsewhere (the eval centre crop of an image smaller than S).
 * Only the pixels of the rectangle (rx, ry, rw, rh) are decoded / uploaded:
 * every tap of the window must lie in it (resize_source_rect gives it).
 * Training: in = rect = the crop, box = (0, 0, crop w, crop h), out = window
 * = S x S, d = 0. */
typedef struct {
    int src; /* GPU_SRC_JPEG or GPU_SRC_PIXELS */
    /* GPU_SRC_JPEG: the encoded file (host memory, left untouched until the
     * second gpu_images_decode call after the one that decodes it has
     * returned: nvJPEG's device work may still read it) and its frame header */
    const uint8_t *data;
    size_t len;
    int ncomp; /* 1 (gray) or 3 (YCbCr) */
    int hs[3], vs[3]; /* the components' sampling factors (SOF) */
    /* GPU_SRC_PIXELS: the source rectangle decoded on the CPU, rh rows of
     * rw * C bytes (HWC), stride bytes apart (host memory, as long as data) */
    const uint8_t *px;
    size_t stride;
    /* geometry */
    int img_w, img_h;
    int rx, ry, rw, rh; /* decoded rectangle */
    int in_x, in_y, in_w, in_h; /* the resampler's image */
    double box[4];
    int out_w, out_h;
    int ox, oy, ow, oh;
    int dx, dy;
    int filter; /* 0 bilinear, 1 bicubic (image.h RESAMPLE_*) */
    int flip; /* horizontal flip of the S x S result */
    int nops; /* ops in order, on the S x S image */
    const ImgOp *ops;
    /* random erasing on the S x S result: noise is C x er_h x er_w bytes */
    int erase, er_x, er_y, er_w, er_h;
    const uint8_t *er_noise;
    int status; /* out (gpu_images_decode): GPU_SAMPLE_* */
    /* out (gpu_images_decode): where its planes are (unit, that unit's call
     * number, index in the call); the caller may reorder, drop or combine
     * records of different calls and units before the transform */
    int dec_unit, dec_index;
    long long dec_call;
} GpuSample;

/* Mixup/CutMix over the batch, as the CPU's mixup_apply (mixup.h): pairs
 * (i, n-1-i); Mixup: x = round(lam x + (1 - lam) x') in float; CutMix: the box
 * rows [yl, yh) x cols [xl, xh) swapped. on = 0: no mixing. */
typedef struct {
    int on, cutmix;
    float lam;
    int yl, yh, xl, xh;
} GpuMix;

/* Can nvJPEG's batched decoder (of the chosen backend) take s->data?
 * Thread-safe for distinct thread ids. 1 yes, 0 no (the caller decodes on
 * the CPU). The caller has already checked what libjpeg semantics need (an
 * 8-bit Huffman JPEG, gray or YCbCr with supported sampling factors, an
 * end-of-image marker). */
int gpu_images_probe(GpuImages *g, int thread, const GpuSample *s);

/* Decode the GPU_SRC_JPEG samples among s[0..n) (n <= max_batch) on decode
 * unit `unit`, setting each one's status and plane reference. Returns when
 * the decode is finished (see "Decode units"). 0, or -1 with a message (a
 * failure that is not a file's). gpu_images_decode is unit 0. */
int gpu_images_decode_on(GpuImages *g, int unit, GpuSample *s, int n, char *err, size_t errlen);
int gpu_images_decode(GpuImages *g, GpuSample *s, int n, char *err, size_t errlen);

/* Transform s[0..n) (every GPU_SRC_JPEG sample decoded OK by one of the last
 * two calls of its unit, in any order or combination) into output slot
 * `slot`, sample i at offset i * C * S * S,
 * then mix (mix may be NULL). Queued on the pipeline's stream, after the
 * slot's last release; records the slot's ready event. The host buffers the
 * samples point at may be reused as soon as this returns. 0 or -1 + message. */
int gpu_images_transform(GpuImages *g, const GpuSample *s, int n, const GpuMix *mix, int slot, char *err,
                         size_t errlen);

/* Device address of an output slot. */
uint8_t *gpu_images_slot(GpuImages *g, int slot);
/* Make stream (a cudaStream_t; NULL: the host blocks instead) wait until the
 * slot's batch is written. */
void gpu_images_slot_acquire(GpuImages *g, int slot, void *stream);
/* The reads of the slot queued on stream so far are its last (NULL: the
 * caller has synchronised: nothing to wait for). */
void gpu_images_slot_release(GpuImages *g, int slot, void *stream);
/* Copy the first bytes of a slot to host memory, waiting for its batch. */
void gpu_images_download(GpuImages *g, int slot, uint8_t *host, size_t bytes);

typedef struct {
    long long batches;
    long long decode_calls; /* gpu_images_decode calls that decoded something */
    long long jpeg_decoded; /* samples decoded by nvJPEG */
    long long jpeg_decoded_hybrid; /* ... of which by GPU-hybrid units when the primary backend is the hardware */
    long long decode_failed; /* samples nvJPEG refused or failed on (handed back to the CPU) */
    long long pixels_uploaded; /* samples the CPU decoded (GPU_SRC_PIXELS) */
    double jpeg_bytes; /* encoded bytes given to nvJPEG */
    double jpeg_pixels; /* luma pixels nvJPEG decoded (only each sample's region where it decodes regions) */
    double jpeg_pixels_whole; /* ... had it decoded every image whole */
    double host_decode_s; /* host time in gpu_images_decode, summed over units (nvJPEG's calls, and the
                                 * waits for the plane buffers' previous readers) */
    double host_decode_hybrid_s; /* ... of which in GPU-hybrid units of a split */
    double decode_cpu_s; /* CPU time of the calling threads inside gpu_images_decode (nvJPEG's host work,
                                 * including any spinning while it waits for the device) */
    double host_transform_s; /* host time in gpu_images_transform (packing, uploads, launches) */
    double gpu_decode_ms; /* device time of the decodes (events around them), summed over units */
    double gpu_transform_ms; /* device time of the transforms */
    double consumer_stall_s; /* device time consumer streams waited in slot_acquire for a batch */
} GpuImagesStats;

void gpu_images_stats(GpuImages *g, GpuImagesStats *st);

/* The CUDA stream a backend queues its work on (cudaStream_t as void *), for
 * gpu_images_slot_acquire / release; NULL for the CPU backend. */
void *gpu_backend_stream(Backend *bk);

/* For tests: decode one JPEG with nvJPEG (only the region its rectangle
 * needs where the backend decodes regions) and the pipeline's colour
 * conversion, to C-channel HWC host pixels of its rectangle (rx, ry, rw, rh;
 * the whole image, w and h from the caller's header parse in s, when rw is
 * 0); out: rw * rh * C bytes. 0, or -1 with a message. */
int gpu_images_decode_rgb(GpuImages *g, const GpuSample *s, uint8_t *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
