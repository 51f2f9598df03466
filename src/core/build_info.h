/* build_info.h - what this binary is: the version (CMake's project
 * version), the git commit it was built from, the build type and the
 * backends compiled in. `hgrn --version` prints it; each metrics.jsonl start
 * record and every checkpoint's metadata carry it. */
#ifndef HGRN_BUILD_INFO_H
#define HGRN_BUILD_INFO_H

#include <stddef.h>
#include <stdio.h>

typedef struct {
    const char *version; /* "MAJOR.MINOR.PATCH" */
    const char *commit; /* 12 hex digits, "-dirty" when tracked files had changes; "unknown" outside git */
    const char *build_type; /* CMAKE_BUILD_TYPE: Release, Debug, ... */
    int cuda, cudnn, nvjpeg, nccl, mpi; /* compiled in: 1, else 0 */
} BuildInfo;

const BuildInfo *build_info(void);

/* The lines of `hgrn --version`. */
void build_info_print(FILE *f);

/* The facts as JSON object members (no braces): "version": ..., "commit":
 * ..., "build_type": ..., "backends": {"cuda": false, ...}. */
void build_info_json(char *buf, size_t len);

/* The backends as "cuda=no cudnn=no nvjpeg=no nccl=no mpi=yes" (checkpoint
 * metadata). */
void build_info_backends(char *buf, size_t len);

#endif
