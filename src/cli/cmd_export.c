/* cmd_export.c - `hgrn export onnx CKPT OUT.onnx [--input uint8|float]
 * [--opset N]`: runs scripts/export_onnx.py (Debian's python3-onnx builds
 * the graph and checks it), which writes the checkpoint's model as an ONNX
 * graph with the recurrences as Scan operators. cli_run_script finds the
 * script and runs it by /usr/bin/python3 when it exists (python3-onnx
 * installs there), else python3 on the PATH; a python3 without onnx hands
 * the script to the other one. The script checks the arguments itself
 * (exit 2 before any work). */
#include <stdio.h>
#include <string.h>

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
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage();
            return 0;
        }
    if (argc < 1 || strcmp(argv[0], "onnx")) {
        if (argc < 1) fprintf(stderr, "hgrn export: the format is required (" USAGE ")\n");
        else fprintf(stderr, "hgrn export: unknown format '%s' (formats: onnx; " USAGE ")\n", argv[0]);
        return 2;
    }
    if (argc > 14) {
        fprintf(stderr, "hgrn export: too many arguments (" USAGE ")\n");
        return 2;
    }
    return cli_run_script("export", "export_onnx.py", argv + 1, argc - 1);
}
