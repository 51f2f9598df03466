/* config.c - the key table and the `key = value` parser/writer. See config.h.
 *
 * Every key is described once in KEYS[] (section, name, type, place in
 * Config, inclusive/exclusive range or choice list, default, help); defaults,
 * parsing, range checks, the writer and --help output all come from it. */
#include "errmsg.h"
#include "config.h"
#include "fsutil.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { T_INT, T_FLOAT, T_U64, T_STR, T_FLIST };

typedef struct {
    const char *section, *name;
    int type;
    size_t off; /* offsetof(Config, field) */
    size_t size; /* T_STR: sizeof the char array; T_FLIST: capacity */
    size_t count_off; /* T_FLIST: offsetof the int holding the count */
    double lo, hi; /* range (numbers; per element for T_FLIST) */
    int lo_open, hi_open;
    const char *choices; /* T_STR: "a|b|c", or NULL for any text */
    const char *def; /* default, as it would be written in a file */
    const char *help;
    /* T_STR: a check of the text beyond its length and choices (NULL: none) */
    int (*check)(const char *full, const char *text, char *msg, size_t ml);
    /* 1: may differ from the run's config.cfg on --resume (config_diff):
     * how long or how the run goes on, not what a step computes */
    int resume;
} Key;

#define FSIZE(f) sizeof(((Config *)0)->f)
#define KI(s, f, lo, hi, def, help) \
    { s, #f, T_INT, offsetof(Config, f), FSIZE(f), 0, lo, hi, 0, 0, NULL, def, help, NULL, 0 }
#define KF(s, f, lo, hi, lo_open, hi_open, def, help) \
    { s, #f, T_FLOAT, offsetof(Config, f), FSIZE(f), 0, lo, hi, lo_open, hi_open, NULL, def, help, NULL, 0 }
#define KU(s, f, def, help) \
    { s, #f, T_U64, offsetof(Config, f), FSIZE(f), 0, 0, 18446744073709551615.0, 0, 0, NULL, def, help, NULL, 0 }
#define KS(s, f, choices, def, help) \
    { s, #f, T_STR, offsetof(Config, f), FSIZE(f), 0, 0, 0, 0, 0, choices, def, help, NULL, 0 }
#define KV(s, f, check, def, help) \
    { s, #f, T_STR, offsetof(Config, f), FSIZE(f), 0, 0, 0, 0, 0, NULL, def, help, check, 0 }
#define KL(s, f, cnt, lo, hi, lo_open, hi_open, def, help)                                                     \
    {                                                                                                          \
        s, #f, T_FLIST, offsetof(Config, f), FSIZE(f) / sizeof(float), offsetof(Config, cnt), lo, hi, lo_open, \
            hi_open, NULL, def, help, NULL, 0                                                                  \
    }

/* The same for keys that may change on --resume (Key.resume). */
#define KI_R(s, f, lo, hi, def, help) \
    { s, #f, T_INT, offsetof(Config, f), FSIZE(f), 0, lo, hi, 0, 0, NULL, def, help, NULL, 1 }
#define KF_R(s, f, lo, hi, lo_open, hi_open, def, help) \
    { s, #f, T_FLOAT, offsetof(Config, f), FSIZE(f), 0, lo, hi, lo_open, hi_open, NULL, def, help, NULL, 1 }
#define KS_R(s, f, choices, def, help) \
    { s, #f, T_STR, offsetof(Config, f), FSIZE(f), 0, 0, 0, 0, 0, choices, def, help, NULL, 1 }
#define KV_R(s, f, check, def, help) \
    { s, #f, T_STR, offsetof(Config, f), FSIZE(f), 0, 0, 0, 0, 0, NULL, def, help, check, 1 }

static int check_every(const char *full, const char *text, char *msg, size_t ml);
static int check_input_sms(const char *full, const char *text, char *msg, size_t ml);

static const Key KEYS[] = {
    /* [model] */
    KS("model", mixer, NULL, "hgru1",
       "token mixer, by name: hgru1 (HGRN1, complex element-wise), hgru2 (HGRN2, "
       "state expansion), lru (linear recurrent unit), mingru, minlstm; `hgrn info --mixers` lists them (the "
       "older key model.arch = hgrn1|hgrn2 is read too)"),
    KI("model", image_size, 1, 8192, "224", "square input side in pixels"),
    KI("model", channels, 1, 4, "3", "input channels (1 grayscale, 3 RGB)"),
    KI("model", patch_size, 1, 8192, "14", "patch side in pixels; image_size must be a multiple"),
    KI("model", dim, 1, 65536, "192", "model width d"),
    KI("model", depth, 1, 1024, "12", "number of blocks L"),
    KI("model", glu_dim, 1, 1048576, "384", "GLU hidden width"),
    KI("model", num_classes, 1, 1000000, "1000", "number of output classes"),
    KF("model", drop_path, 0, 1, 0, 1, "0.1", "max drop-path rate, linear over depth"),
    KI("model", head_size, 1, 65536, "16", "head size e of the hgru2 mixer (dim must be a multiple)"),
    KI("model", causal, 0, 1, "0",
       "1: each token sees only itself and the tokens before it (the forward scan "
       "alone; mixers lru, mingru, minlstm); 0: bidirectional (the forward and reverse scans summed)"),
    KI("model", rnn_dim, 0, 65536, "0",
       "state width of the lru (complex states), mingru and minlstm (hidden "
       "width) mixers; 0 = model.dim"),
    KF("model", lru_r_min, 0, 1, 1, 1, "0.9",
       "lru: |lambda| is initialised uniformly on the ring "
       "[lru_r_min, lru_r_max] of the complex plane"),
    KF("model", lru_r_max, 0, 1, 1, 1, "0.999", "lru: the ring's outer radius (see lru_r_min)"),
    KF("model", lru_max_phase, 0, 6.2831855, 0, 0, "0.31415927",
       "lru: arg(lambda) is initialised uniformly "
       "in [0, lru_max_phase] (pi/10, the LRU paper's choice for long sequences; 2 pi: the whole ring)"),
    KS("model", norm, "layer|batch", "layer",
       "the blocks' pre-norms (and model.head_norm = token): layer (LayerNorm "
       "over the channels of each token) or batch (BatchNorm over the batch and the tokens, per channel, with "
       "running statistics for evaluation, as the LRA codebases' norm = batch)"),
    KF("model", bn_momentum, 0, 1, 1, 0, "0.1",
       "model.norm = batch: weight of each training batch's statistics in "
       "the running ones used for evaluation (PyTorch's BatchNorm momentum)"),
    KS("model", head_norm, "rms|token|none", "rms",
       "before the linear head: rms (mean over the tokens, then "
       "SimpleRMSNorm: the HGRN vision code), token (model.norm on every token, then the mean: the final norm of the "
       "LRA codebases' pre-norm SequenceModel), none (the mean straight into the head)"),
    KI("model", scan2d, 0, 1, "0",
       "1: the token mixer scans every row and every column of the grid of tokens "
       "(image_size / patch_size on a side) and sums them, both ways each (forward only with model.causal), with "
       "one input projection and one output stage (the HGRN authors' 2-D scan of the LRA image task); 0: one "
       "scan over the tokens in row-major order"),
    KS("model", init, "deit|official", "deit",
       "parameter initialisation: deit (timm's DeiT: Linear weights "
       "normal with std 0.02, biases 0) or official (what the HGRN vision code gets, which initialises nothing "
       "itself: PyTorch's default Linear init, weights and biases uniform in +-1/sqrt(fan_in)); norms 1 / 0, "
       "lower bounds 1 and the token mixer's own tensors (HGRU1's angles, LRU) are the same under both"),

    /* [train] */
    KI_R("train", epochs, 1, 1000000, "300", "training epochs"),
    KI("train", batch_size, 1, 16777216, "1024", "global batch size (of one optimizer step)"),
    KI_R("train", accum_steps, 1, 65536, "1",
         "gradient accumulation: each optimizer step sums the gradients of "
         "this many parts of the global batch, run one after another (batch_size / accum_steps / ranks images at "
         "a time: the activation memory of a smaller batch); the same update within fp32 rounding"),
    KF("train", lr, 0, 10, 0, 0, "0.0005", "base learning rate, scaled by batch_size / lr_batch_ref"),
    KI("train", lr_batch_ref, 0, 16777216, "512", "reference batch for lr scaling (0 = use lr as given)"),
    KF("train", min_lr, 0, 10, 0, 0, "1e-05", "final learning rate of the cosine schedule"),
    KF("train", warmup_lr, 0, 10, 0, 0, "1e-06", "learning rate at the start of warm-up"),
    KF("train", warmup_epochs, 0, 1000000, 0, 0, "5", "linear warm-up length in epochs (may be fractional)"),
    KF("train", weight_decay, 0, 10, 0, 0, "0.05",
       "AdamW decoupled weight decay (not on norms, biases, and lower "
       "bounds unless train.decay_lower_bounds)"),
    KI("train", decay_lower_bounds, 0, 1, "0",
       "1: weight decay applies to model.lower_bounds ([depth, d]) too, as "
       "timm 0.4.12's optimizer groups in the official HGRN code (they exempt only 1-D tensors and biases); 0: "
       "the lower bounds are not decayed"),
    KF("train", beta1, 0, 1, 0, 1, "0.9", "AdamW beta1"),
    KF("train", beta2, 0, 1, 0, 1, "0.999", "AdamW beta2"),
    KF("train", eps, 0, 1, 1, 0, "1e-08", "AdamW epsilon"),
    KF("train", clip_grad, 0, 1e6, 0, 0, "5", "global gradient-norm clip (0 = off)"),
    KF("train", label_smoothing, 0, 1, 0, 1, "0.1", "label smoothing"),
    KF("train", ema_decay, 0, 1, 0, 1, "0",
       "model EMA (timm's ModelEmaV2): after every optimizer step ema = d * ema "
       "+ (1 - d) * weights with d = this (e.g. 0.9998); evaluated beside the raw weights, best_ema.safetensors; "
       "0 = off"),
    KI("train", ema_warmup, 0, 1, "0",
       "1: the EMA's decay after u updates is min(train.ema_decay, (1 + u) / (10 + "
       "u)), so early averages follow the weights"),
    KS("train", lr_step, "step|epoch", "step",
       "when the learning rate changes: step (every step, warm-up then "
       "cosine from the end of warm-up, on the fractional epoch) or epoch (once per epoch, the official HGRN / DeiT "
       "code's timm 0.4.12 CosineLRScheduler stepped with lr_scheduler.step(epoch) after each epoch: epoch 0 and 1 "
       "at warmup_lr, epoch k at the scheduler's value for k - 1, whose cosine spans all epochs with warm-up "
       "overriding its start)"),
    KU("train", seed, "0", "random seed (same seed, same run)"),
    KI_R("train", eval_every, 1, 1000000, "1", "epochs between evaluations"),
    KI_R("train", max_steps, 0, INT_MAX, "0",
         "end training after this many optimizer steps, evaluating there (0 = run all epochs)"),
    KV_R("train", ckpt_every, check_every, "30m",
         "write the last checkpoint pair every N steps (`500`) or every N "
         "minutes (`30m`), besides each epoch end; `0` = at epoch ends only"),
    KI_R("train", max_bad_steps, 1, 1000000, "5",
         "a step whose loss or gradient is NaN/Inf is skipped (weights "
         "untouched) with a warning; this many in a row stop the run"),
    KI_R("train", threads, 0, 4096, "0", "CPU threads (0 = all cores)"),
    KI_R("train", log_every, 1, INT_MAX, "50", "steps between metrics lines"),
    KI_R("train", cuda_graph, 0, 1, "1",
         "record the training step as a CUDA graph and replay it (GPU; 0 = launch every op)"),
    KI_R("train", gemm_tune, 0, 1, "1",
         "GPU GEMMs: time cuBLASLt's candidate algorithms per shape and keep the fastest "
         "(the pick can differ between runs, and so can the last bits); 0 = the heuristic's first, bitwise "
         "reproducible across runs"),
    KI_R("train", comm_timeout, 1, 604800, "300",
         "distributed runs: seconds a collective (or the start-up rendezvous) may "
         "wait for the other ranks; past it every rank stops with a message naming the rank and the cause"),
    KI_R("train", tensorboard, 0, 1, "0",
         "1: also write every metrics.jsonl record's scalars (train/loss, train/lr, ..., "
         "eval/val_top1, ...) to a TensorBoard event file in the run directory, events.out.tfevents.<time>.<host>, a "
         "new "
         "one per start"),

    /* [data] */
    KS("data", dataset, "fmnist|fmnist32|imagefolder|cifar10", "imagefolder",
       "dataset format (fmnist32: "
       "Fashion-MNIST centred on 32x32 zeros, the LRA image task's shape)"),
    KS_R("data", path, NULL, "", "dataset root directory (--data on the command line)"),
    KL("data", mean, num_mean, -1000, 1000, 0, 0, "0.485,0.456,0.406",
       "per-channel normalisation mean, one value per channel"),
    KL("data", std, num_std, 0, 1000, 1, 0, "0.229,0.224,0.225",
       "per-channel normalisation std, one value per channel"),
    KI("data", crop_padding, 0, 4096, "0", "random crop with this much padding (small-image datasets)"),
    KS("data", pad_mode, "constant|edge|reflect|symmetric", "constant",
       "the random crop's padding, as "
       "torchvision's RandomCrop padding_mode: constant (zeros), edge, reflect, symmetric (the LRA codebases' CIFAR "
       "augmentation)"),
    KF("data", hflip, 0, 1, 0, 0, "0.5", "horizontal flip probability"),
    KI("data", train_limit, 0, INT_MAX, "0", "use only the first N training samples (0 = all)"),
    KI("data", val_limit, 0, INT_MAX, "0", "use only the first N evaluation samples (0 = all)"),
    KI_R("data", workers, 0, 1024, "0", "threads that build each batch of images (0 = one per core)"),
    KS_R("data", decode, "cpu|gpu|auto", "auto",
         "JPEG decoding and augmentation: cpu (libjpeg-turbo and the CPU transforms), gpu (nvJPEG and CUDA "
         "kernels; needs the CUDA backend and an hgrn built with nvJPEG), auto (where both are there: cpu for "
         "images of 64 x 64 px or less, else the faster of the two timed on the first batches, gpu when 1.2x "
         "faster)"),
    KS_R("data", jpeg_backend, "auto|hardware|hybrid", "auto",
         "nvJPEG backend for data.decode = gpu: hardware (the GPU's JPEG engines: A100, H100, H200), hybrid "
         "(CUDA cores, every GPU), auto (hardware where nvJPEG can create it, else hybrid)"),
    KI_R("data", jpeg_decoders, 0, 8, "0",
         "data.decode = gpu: nvJPEG decode units per loader, each with its own host thread, decoding different "
         "batches at once (0 = auto: 2, the fastest measured on an H100 with 16 cores)"),
    KF_R("data", jpeg_hw_load, 0.05, 1, 0, 0, "1",
         "data.decode = gpu on the hardware backend: share of each batch's JPEGs for the JPEG engines; the rest go "
         "to nvJPEG's GPU-hybrid decoder at the same time (its IDCT rounds differently: pixels differ by a level "
         "or two from the engines' and libjpeg's); 1 = engines only"),
    KV_R("data", input_sms, check_input_sms, "0",
         "data.decode = gpu: SMs the input pipeline (nvJPEG's CUDA steps, the transform kernels) gets to itself "
         "through CUDA green contexts, the training step the rest: a multiple of 8 (Hopper's partition "
         "granularity), 0 = off (all streams share every SM), auto = hgrn train times the step beside the "
         "input pipeline with and without the device's smallest partition and keeps the faster (hgrn bench: the "
         "smallest partition)"),
    KF_R("data", jpeg_cpu_share, -1, 0.95, 0, 0, "0",
         "data.decode = gpu: share of each batch's JPEGs decoded by libjpeg-turbo on the loader's threads instead "
         "of nvJPEG, to add the CPU's throughput; -1 = auto (adapted to the measured balance, only where nvJPEG "
         "decodes exactly as libjpeg, i.e. on the hardware engines: the batches do not change), 0 = off "
         "(the default: where the loader's threads already keep the cores busy, decoding there slows it down)"),
    KS("data", interpolation, "bicubic|bilinear", "bicubic", "resize interpolation"),
    KF("data", crop_pct, 0, 1, 1, 0, "0.875", "eval: resize to image_size / crop_pct, centre crop"),
    KF("data", scale_min, 0, 1, 1, 0, "0.08", "RandomResizedCrop lower area bound"),
    KS("data", auto_augment, NULL, "rand-m9-mstd0.5-inc1", "RandAugment policy (\"\" = off)"),
    KF("data", color_jitter, 0, 10, 0, 0, "0.4", "colour jitter strength (0 = off)"),
    KF("data", reprob, 0, 1, 0, 0, "0.25", "random erasing probability"),
    KF("data", mixup, 0, 100, 0, 0, "0.8", "Mixup alpha (0 = off)"),
    KF("data", cutmix, 0, 100, 0, 0, "1", "CutMix alpha (0 = off)"),
    KF("data", mixup_prob, 0, 1, 0, 0, "1", "probability of applying Mixup/CutMix to a batch"),
    KF("data", mixup_switch_prob, 0, 1, 0, 0, "0.5", "probability of CutMix instead of Mixup when both are on"),
    KI("data", repeated_aug, 1, 64, "3", "repeated augmentation count (1 = off)"),
    KS("data", class_names, NULL, "", "file with one class name per line (\"\" = the dataset's own)"),
    KS("data", val_labels, NULL, "",
       "labels file for ImageNet's flat validation directory (\"\" = val/ is an ImageFolder)"),
    KS("data", shard_read, "random|stream", "random",
       "tar shards (hgrn prepare shards): random = each record read "
       "through the index in the sampler's order (local disks, the page cache); stream = shards in a shuffled order, "
       "each read front to back through a shuffle buffer (network storage; another sample order)"),
    KI("data", shuffle_buffer, 1, 10000000, "10000", "data.shard_read = stream: samples in the shuffle buffer"),
};
#define NKEYS (int)(sizeof KEYS / sizeof KEYS[0])

static const char *const SECTIONS[] = {"model", "train", "data"};
#define NSECTIONS 3


static const Key *find_key(const char *section, const char *name) {
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].section, section) == 0 && strcmp(KEYS[i].name, name) == 0) return &KEYS[i];
    return NULL;
}

/* The one key called name in any section, or NULL (none, or ambiguous). */
static const Key *find_key_any_section(const char *name) {
    const Key *hit = NULL;
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) {
            if (hit) return NULL;
            hit = &KEYS[i];
        }
    return hit;
}

static int is_section(const char *s) {
    for (int i = 0; i < NSECTIONS; i++)
        if (strcmp(SECTIONS[i], s) == 0) return 1;
    return 0;
}

/* "[lo, hi]" / "(lo, hi]" ... for messages. */
static void fmt_range(const Key *k, char *o, size_t on) {
    if (k->type == T_INT)
        snprintf(o, on, "%c%lld, %lld%c", k->lo_open ? '(' : '[', (long long)k->lo, (long long)k->hi,
                 k->hi_open ? ')' : ']');
    else if (k->type == T_U64)
        snprintf(o, on, "[0, %llu]", (unsigned long long)ULLONG_MAX);
    else
        snprintf(o, on, "%c%g, %g%c", k->lo_open ? '(' : '[', k->lo, k->hi, k->hi_open ? ')' : ']');
}

static int in_range(const Key *k, double v) {
    if (k->lo_open ? !(v > k->lo) : !(v >= k->lo)) return 0;
    if (k->hi_open ? !(v < k->hi) : !(v <= k->hi)) return 0;
    return 1;
}

static int is_blank(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'; }

/* Trim in place: returns the first non-blank char, and cuts trailing blanks. */
static char *trim(char *s) {
    while (is_blank(*s)) s++;
    size_t n = strlen(s);
    while (n > 0 && is_blank(s[n - 1])) s[--n] = 0;
    return s;
}

/* Show a user's value in a message: at most 60 bytes. */
#define VALFMT "%.60s%s"
#define VALARG(v) (v), (strlen(v) > 60 ? "..." : "")

/* Parse a float with the checks shared by T_FLOAT and T_FLIST elements. */
static int parse_float(const Key *k, const char *full, const char *text, double *out, char *msg, size_t ml) {
    char rng[64];
    fmt_range(k, rng, sizeof rng);
    if (!*text) {
        set_err(msg, ml, "%s = '' is not a number (empty value)", full);
        return -1;
    }
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end) {
        set_err(msg, ml, "%s = '" VALFMT "' is not a number", full, VALARG(text));
        return -1;
    }
    if (isnan(v)) {
        set_err(msg, ml, "%s = '" VALFMT "' is not a number", full, VALARG(text));
        return -1;
    }
    if (isinf(v) || (errno == ERANGE && fabs(v) > 1) || fabs(v) > FLT_MAX) {
        set_err(msg, ml, "%s = " VALFMT " is out of range %s", full, VALARG(text), rng);
        return -1;
    }
    /* ERANGE with a tiny value (underflow) is taken as the rounded value. */
    if (!in_range(k, v) || !in_range(k, (double)(float)v)) {
        set_err(msg, ml, "%s = " VALFMT " is out of range %s", full, VALARG(text), rng);
        return -1;
    }
    *out = v;
    return 0;
}

/* Set key k from text (already trimmed; unquoted for strings). msg gets a
 * message without a file:line prefix. */
static int set_value(Config *c, const Key *k, const char *text, char *msg, size_t ml) {
    char full[64], rng[64];
    snprintf(full, sizeof full, "%s.%s", k->section, k->name);
    fmt_range(k, rng, sizeof rng);
    char *field = (char *)c + k->off;

    switch (k->type) {
    case T_INT: {
        if (!*text) {
            set_err(msg, ml, "%s = '' is not an integer (empty value)", full);
            return -1;
        }
        errno = 0;
        char *end;
        long long v = strtoll(text, &end, 10);
        if (end == text || *end || is_blank(*text)) {
            set_err(msg, ml, "%s = '" VALFMT "' is not an integer", full, VALARG(text));
            return -1;
        }
        if (errno == ERANGE || !in_range(k, (double)v)) {
            set_err(msg, ml, "%s = " VALFMT " is out of range %s", full, VALARG(text), rng);
            return -1;
        }
        *(int *)(void *)field = (int)v;
        return 0;
    }
    case T_U64: {
        if (!*text) {
            set_err(msg, ml, "%s = '' is not an integer (empty value)", full);
            return -1;
        }
        const char *q = text;
        if (*q == '+') q++;
        if (*q < '0' || *q > '9') {
            set_err(msg, ml, "%s = '" VALFMT "' is not a non-negative integer", full, VALARG(text));
            return -1;
        }
        errno = 0;
        char *end;
        unsigned long long v = strtoull(q, &end, 10);
        if (*end) {
            set_err(msg, ml, "%s = '" VALFMT "' is not a non-negative integer", full, VALARG(text));
            return -1;
        }
        if (errno == ERANGE) {
            set_err(msg, ml, "%s = " VALFMT " is out of range %s", full, VALARG(text), rng);
            return -1;
        }
        *(unsigned long long *)(void *)field = v;
        return 0;
    }
    case T_FLOAT: {
        double v;
        if (parse_float(k, full, text, &v, msg, ml)) return -1;
        *(float *)(void *)field = (float)v;
        return 0;
    }
    case T_STR: {
        size_t n = strlen(text);
        if (n >= k->size) {
            set_err(msg, ml, "%s: value is %zu bytes long, at most %zu allowed", full, n, k->size - 1);
            return -1;
        }
        if (k->choices) {
            size_t tl = strlen(text);
            int ok = 0;
            for (const char *p = k->choices; *p;) {
                const char *bar = strchr(p, '|');
                size_t l = bar ? (size_t)(bar - p) : strlen(p);
                if (l == tl && memcmp(p, text, l) == 0) ok = 1;
                p += l + (bar ? 1 : 0);
            }
            if (!ok) {
                char ch[128];
                size_t j = 0;
                for (const char *p = k->choices; *p && j + 3 < sizeof ch; p++) {
                    if (*p == '|') {
                        ch[j++] = ',';
                        ch[j++] = ' ';
                    } else
                        ch[j++] = *p;
                }
                ch[j] = 0;
                set_err(msg, ml, "%s = '" VALFMT "' is not one of: %s", full, VALARG(text), ch);
                return -1;
            }
        }
        if (k->check && k->check(full, text, msg, ml) != 0) return -1;
        memcpy(field, text, n + 1);
        return 0;
    }
    case T_FLIST: {
        float vals[16];
        int nv = 0;
        char buf[512];
        if (strlen(text) >= sizeof buf) {
            set_err(msg, ml, "%s: value is too long", full);
            return -1;
        }
        strcpy(buf, text);
        char *p = buf;
        for (;;) {
            char *comma = strchr(p, ',');
            if (comma) *comma = 0;
            char *item = trim(p);
            if (nv == (int)k->size) {
                set_err(msg, ml, "%s = '" VALFMT "' has more than %d values", full, VALARG(text), (int)k->size);
                return -1;
            }
            double v;
            char m2[256];
            if (parse_float(k, full, item, &v, m2, sizeof m2)) {
                if (strchr(text, ','))
                    set_err(msg, ml, "%s (in '" VALFMT "')", m2, VALARG(text));
                else
                    set_err(msg, ml, "%s", m2);
                return -1;
            }
            vals[nv++] = (float)v;
            if (!comma) break;
            p = comma + 1;
        }
        memcpy(field, vals, (size_t)nv * sizeof(float));
        for (size_t i = (size_t)nv; i < k->size; i++) ((float *)(void *)field)[i] = 0.0f;
        *(int *)(void *)((char *)c + k->count_off) = nv;
        return 0;
    }
    }
    return -1;
}

int config_every(const char *text, long *steps, double *minutes) {
    *steps = 0;
    *minutes = 0;
    if (!text || !*text) return -1;
    char *end;
    errno = 0;
    if (strchr(text, 'm')) {
        double v = strtod(text, &end);
        if (end == text || errno || !(v > 0) || v > 1e7 || (strcmp(end, "m") && strcmp(end, "min"))) return -1;
        *minutes = v;
        return 0;
    }
    if (*text < '0' || *text > '9') return -1;
    long long v = strtoll(text, &end, 10);
    if (*end || errno || v < 0 || v > INT_MAX) return -1;
    *steps = (long)v;
    return 0;
}

static int check_every(const char *full, const char *text, char *msg, size_t ml) {
    long steps;
    double minutes;
    if (config_every(text, &steps, &minutes) == 0) return 0;
    set_err(msg, ml, "%s = '" VALFMT "': expected a number of steps (500), of minutes (30m) or 0 (epoch ends only)",
            full, VALARG(text));
    return -1;
}

int config_input_sms(const char *text) {
    if (strcmp(text, "auto") == 0) return -1;
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (!text[0] || *end || errno || v < 0 || v > 4096 || v % 8) return -2;
    return (int)v;
}

int config_may_decode_on_gpu(const Config *c) {
    return strcmp(c->decode, "cpu") != 0 && strcmp(c->dataset, "imagefolder") == 0;
}

static int check_input_sms(const char *full, const char *text, char *msg, size_t ml) {
    if (config_input_sms(text) >= -1) return 0;
    set_err(msg, ml, "%s = '" VALFMT "': expected auto, 0 (off) or a number of SMs that is a multiple of 8", full,
            VALARG(text));
    return -1;
}

void config_defaults(Config *c) {
    memset(c, 0, sizeof *c);
    for (int i = 0; i < NKEYS; i++) {
        char msg[256];
        if (set_value(c, &KEYS[i], KEYS[i].def, msg, sizeof msg) != 0) {
            fprintf(stderr, "config.c: bad default: %s\n", msg);
            abort();
        }
    }
}

/* Suggestion for an unknown "section.name": the key of that name in another
 * section, else the nearest key by spelling. */
static void unknown_key_msg(const char *section, const char *name, char *msg, size_t ml) {
    const Key *other = find_key_any_section(name);
    char full[160], near[96];
    snprintf(full, sizeof full, "%s%s%s", section ? section : "", section ? "." : "", name);
    if (!other && config_nearest_key(full, near, sizeof near) >= 0)
        set_err(msg, ml, "unknown key '%.100s' (did you mean '%s'?)", full, near);
    else if (other && section)
        set_err(msg, ml, "unknown key '%.40s.%.60s' (did you mean '%s.%s'?)", section, name, other->section,
                other->name);
    else if (other)
        set_err(msg, ml, "unknown key '%.60s' (did you mean '%s.%s'?)", name, other->section, other->name);
    else if (section)
        set_err(msg, ml, "unknown key '%.40s.%.60s'", section, name);
    else
        set_err(msg, ml, "unknown key '%.60s' (keys are written section.key, e.g. train.lr)", name);
}

/* model.arch = hgrn1 | hgrn2, the key before token mixers had names of their
 * own, still read from older configs and checkpoints: it becomes model.mixer
 * = hgru1 | hgru2. Returns 1 and the rewritten key and value, 0 for other keys,
 * -1 with a message for an arch that has no mixer. */
static int legacy_key(const char *section, const char *name, const char *value, const char **key, const char **mixer,
                      char *msg, size_t ml) {
    if (strcmp(section, "model") != 0 || strcmp(name, "arch") != 0) return 0;
    *key = "mixer";
    if (strcmp(value, "hgrn1") == 0)
        *mixer = "hgru1";
    else if (strcmp(value, "hgrn2") == 0)
        *mixer = "hgru2";
    else {
        set_err(msg, ml,
                "model.arch = \"%.60s\" is not one of hgrn1, hgrn2 (the token mixer is chosen by "
                "model.mixer now)",
                value);
        return -1;
    }
    return 1;
}

int config_set(Config *c, const char *full_key, const char *value, char *err, size_t errlen) {
    if (!full_key || !value) {
        set_err(err, errlen, "config_set: missing key or value");
        return -1;
    }
    const char *dot = strchr(full_key, '.');
    const Key *k = NULL;
    char section[64];
    if (dot && (size_t)(dot - full_key) < sizeof section) {
        memcpy(section, full_key, (size_t)(dot - full_key));
        section[dot - full_key] = 0;
        const char *name = dot + 1;
        int legacy = legacy_key(section, name, value, &name, &value, err, errlen);
        if (legacy < 0) return -1;
        k = find_key(section, name);
        if (!k) {
            if (!is_section(section))
                set_err(err, errlen, "unknown key '%.100s' (no section [%.40s]; sections are model, train, data)",
                        full_key, section);
            else
                unknown_key_msg(section, dot + 1, err, errlen);
            return -1;
        }
    } else {
        unknown_key_msg(NULL, full_key, err, errlen);
        return -1;
    }
    /* Parse into a copy so that a failure leaves c untouched. */
    Config tmp = *c;
    if (set_value(&tmp, k, value, err, errlen) != 0) return -1;
    *c = tmp;
    return 0;
}

int config_has_key(const char *full_key) {
    if (!full_key) return 0;
    const char *dot = strchr(full_key, '.');
    if (!dot) return 0;
    char section[64];
    if ((size_t)(dot - full_key) >= sizeof section) return 0;
    memcpy(section, full_key, (size_t)(dot - full_key));
    section[dot - full_key] = 0;
    return find_key(section, dot + 1) != NULL || (!strcmp(section, "model") && !strcmp(dot + 1, "arch"));
}

int edit_distance(const char *a, const char *b) {
    const size_t la = strlen(a), lb = strlen(b);
    if (la > 255 || lb > 255) return (int)(la > lb ? la : lb);
    int row[256];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            const int up = row[j];
            int best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

int config_nearest_key(const char *name, char *out, size_t outlen) {
    /* "section.key" is compared section to section and key to key: the key
     * within a third of its length (at least one edit), the section within
     * two edits, or any section when the key is spelt right */
    const char *dot = strchr(name, '.');
    char section[64] = "";
    const char *key = name;
    if (dot) {
        snprintf(section, sizeof section, "%.*s", (int)(dot - name) < 63 ? (int)(dot - name) : 63, name);
        key = dot + 1;
    }
    int limit = ((int)strlen(key) + 2) / 3;
    if (limit < 1) limit = 1;
    int best = -1;
    for (int i = 0; i < NKEYS; i++) {
        const int dk = edit_distance(key, KEYS[i].name), ds = dot ? edit_distance(section, KEYS[i].section) : 0;
        const int d = dk + ds;
        if (dk <= limit && (ds <= 2 || dk == 0) && (best < 0 || d < best)) {
            best = d;
            if (out && outlen) snprintf(out, outlen, "%s.%s", KEYS[i].section, KEYS[i].name);
        }
    }
    return best;
}

/* Split a value into text: strip an inline comment ('#' or ';' at the start
 * or after a blank), and unquote a "quoted string" (escapes \" \\ \n \t \r).
 * Works in place; returns the value or NULL with msg. */
static char *file_value(char *v, int *quoted, char *msg, size_t ml, const char *full) {
    *quoted = 0;
    v = trim(v);
    if (*v == '"') {
        char *o = v, *p = v + 1;
        for (;;) {
            if (!*p) {
                set_err(msg, ml, "%s: unterminated quoted string", full);
                return NULL;
            }
            if (*p == '"') break;
            if (*p == '\\') {
                p++;
                switch (*p) {
                case '"': *o++ = '"'; break;
                case '\\': *o++ = '\\'; break;
                case 'n': *o++ = '\n'; break;
                case 't': *o++ = '\t'; break;
                case 'r': *o++ = '\r'; break;
                default:
                    set_err(msg, ml, "%s: unknown escape '\\%c' in quoted string (use \\\\ for a backslash)", full,
                            *p ? *p : '?');
                    return NULL;
                }
                p++;
                continue;
            }
            *o++ = *p++;
        }
        char *rest = p + 1;
        *o = 0;
        while (is_blank(*rest)) rest++;
        if (*rest && *rest != '#' && *rest != ';') {
            set_err(msg, ml, "%s: unexpected text after the closing quote", full);
            return NULL;
        }
        *quoted = 1;
        return v;
    }
    for (char *p = v; *p; p++)
        if ((*p == '#' || *p == ';') && (p == v || is_blank(p[-1]))) {
            *p = 0;
            break;
        }
    return trim(v);
}

/* The parser behind config_load and config_load_text: text of len bytes. */
static int load_text(Config *c, const char *text, size_t len, const char *origin, char *err, size_t errlen) {
    Config tmp = *c;
    int seen[NKEYS];
    memset(seen, 0, sizeof seen);
    char section[64] = "";
    int have_section = 0;
    int lineno = 0;
    size_t pos = 0;
    char *line = NULL;
    size_t linecap = 0;
    int rc = 0;
    char msg[512];

    if (len >= 3 && (unsigned char)text[0] == 0xEF && (unsigned char)text[1] == 0xBB && (unsigned char)text[2] == 0xBF)
        pos = 3; /* UTF-8 byte order mark */

    while (pos < len && rc == 0) {
        lineno++;
        const char *start = text + pos;
        const char *nl = memchr(start, '\n', len - pos);
        size_t ll = nl ? (size_t)(nl - start) : len - pos;
        if (memchr(start, 0, ll)) {
            set_err(err, errlen, "%s:%d: NUL byte in line (not a text file?)", origin, lineno);
            rc = -1;
            break;
        }
        if (ll + 1 > linecap) {
            size_t nc = ll + 1 < 256 ? 256 : ll + 1;
            char *nb = realloc(line, nc);
            if (!nb) {
                set_err(err, errlen, "%s:%d: out of memory", origin, lineno);
                rc = -1;
                break;
            }
            line = nb;
            linecap = nc;
        }
        memcpy(line, start, ll);
        line[ll] = 0;
        pos += ll + (nl ? 1 : 0);
        msg[0] = 0;

        char *s = trim(line);
        if (!*s || *s == '#' || *s == ';') continue;

        if (*s == '[') {
            char *close = strchr(s, ']');
            if (!close) {
                set_err(err, errlen, "%s:%d: malformed section header '%.60s' (missing ']')", origin, lineno, s);
                rc = -1;
                break;
            }
            char *after = close + 1;
            while (is_blank(*after)) after++;
            if (*after && *after != '#' && *after != ';') {
                set_err(err, errlen, "%s:%d: unexpected text after section header '%.60s'", origin, lineno, s);
                rc = -1;
                break;
            }
            *close = 0;
            char *name = trim(s + 1);
            if (!is_section(name)) {
                set_err(err, errlen, "%s:%d: unknown section [%.60s] (sections are model, train, data)", origin, lineno,
                        name);
                rc = -1;
                break;
            }
            snprintf(section, sizeof section, "%s", name);
            have_section = 1;
            continue;
        }

        char *eq = strchr(s, '=');
        if (!eq) {
            set_err(err, errlen, "%s:%d: expected 'key = value', got '%.60s'", origin, lineno, s);
            rc = -1;
            break;
        }
        *eq = 0;
        char *key = trim(s);
        if (!*key) {
            set_err(err, errlen, "%s:%d: missing key before '='", origin, lineno);
            rc = -1;
            break;
        }
        if (!have_section) {
            const Key *other = find_key_any_section(key);
            if (other)
                set_err(err, errlen, "%s:%d: key '%.60s' is outside any section (it belongs under [%s])", origin,
                        lineno, key, other->section);
            else
                set_err(err, errlen, "%s:%d: key '%.60s' is outside any section (and unknown)", origin, lineno, key);
            rc = -1;
            break;
        }
        const Key *k = find_key(section, key);
        const int legacy_arch = !k && !strcmp(section, "model") && !strcmp(key, "arch");
        if (legacy_arch) k = find_key("model", "mixer");
        if (!k) {
            unknown_key_msg(section, key, msg, sizeof msg);
            set_err(err, errlen, "%s:%d: %s", origin, lineno, msg);
            rc = -1;
            break;
        }
        int ki = (int)(k - KEYS);
        char full[64];
        snprintf(full, sizeof full, "%s.%s", k->section, k->name);
        if (seen[ki]) {
            set_err(err, errlen, "%s:%d: %s is set twice (first on line %d)", origin, lineno, full, seen[ki]);
            rc = -1;
            break;
        }
        seen[ki] = lineno;
        int quoted;
        char *val = file_value(eq + 1, &quoted, msg, sizeof msg, full);
        if (!val) {
            set_err(err, errlen, "%s:%d: %s", origin, lineno, msg);
            rc = -1;
            break;
        }
        if (quoted && k->type != T_STR) {
            set_err(err, errlen, "%s:%d: %s = \"" VALFMT "\": a number must not be quoted", origin, lineno, full,
                    VALARG(val));
            rc = -1;
            break;
        }
        const char *name = key, *value = val;
        if (legacy_arch && legacy_key(section, key, val, &name, &value, msg, sizeof msg) < 0) {
            set_err(err, errlen, "%s:%d: %s", origin, lineno, msg);
            rc = -1;
            break;
        }
        if (set_value(&tmp, k, value, msg, sizeof msg) != 0) {
            set_err(err, errlen, "%s:%d: %s", origin, lineno, msg);
            rc = -1;
            break;
        }
    }
    free(line);
    if (rc == 0) *c = tmp;
    return rc;
}

/* A file named in a config file (data.class_names, data.val_labels) is
 * looked up next to that config file first, so configs work from any
 * directory; a name that is not there keeps its meaning relative to the
 * working directory. */
static void resolve_beside(char *field, size_t cap, const char *before, const char *cfg_path) {
    if (!field[0] || field[0] == '/' || !strcmp(field, before)) return;
    const char *slash = strrchr(cfg_path, '/');
    if (!slash) return;
    char cand[CFG_STR * 2];
    snprintf(cand, sizeof cand, "%.*s/%s", (int)(slash - cfg_path), cfg_path, field);
    if (file_exists(cand) && strlen(cand) < cap) strcpy(field, cand);
}

int config_load(Config *c, const char *path, char *err, size_t errlen) {
    void *buf;
    size_t len;
    if (read_file(path, &buf, &len, err, errlen) != 0) return -1;
    char names_before[CFG_STR], labels_before[CFG_STR];
    strcpy(names_before, c->class_names);
    strcpy(labels_before, c->val_labels);
    int rc = load_text(c, buf, len, path, err, errlen);
    free(buf);
    if (rc == 0) {
        resolve_beside(c->class_names, sizeof c->class_names, names_before, path);
        resolve_beside(c->val_labels, sizeof c->val_labels, labels_before, path);
    }
    return rc;
}

int config_absolute_paths(Config *c, char *err, size_t errlen) {
    Config tmp = *c;
    static const char *const keys[3] = {"data.path", "data.class_names", "data.val_labels"};
    char *fields[3] = {tmp.path, tmp.class_names, tmp.val_labels};
    for (int i = 0; i < 3; i++) {
        char abs[4096], why[512];
        if (!fields[i][0] || fields[i][0] == '/') continue;
        if (absolute_path(fields[i], abs, sizeof abs, why, sizeof why) < 0) {
            set_err(err, errlen, "%s: %s", keys[i], why);
            return -1;
        }
        if (strlen(abs) >= CFG_STR) {
            set_err(err, errlen, "%s: the absolute path %.300s is longer than a config value may be (%d bytes)",
                    keys[i], abs, CFG_STR - 1);
            return -1;
        }
        strcpy(fields[i], abs);
    }
    *c = tmp;
    return 0;
}

int config_load_text(Config *c, const char *text, const char *origin, char *err, size_t errlen) {
    if (!text) {
        set_err(err, errlen, "%s: no config text", origin ? origin : "(config)");
        return -1;
    }
    return load_text(c, text, strlen(text), origin ? origin : "(config)", err, errlen);
}

/* Check one field's current value against its table entry. */
static int check_field(const Config *c, const Key *k, char *err, size_t errlen) {
    char full[64], rng[64];
    snprintf(full, sizeof full, "%s.%s", k->section, k->name);
    fmt_range(k, rng, sizeof rng);
    const char *field = (const char *)c + k->off;
    switch (k->type) {
    case T_INT: {
        int v = *(const int *)(const void *)field;
        if (!in_range(k, v)) {
            set_err(err, errlen, "%s = %d is out of range %s", full, v, rng);
            return -1;
        }
        return 0;
    }
    case T_U64: return 0;
    case T_FLOAT: {
        float v = *(const float *)(const void *)field;
        if (!isfinite(v) || !in_range(k, v)) {
            set_err(err, errlen, "%s = %g is out of range %s", full, (double)v, rng);
            return -1;
        }
        return 0;
    }
    case T_STR: {
        if (!memchr(field, 0, k->size)) {
            set_err(err, errlen, "%s: value is not terminated", full);
            return -1;
        }
        Config scratch;
        char msg[256];
        if ((k->choices || k->check) && set_value(&scratch, k, field, msg, sizeof msg) != 0) {
            set_err(err, errlen, "%s", msg);
            return -1;
        }
        return 0;
    }
    case T_FLIST: {
        int n = *(const int *)(const void *)((const char *)c + k->count_off);
        if (n < 1 || n > (int)k->size) {
            set_err(err, errlen, "%s has %d values, expected 1 to %d", full, n, (int)k->size);
            return -1;
        }
        for (int i = 0; i < n; i++) {
            float v = ((const float *)(const void *)field)[i];
            if (!isfinite(v) || !in_range(k, v)) {
                set_err(err, errlen, "%s value %d = %g is out of range %s", full, i + 1, (double)v, rng);
                return -1;
            }
        }
        return 0;
    }
    }
    return 0;
}

int config_validate(const Config *c, char *err, size_t errlen) {
    for (int i = 0; i < NKEYS; i++)
        if (check_field(c, &KEYS[i], err, errlen) != 0) return -1;
    if (c->image_size % c->patch_size != 0) {
        set_err(err, errlen, "model.image_size = %d is not a multiple of model.patch_size = %d", c->image_size,
                c->patch_size);
        return -1;
    }
    if (c->num_mean != c->channels) {
        set_err(err, errlen, "data.mean has %d value%s but model.channels = %d", c->num_mean,
                c->num_mean == 1 ? "" : "s", c->channels);
        return -1;
    }
    if (c->num_std != c->channels) {
        set_err(err, errlen, "data.std has %d value%s but model.channels = %d", c->num_std, c->num_std == 1 ? "" : "s",
                c->channels);
        return -1;
    }
    if (c->lru_r_min > c->lru_r_max) {
        set_err(err, errlen, "model.lru_r_min = %g is larger than model.lru_r_max = %g", (double)c->lru_r_min,
                (double)c->lru_r_max);
        return -1;
    }
    if (c->min_lr > c->lr) {
        set_err(err, errlen, "train.min_lr = %g is larger than train.lr = %g", (double)c->min_lr, (double)c->lr);
        return -1;
    }
    if (c->batch_size % c->accum_steps != 0) {
        set_err(err, errlen, "train.batch_size = %d is not a multiple of train.accum_steps = %d", c->batch_size,
                c->accum_steps);
        return -1;
    }
    if (c->warmup_epochs > (float)c->epochs) {
        set_err(err, errlen, "train.warmup_epochs = %g is longer than train.epochs = %d", (double)c->warmup_epochs,
                c->epochs);
        return -1;
    }
    return 0;
}

/* ----------------------------------------------------------------- writer */

typedef struct {
    char *buf;
    size_t cap, n;
    int over;
} Out;

static void out_printf(Out *o, const char *fmt, ...) {
    if (o->over) return;
    va_list ap;
    va_start(ap, fmt);
    int r = vsnprintf(o->buf + o->n, o->cap - o->n, fmt, ap);
    va_end(ap);
    if (r < 0 || (size_t)r >= o->cap - o->n) {
        o->over = 1;
        return;
    }
    o->n += (size_t)r;
}

/* Shortest %g text that reads back as the same float. */
static void fmt_float(char *o, size_t on, float v) {
    for (int prec = 1; prec <= 9; prec++) {
        snprintf(o, on, "%.*g", prec, (double)v);
        if (strtof(o, NULL) == v) return;
    }
    snprintf(o, on, "%.9g", (double)v);
}

static void write_value(Out *o, const Config *c, const Key *k) {
    const char *field = (const char *)c + k->off;
    char num[64];
    switch (k->type) {
    case T_INT: out_printf(o, "%d", *(const int *)(const void *)field); break;
    case T_U64: out_printf(o, "%llu", *(const unsigned long long *)(const void *)field); break;
    case T_FLOAT:
        fmt_float(num, sizeof num, *(const float *)(const void *)field);
        out_printf(o, "%s", num);
        break;
    case T_FLIST: {
        int n = *(const int *)(const void *)((const char *)c + k->count_off);
        if (n > (int)k->size) n = (int)k->size;
        for (int i = 0; i < n; i++) {
            fmt_float(num, sizeof num, ((const float *)(const void *)field)[i]);
            out_printf(o, "%s%s", i ? "," : "", num);
        }
        break;
    }
    case T_STR: {
        out_printf(o, "\"");
        size_t n = strnlen(field, k->size);
        for (size_t i = 0; i < n; i++) {
            char ch = field[i];
            if (ch == '"')
                out_printf(o, "\\\"");
            else if (ch == '\\')
                out_printf(o, "\\\\");
            else if (ch == '\n')
                out_printf(o, "\\n");
            else if (ch == '\t')
                out_printf(o, "\\t");
            else if (ch == '\r')
                out_printf(o, "\\r");
            else
                out_printf(o, "%c", ch);
        }
        out_printf(o, "\"");
        break;
    }
    }
}

static int write_sections(const Config *c, char *buf, size_t buflen, const char *only) {
    if (!buf || buflen == 0) return -1;
    Out o = {buf, buflen, 0, 0};
    buf[0] = 0;
    for (int s = 0; s < NSECTIONS; s++) {
        if (only && strcmp(only, SECTIONS[s]) != 0) continue;
        out_printf(&o, "%s[%s]\n", o.n ? "\n" : "", SECTIONS[s]);
        for (int i = 0; i < NKEYS; i++) {
            if (strcmp(KEYS[i].section, SECTIONS[s]) != 0) continue;
            out_printf(&o, "%s = ", KEYS[i].name);
            write_value(&o, c, &KEYS[i]);
            out_printf(&o, "\n");
        }
    }
    if (o.over) {
        buf[0] = 0;
        return -1;
    }
    return (int)o.n;
}

int config_write(const Config *c, char *buf, size_t buflen) { return write_sections(c, buf, buflen, NULL); }

int config_write_model(const Config *c, char *buf, size_t buflen) { return write_sections(c, buf, buflen, "model"); }

void config_print_help(FILE *f) {
    static const char *const types[] = {"INT", "FLOAT", "U64", "STR", "FLOATS"};
    fprintf(f, "Configuration keys: `key = value` under [section] in a --config file, or\n"
               "--section.key VALUE on the command line (applied after the file).\n");
    for (int s = 0; s < NSECTIONS; s++) {
        fprintf(f, "\n[%s]\n", SECTIONS[s]);
        for (int i = 0; i < NKEYS; i++) {
            const Key *k = &KEYS[i];
            if (strcmp(k->section, SECTIONS[s]) != 0) continue;
            char opt[96], rng[80];
            snprintf(opt, sizeof opt, "--%s.%s %s", k->section, k->name, k->choices ? "STR" : types[k->type]);
            if (k->type == T_STR)
                snprintf(rng, sizeof rng, "%s", k->choices ? k->choices : "");
            else if (k->type == T_U64)
                rng[0] = 0;
            else
                fmt_range(k, rng, sizeof rng);
            fprintf(f, "  %-34s %s (default %s%s%s%s%s)\n", opt, k->help, k->type == T_STR ? "\"" : "", k->def,
                    k->type == T_STR ? "\"" : "", rng[0] ? (k->choices ? "; one of " : "; range ") : "", rng);
        }
    }
}

/* ------------------------------------------------------ resume comparison */

int config_diff(const Config *here, const Config *saved, ConfigDiff *d, int max) {
    int n = 0;
    for (int i = 0; i < NKEYS; i++) {
        char a[sizeof d->here], b[sizeof d->saved];
        Out oa = {a, sizeof a, 0, 0}, ob = {b, sizeof b, 0, 0};
        a[0] = b[0] = 0;
        write_value(&oa, here, &KEYS[i]);
        write_value(&ob, saved, &KEYS[i]);
        if (!oa.over && !ob.over && !strcmp(a, b)) continue;
        if (n < max) {
            snprintf(d[n].key, sizeof d[n].key, "%s.%s", KEYS[i].section, KEYS[i].name);
            snprintf(d[n].here, sizeof d[n].here, "%s", a);
            snprintf(d[n].saved, sizeof d[n].saved, "%s", b);
            d[n].may_change = KEYS[i].resume;
        }
        n++;
    }
    return n;
}

void config_print_resume_keys(FILE *f, int width) {
    int col = 0, first = 1;
    for (int i = 0; i < NKEYS; i++) {
        if (!KEYS[i].resume) continue;
        if (!first) col += fprintf(f, ",");
        const int len = (int)(strlen(KEYS[i].section) + strlen(KEYS[i].name) + 2);
        if (col > 0 && col + len > width) {
            fprintf(f, "\n");
            col = 0;
        }
        col += fprintf(f, "%s%s.%s", col ? " " : "  ", KEYS[i].section, KEYS[i].name);
        first = 0;
    }
    if (col) fprintf(f, "\n");
}
