/* cmd_classify.c - `hgrn classify`: top-5 class names with probabilities for
 * image files, through the evaluation transform the model was validated with. */
#include "checkpoint.h"
#include "cli.h"
#include "evaluate.h"
#include "image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_classify(int argc, char **argv) {
    char err[1024];
    Cli cli;
    if (cli_parse(&cli, argc, argv, "ckpt device precision threads", err, sizeof err) < 0) {
        fprintf(stderr, "hgrn classify: %s\n", err);
        return 2;
    }
    if (cli.help) {
        printf("usage: hgrn classify --ckpt FILE IMAGE [IMAGE ...] [--device cpu|cuda]\n\n"
               "Prints the five most probable classes of each image (JPEG or PNG) with their\n"
               "probabilities, using the class names stored in the checkpoint.\n");
        cli_free(&cli);
        return 0;
    }
    if (!cli.ckpt[0] || cli.npos == 0) {
        fprintf(stderr, "hgrn classify: usage: hgrn classify --ckpt FILE IMAGE [IMAGE ...]\n");
        cli_free(&cli);
        return 2;
    }
    int rc = 1, n = cli.npos;
    Backend *bk = NULL;
    Model *m = NULL;
    char **classes = NULL;
    int ncls = 0;
    uint8_t *px = NULL;
    float *probs = NULL;
    Config *c = &cli.cfg;
    if (ckpt_read_config(cli.ckpt, c, &classes, &ncls, err, sizeof err) < 0) goto fail;
    if (cli_apply_overrides(&cli, err, sizeof err) < 0) goto fail;
    int S = c->image_size, C = c->channels, K = c->num_classes;
    size_t per = (size_t)C * S * S;
    px = malloc(per * (size_t)n);
    probs = malloc(sizeof(float) * (size_t)K * (size_t)n);
    if (!px || !probs) { snprintf(err, sizeof err, "out of host memory"); goto fail; }
    /* decode everything first: a bad file is reported before any work is done */
    int filter = strcmp(c->interpolation, "bilinear") ? RESAMPLE_BICUBIC : RESAMPLE_BILINEAR;
    for (int i = 0; i < n; i++) {
        Image im;
        if (image_load(cli.pos[i], C, &im, err, sizeof err) < 0) goto fail;
        int r = image_eval_transform(&im, S, c->crop_pct, filter, px + per * (size_t)i);
        image_free(&im);
        if (r < 0) { snprintf(err, sizeof err, "%s: cannot resize to %dx%d", cli.pos[i], S, S); goto fail; }
    }
    if (!(bk = cli_backend(&cli, 0, err, sizeof err))) goto fail;
    int B = n < 64 ? n : 64;
    if (!(m = model_create(bk, c, B, 0, err, sizeof err))) goto fail;
    if (ckpt_load_weights(cli.ckpt, m, NULL, err, sizeof err) < 0) goto fail;
    for (int i0 = 0; i0 < n; i0 += B) {
        int b = n - i0 < B ? n - i0 : B;
        model_forward(m, px + per * (size_t)i0, b, 0, NULL);
        model_loss(m, NULL, b, NULL);
        model_probs(m, probs + (size_t)K * i0, b);
    }
    for (int i = 0; i < n; i++) {
        int idx[5], k = K < 5 ? K : 5;
        top_k(probs + (size_t)K * i, K, k, idx);
        printf("%s:\n", cli.pos[i]);
        for (int j = 0; j < k; j++)
            printf("  %6.2f%%  %s\n", 100.0 * probs[(size_t)K * i + idx[j]],
                   idx[j] < ncls ? classes[idx[j]] : "?");
    }
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "hgrn classify: %s\n", err);
done:
    free(px);
    free(probs);
    model_destroy(m);
    if (bk) bk->destroy(bk);
    free_class_names(classes, ncls);
    cli_free(&cli);
    return rc;
}
