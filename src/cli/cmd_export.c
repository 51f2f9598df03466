/* cmd_export.c - `hgrn export onnx CKPT OUT.onnx [--input uint8|float]
 * [--opset N]`: runs scripts/export_onnx.py (Debian's python3-onnx builds
 * the graph and checks it), which writes the checkpoint's model as an ONNX
 * graph with the recurrences as Scan operators. cli_run_script finds the
 * script and runs it by /usr/bin/python3 when it exists (python3-onnx
 * installs there), else python3 on the PATH; a python3 without onnx hands
 * the script to the other one. cli_parse refuses unknown options; the
 * script checks the values and the count of arguments (exit 2 before any
 * work). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "run_script.h"

#define USAGE "usage: hgrn export onnx CKPT OUT.onnx [--input uint8|float] [--opset N]"

static void usage(void) {
    printf(USAGE "\n\n"
                 "Writes the checkpoint's whole model as an ONNX graph (opset 17 by default; --opset N up\n"
                 "to the newest the installed onnx knows) that standard runtimes (onnxruntime, ...) run:\n"
                 "images in, \"logits\" [batch, classes] out, the batch a symbolic dimension. Every token\n"
                 "mixer (hgru1, hgru2, lru, mingru, minlstm; causal, the 2-D scan, batch norm) in\n"
                 "evaluation mode; each recurrence is an ONNX Scan over the tokens, not unrolled.\n"
                 "--input uint8 (default): \"images\" uint8 [batch, channels, size, size] at\n"
                 "model.image_size (resize before; it is not part of the graph), normalised inside the\n"
                 "graph with the checkpoint's data.mean / data.std; --input float: float32 images\n"
                 "already normalised. The graph's metadata holds the class names (\"classes\") and the\n"
                 "config. It is checked with onnx.checker (full check) before it is written.\n"
                 "Refused before any work (exit 2): a missing CKPT, an OUT that cannot be written, a\n"
                 "bad option; a checkpoint that cannot be read or exported exits 1. Runs\n"
                 "scripts/export_onnx.py, which needs onnx (Debian: apt-get install python3-onnx).\n");
}

int cmd_export(int argc, char **argv) {
    if (argc > 14) {
        fprintf(stderr, "hgrn export: too many arguments (" USAGE ")\n");
        return 2;
    }
    const char *input = NULL, *opset = NULL;
    const CliOption own[] = {{"input", 1, &input}, {"opset", 1, &opset}};
    Cli cli;
    char err[1024];
    if (cli_parse_own(&cli, argc, argv, "ARGS NOKEYS", own, 2, err, sizeof err) < 0) {
        fprintf(stderr, "hgrn export: %s\n", err);
        return 2;
    }
    /* the script's arguments: the positionals after the format, then the options */
    char *args[20]; /* at most 13 positionals after the format (argc <= 14) and two options */
    int nargs = 0;
    for (int i = 1; i < cli.npos; i++) args[nargs++] = (char *)cli.pos[i];
    const int help = cli.help, npos = cli.npos;
    const char *format = npos > 0 ? cli.pos[0] : NULL;
    cli_free(&cli);
    if (help) {
        usage();
        return 0;
    }
    if (!format || strcmp(format, "onnx")) {
        if (!format)
            fprintf(stderr, "hgrn export: the format is required (" USAGE ")\n");
        else
            fprintf(stderr, "hgrn export: unknown format '%s' (formats: onnx; " USAGE ")\n", format);
        return 2;
    }
    /* the script checks the positionals' count and the values itself */
    if (input) {
        args[nargs++] = "--input";
        args[nargs++] = (char *)input;
    }
    if (opset) {
        args[nargs++] = "--opset";
        args[nargs++] = (char *)opset;
    }
    return cli_run_script("export", "export_onnx.py", args, nargs);
}
