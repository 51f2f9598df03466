/* feed.h - batches from a loader into the model's staged input slot, the
 * same way whether the loader decodes on the CPU or on the GPU:
 *   host batches (the CPU pipeline) are uploaded asynchronously into the
 *     model's next input slot (model_stage_images), overlapping the step
 *     queued before;
 *   GPU-decoded batches (data.decode = gpu) make the backend's stream wait
 *     for the batch on the device and are copied there into the slot
 *     (model_stage_device_images): no host round trip, and a recorded step
 *     (CUDA graph) still reads its own slot.
 * Use: feed_next stages a batch; queue the step that reads it; feed_staged_read
 * once it is queued (the host batch's ring slot may then be reused); then
 * feed_next for the following batch, and so on. */
#ifndef HGRN_FEED_H
#define HGRN_FEED_H

#include "backend.h"
#include "config.h"
#include "loader.h"
#include "model.h"
#include "step.h"

typedef struct {
    Loader *loader;
    Model *model;
    void *stream; /* the backend's CUDA stream when the loader decodes on the GPU, else NULL */
    int gpu;
    int part; /* samples staged at a time: 0 the whole batch, else parts of it (feed_set_part) */
    double auto_shared_img_s, auto_split_img_s; /* feed_partition_auto's rates (0: not measured) */
} Feed;

/* Call loader_use_gpu on the loader before (and before loader_start_prefetch). */
void feed_init(Feed *f, Loader *loader, Model *model, Backend *bk);
/* The next batch, staged into the model; loader_next's return values. */
int feed_next(Feed *f, const Batch **batch);
/* Gradient accumulation: stage batches in parts of n samples; feed_next
 * stages part 0 of each batch, feed_stage_part part k of the current one
 * (once the step reading the previous part is queued). */
void feed_set_part(Feed *f, int n);
void feed_stage_part(Feed *f, const Batch *batch, int k);
/* The step reading the staged batch has been queued: the host ring slot of a
 * CPU-decoded batch may be reused once its upload has landed (this waits for
 * that); nothing to do for a GPU-decoded one (the loader releases it when
 * the next batch is asked for, after the work queued on the stream). */
void feed_staged_read(Feed *f);

/* data.input_sms (gpu_partition.h): before the loaders' loader_use_gpu,
 * split the GPU's SMs between the input pipeline and the backend's stream.
 * Only on the CUDA backend with data.decode gpu or auto. auto: with
 * defer_auto (hgrn train) nothing yet, feed_partition_auto measures later;
 * without (hgrn bench, which times the step on the training side of a
 * split) the device's smallest partition. Where green contexts are unavailable it says
 * so in one line and the run goes on unsplit. 0, or -1 with a message (a
 * count this GPU cannot split off). */
int feed_partition_begin(const Config *c, Backend *bk, int device, int defer_auto, char *err, size_t errlen);
/* After loader_use_gpu: with no loader decoding on the GPU, the split has
 * nothing to serve and the backend gets the whole device back. */
void feed_partition_end(Backend *bk, int any_gpu_loader);

/* data.input_sms = auto in hgrn train (feed_partition_begin deferred it):
 * once the model, the Stepper and the loaders exist (their loader_use_gpu
 * done, no prefetching yet, no graph recorded), time the step's device work
 * without its update (step_probe) beside the GPU input pipeline over a few
 * batches, sharing every SM and with the device's smallest partition for
 * the input, keep the faster (the split only when FEED_AUTO_MARGIN times
 * faster: the split costs the step SMs, and a near tie is noise) and say so
 * in one line with both rates. The weights, the optimizer and the loader's
 * position are as before; the batches it handed out are built again.
 * other: the evaluation loader (its GPU pipeline moves with the split), or
 * NULL. Without GPU decoding, or data.input_sms not auto, does nothing. 0,
 * or -1 with err. */
#define FEED_AUTO_MARGIN 1.02
int feed_partition_auto(Feed *f, Stepper *st, Loader *other, int device, char *err, size_t errlen);
/* feed_partition_auto's choice from its two rates (img/s): 1 = the split. */
int feed_auto_keeps_split(double shared_img_s, double split_img_s);

#endif
