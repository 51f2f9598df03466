/* cmd_forward.c - `hgrn forward`: one batch given as a safetensors file
 * through a checkpoint's model, writing logits, probabilities, per-sample
 * losses and (--grads) the gradient of the mean loss for every parameter.
 * It is how other implementations are checked against this one
 * (scripts/pytorch/parity.py): the same weights and inputs, tensor by
 * tensor. No drop path, no augmentation: the images go in as given. */
#include "checkpoint.h"
#include "cli.h"
#include "fsutil.h"
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void) {
    printf("usage: hgrn forward --ckpt FILE --inputs IN.safetensors --out OUT.safetensors [--grads]\n"
           "                    [--device cpu|cuda] [--precision bf16|fp32] [--section.key V]\n\n"
           "Runs one batch through the checkpoint's model (no drop path) and writes OUT with\n"
           "\"logits\" and \"probs\" (F32 [B, classes]), \"loss\" (F32 [B], the cross-entropy of each\n"
           "image against its target) and, with --grads, \"grad.NAME\" for every parameter: the\n"
           "gradient of the batch's mean loss, named and shaped as the checkpoint's tensors.\n"
           "IN holds \"images\" (U8 [B, channels, size, size], the model's input after any\n"
           "resizing: normalised by data.mean / data.std inside the model) and either\n"
           "\"targets\" (F32 [B, classes], each row a distribution) or \"labels\" (I64 [B]); with\n"
           "neither, every target is uniform. For comparing implementations\n"
           "(scripts/pytorch/parity.py).\n");
}

static int shape_is(const StTensor *t, int ndim, const int64_t *want) {
    if (t->ndim != ndim) return 0;
    for (int d = 0; d < ndim; d++)
        if (t->shape[d] != want[d]) return 0;
    return 1;
}

int cmd_forward(int argc, char **argv) {
    char err[1024];
    Cli cli;
    const int started = cli_start(&cli, argc, argv, "ckpt inputs out grads device precision threads", "forward", usage);
    if (started >= 0) return started;
    if (!cli.ckpt[0] || !cli.inputs[0] || !cli.out[0]) {
        fprintf(stderr, "hgrn forward: --ckpt, --inputs and --out are required (see --help)\n");
        cli_free(&cli);
        return 2;
    }
    /* paths that cannot be used are refused before any work */
    int refused = 0;
    if (!file_exists(cli.ckpt))
        refused = snprintf(err, sizeof err, "--ckpt %s: no such file", cli.ckpt);
    else if (!file_exists(cli.inputs))
        refused = snprintf(err, sizeof err, "--inputs %s: no such file", cli.inputs);
    else
        refused = cli_check_output_file("--out", cli.out, err, sizeof err) < 0;
    if (refused) {
        fprintf(stderr, "hgrn forward: %s\n", err);
        cli_free(&cli);
        return 2;
    }
    int rc = 1, ncls = 0;
    char **classes = NULL;
    SafeTensors *in = NULL;
    Backend *bk = NULL;
    Model *m = NULL;
    uint8_t *images = NULL;
    float *targets = NULL, *logits = NULL, *probs = NULL, *loss = NULL, *grads = NULL;
    StTensor *out = NULL;
    char(*names)[160] = NULL;
    Config *c = &cli.cfg;
    if (ckpt_read_config(cli.ckpt, c, &classes, &ncls, err, sizeof err) < 0) goto fail;
    if (cli_apply_overrides(&cli, err, sizeof err) < 0) {
        rc = 2; /* a bad --section.key value: nothing done yet */
        goto fail;
    }
    if (!(in = st_open(cli.inputs, err, sizeof err))) goto fail;
    const int S = c->image_size, C = c->channels, K = c->num_classes;
    const StTensor *ti = st_find(in, "images");
    if (!ti || strcmp(ti->dtype, "U8") || ti->ndim != 4 || ti->shape[0] < 1 || ti->shape[0] > 1 << 20) {
        snprintf(err, sizeof err, "%s: needs a tensor \"images\", U8 [B, %d, %d, %d]", cli.inputs, C, S, S);
        goto fail;
    }
    const int B = (int)ti->shape[0];
    const int64_t img_shape[4] = {B, C, S, S}, tg_shape[2] = {B, K}, lb_shape[1] = {B};
    if (!shape_is(ti, 4, img_shape)) {
        snprintf(err, sizeof err, "%s: \"images\" is [%lld, %lld, %lld, %lld], the model takes [%d, %d, %d, %d]",
                 cli.inputs, (long long)ti->shape[0], (long long)ti->shape[1], (long long)ti->shape[2],
                 (long long)ti->shape[3], B, C, S, S);
        goto fail;
    }
    images = malloc(ti->nbytes);
    logits = malloc(sizeof(float) * (size_t)B * K);
    probs = malloc(sizeof(float) * (size_t)B * K);
    loss = malloc(sizeof(float) * (size_t)B);
    if (!images || !logits || !probs || !loss) {
        snprintf(err, sizeof err, "out of host memory");
        goto fail;
    }
    memcpy(images, ti->data, ti->nbytes);
    const StTensor *tt = st_find(in, "targets"), *tl = st_find(in, "labels");
    if (tt) {
        if (strcmp(tt->dtype, "F32") || !shape_is(tt, 2, tg_shape)) {
            snprintf(err, sizeof err, "%s: \"targets\" must be F32 [%d, %d]", cli.inputs, B, K);
            goto fail;
        }
        if (!(targets = malloc(tt->nbytes))) {
            snprintf(err, sizeof err, "out of host memory");
            goto fail;
        }
        memcpy(targets, tt->data, tt->nbytes);
    } else if (tl) {
        if (strcmp(tl->dtype, "I64") || !shape_is(tl, 1, lb_shape)) {
            snprintf(err, sizeof err, "%s: \"labels\" must be I64 [%d]", cli.inputs, B);
            goto fail;
        }
        if (!(targets = calloc((size_t)B * K, sizeof(float)))) {
            snprintf(err, sizeof err, "out of host memory");
            goto fail;
        }
        for (int b = 0; b < B; b++) {
            int64_t y;
            memcpy(&y, (const char *)tl->data + 8 * (size_t)b, 8);
            if (y < 0 || y >= K) {
                snprintf(err, sizeof err, "%s: labels[%d] = %lld is out of range [0, %d)", cli.inputs, b, (long long)y,
                         K);
                goto fail;
            }
            targets[(size_t)b * K + y] = 1.0f;
        }
    }
    if (!(bk = cli_backend(&cli, 0, err, sizeof err))) goto fail;
    if (!(m = model_create(bk, c, B, cli.grads, err, sizeof err))) goto fail;
    if (ckpt_load_weights(cli.ckpt, m, NULL, err, sizeof err) < 0) goto fail;
    if (cli.grads) model_zero_grads(m);
    model_forward(m, images, B, 0, NULL);
    model_loss(m, targets, B, loss);
    model_probs(m, probs, B);
    model_logits(m, logits, B);
    const int nt = model_num_tensors(m);
    out = calloc((size_t)(3 + (cli.grads ? nt : 0)), sizeof *out);
    names = calloc((size_t)(nt > 0 ? nt : 1), sizeof *names);
    if (!out || !names) {
        snprintf(err, sizeof err, "out of host memory");
        goto fail;
    }
    const StTensor outs[3] = {
        {"logits", "F32", 2, {B, K}, logits, sizeof(float) * (size_t)B * K},
        {"probs", "F32", 2, {B, K}, probs, sizeof(float) * (size_t)B * K},
        {"loss", "F32", 1, {B}, loss, sizeof(float) * (size_t)B},
    };
    memcpy(out, outs, sizeof outs);
    int n = 3;
    if (cli.grads) {
        model_backward(m, B);
        const size_t np = model_num_params(m);
        if (!(grads = malloc(sizeof(float) * np))) {
            snprintf(err, sizeof err, "out of host memory");
            goto fail;
        }
        bk->to_host(bk, grads, model_grads(m), sizeof(float) * np);
        for (int i = 0; i < nt; i++) {
            const ParamInfo *pi = model_tensor(m, i);
            snprintf(names[i], sizeof names[i], "grad.%s", pi->name);
            StTensor *t = &out[n++];
            t->name = names[i];
            t->dtype = "F32";
            t->ndim = pi->ndim;
            for (int d = 0; d < pi->ndim; d++) t->shape[d] = pi->shape[d];
            t->data = grads + pi->offset;
            t->nbytes = pi->numel * sizeof(float);
        }
    }
    char device[64];
    snprintf(device, sizeof device, "%s %s", bk->name, bk->act_elem == 2 ? "bf16" : "fp32");
    const char *keys[3] = {"format", "checkpoint", "device"};
    const char *vals[3] = {"hgrn-forward-1", cli.ckpt, device};
    if (st_write(cli.out, out, n, keys, vals, 3, err, sizeof err) < 0) goto fail;
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hgrn forward: %s\n", err);
done:
    free(names);
    free(out);
    free(grads);
    free(images);
    free(targets);
    free(logits);
    free(probs);
    free(loss);
    model_destroy(m);
    if (bk) bk->destroy(bk);
    st_close(in);
    free_class_names(classes, ncls);
    cli_free(&cli);
    return rc;
}
