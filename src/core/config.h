/* config.h - run configuration: `key = value` lines in [model], [train] and
 * [data] sections (DESIGN.md section 7). Every key can be overridden on the
 * command line as --section.key value. Unknown keys and out-of-range values
 * are errors that name the key. The key table (names, types, ranges,
 * defaults) lives in config.c; this struct is what the rest of the code reads. */
#ifndef HGRN_CONFIG_H
#define HGRN_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#define CFG_STR 256
#define CONFIG_TEXT_MAX 16384 /* enough for config_write of any valid Config */

typedef struct {
    /* [model] */
    char mixer[32]; /* token mixer name, looked up in the model's registry */
    int image_size; /* square input side, pixels */
    int channels; /* 1 (Fashion-MNIST) or 3 */
    int patch_size;
    int dim; /* width d */
    int depth; /* number of blocks L */
    int glu_dim; /* GLU hidden width */
    int num_classes;
    float drop_path; /* max drop-path rate, linearly increased over depth */
    int head_size; /* hgru2 head size e */
    int causal; /* 1: the token mixer sees only the tokens before (forward scan only) */
    int rnn_dim; /* lru: complex states; mingru / minlstm: hidden width (0 = dim) */
    float lru_r_min, lru_r_max; /* lru: |lambda| initialised uniformly on this ring */
    float lru_max_phase; /* lru: arg(lambda) initialised uniformly in [0, this] */
    char norm[8]; /* the blocks' pre-norms (and a token head norm): "layer" or "batch" */
    float bn_momentum; /* batch norm: running statistics' update weight (PyTorch's momentum) */
    char head_norm[8]; /* before the head: "rms" (after the pool), "token" (model.norm before it), "none" */
    int scan2d; /* 1: the token mixer scans the rows and the columns of the token grid, summed */
    char init[12]; /* "deit" (trunc-normal 0.02 weights, zero biases) or "official" (PyTorch's
                             * default Linear init: weights and biases uniform in +-1/sqrt(fan_in)) */

    /* [train] */
    int epochs;
    int batch_size; /* global batch */
    float lr; /* base learning rate, scaled by batch_size / lr_batch_ref */
    int lr_batch_ref; /* 512 as DeiT; 0 = use lr as given */
    float min_lr;
    float warmup_lr;
    float warmup_epochs;
    float weight_decay;
    int decay_lower_bounds; /* 1: weight decay applies to model.lower_bounds too (timm's rule) */
    float beta1, beta2, eps;
    float clip_grad; /* <= 0 disables */
    float label_smoothing;
    char lr_step[8]; /* "step": the schedule per step on the fractional epoch; "epoch": once per
                             * epoch, as timm's scheduler stepped with lr_scheduler.step(epoch) */
    unsigned long long seed;
    int eval_every; /* epochs between evaluations */
    int max_steps; /* stop after this many steps (0 = run all epochs) */
    char ckpt_every[16]; /* the last checkpoint every N steps ("500"), N minutes ("30m") or "0" (epoch ends only) */
    int max_bad_steps; /* non-finite steps in a row (each skipped) that stop the run */
    int threads; /* CPU threads (0 = all cores) */
    int log_every; /* steps between metrics lines */
    int cuda_graph; /* 1: record the step once and replay it (CUDA backend) */
    int gemm_tune; /* 1: time cuBLASLt algorithms per GEMM shape (CUDA backend); 0: reproducible */
    int comm_timeout; /* distributed runs: seconds a collective may wait for the other ranks */
    int tensorboard; /* 1: the metrics records' scalars also as a TensorBoard event file in the run directory */
    int accum_steps; /* gradient accumulation: parts of the global batch per optimizer step */
    float ema_decay; /* model EMA decay (0: off) */
    int ema_warmup; /* 1: the EMA's decay warms up as (1 + u) / (10 + u) */

    /* [data] */
    char dataset[32]; /* "fmnist", "fmnist32", "imagefolder", "cifar10" */
    char path[CFG_STR]; /* dataset root */
    float mean[4], std[4]; /* per-channel normalisation, `mean = 0.485,0.456,0.406` */
    int num_mean, num_std; /* how many values were given */
    int crop_padding; /* Fashion-MNIST/CIFAR: random crop with this much padding */
    char pad_mode[12]; /* that padding: "constant" (zeros), "edge", "reflect", "symmetric" (torchvision's) */
    float hflip; /* horizontal flip probability */
    int train_limit; /* use only the first N training samples (0 = all) */
    int val_limit; /* use only the first N evaluation samples (0 = all) */
    int workers; /* threads that build each batch of images (0 = OpenMP's default: one per core) */
    char decode[8]; /* "cpu", "gpu" or "auto": where JPEGs are decoded and augmented */
    char jpeg_backend[16]; /* "auto", "hardware" or "hybrid": nvJPEG's backend for decode = gpu */
    int jpeg_decoders; /* nvJPEG decode units per loader (0 = auto) */
    float jpeg_hw_load; /* hardware backend: share of a batch for the engines, the rest GPU-hybrid (1 = all) */
    float jpeg_cpu_share; /* share of a batch decoded by libjpeg-turbo instead (-1 = auto, 0 = off) */
    char input_sms[8]; /* SMs of the GPU input pipeline's own partition: "auto", "0" (off) or a count */
    char interpolation[16]; /* "bicubic" or "bilinear" */
    float crop_pct; /* eval: resize to size/crop_pct, centre crop */
    float scale_min; /* RandomResizedCrop lower scale bound */
    char auto_augment[64]; /* e.g. "rand-m9-mstd0.5-inc1", "" = off */
    float color_jitter;
    float reprob; /* random erasing probability */
    float mixup, cutmix, mixup_prob, mixup_switch_prob;
    int repeated_aug; /* RASampler repeats (1 = off) */
    char class_names[CFG_STR]; /* file with one class name per line ("" = dataset's own) */
    char val_labels[CFG_STR]; /* ImageNet's flat val dir: labels file ("" = val/ is an ImageFolder) */
    char shard_read
        [8]; /* tar shards: "random" (pread in the sampler's order) or "stream" (sequential + shuffle buffer) */
    int shuffle_buffer; /* stream: samples in the shuffle buffer */
} Config;

/* Fill every field with its default. */
void config_defaults(Config *c);

/* Parse a config file over the current values (keys not in the file keep
 * theirs). Returns 0, or -1 with a message in err naming the file, line and
 * key; on failure *c is left unchanged. */
int config_load(Config *c, const char *path, char *err, size_t errlen);

/* Same as config_load, from text already in memory; origin names it in errors
 * (used for the config stored in a checkpoint). */
int config_load_text(Config *c, const char *text, const char *origin, char *err, size_t errlen);

/* Set one key by its full name "section.key" (as given on the command line
 * without the leading dashes). Returns 0, or -1 with a message naming the key. */
int config_set(Config *c, const char *full_key, const char *value, char *err, size_t errlen);

/* Cross-field checks (e.g. image_size divisible by patch_size, channels matching
 * the number of mean/std values). Returns 0, or -1 with a message naming the keys. */
int config_validate(const Config *c, char *err, size_t errlen);

/* Write every key as `key = value` lines with sections, parseable by
 * config_load (used to store the model config in checkpoints and runs).
 * Floats are written with the fewest digits that read back to the same
 * float, strings quoted. Returns the text length (NUL not counted), or -1 if
 * buflen is too small (CONFIG_TEXT_MAX always suffices). */
int config_write(const Config *c, char *buf, size_t buflen);

/* Make the files c names (data.path, data.class_names, data.val_labels)
 * absolute against the working directory, in place, so that a config
 * stored in a checkpoint or a run directory works from any directory.
 * Returns 0, or -1 (c unchanged) with a message naming the key. */
int config_absolute_paths(Config *c, char *err, size_t errlen);

/* Serialise only the [model] section (one line per key, same syntax). */
int config_write_model(const Config *c, char *buf, size_t buflen);

/* Parse a train.ckpt_every value: "N" (steps, 0 = off) sets *steps, "Nm" or
 * "Nmin" (minutes, N > 0, may be fractional) sets *minutes; the other is 0.
 * Returns 0, or -1 when the text is neither. */
int config_every(const char *text, long *steps, double *minutes);

/* data.input_sms: -1 for auto, the count (0 = off), or -2 when the text is
 * not one of them. */
int config_input_sms(const char *text);

/* 1 when a run of c may decode its images on the GPU, given the CUDA
 * backend: image files (data.dataset imagefolder, tar shards included) and
 * data.decode gpu or auto. What the SM split and the hardware work queues
 * are set up for, before the loaders decide. */
int config_may_decode_on_gpu(const Config *c);

/* One key whose value differs between two configs: its text (as
 * config_write writes it) in each, and whether it may change when a run is
 * resumed (how long or how the run goes on: epochs, max_steps, intervals,
 * threads, the data's location and decoding; not what a step computes). */
typedef struct {
    char key[64];
    char here[600], saved[600];
    int may_change;
} ConfigDiff;

/* The keys whose values differ between here and saved, in table order:
 * the first max into d; returns how many differ (all of them). */
int config_diff(const Config *here, const Config *saved, ConfigDiff *d, int max);

/* The keys that may change on resume, "section.key," separated, in lines
 * of at most width columns indented by two (for --help). */
void config_print_resume_keys(FILE *f, int width);

/* Every key with its type, default, range or choices and a line of help,
 * by section (for --help). */
void config_print_help(FILE *f);

/* Is this "section.key" a known key? */
int config_has_key(const char *full_key);

/* The known "section.key" nearest to name (a full key or a bare key name, as
 * a user might misspell either) by edit distance, into out: the key within
 * a third of its length (at least one edit) and the section within two
 * edits, or any section for a key spelt right. Returns the distance (key
 * plus section edits), or -1 when none is that near: too far to be a
 * misspelling. */
int config_nearest_key(const char *name, char *out, size_t outlen);

/* Levenshtein distance between a and b (bytes, case-sensitive), for "did you
 * mean" suggestions. */
int edit_distance(const char *a, const char *b);

#endif
