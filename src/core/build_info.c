/* build_info.c - what this binary is; see build_info.h. CMake defines the
 * version, build type and backends for this file alone, and writes the git
 * commit into hgrn_git_commit.h at every build (cmake/git_commit.cmake). */
#include "build_info.h"
#include "hgrn_git_commit.h"

#if !defined(HGRN_VERSION) || !defined(HGRN_BUILD_TYPE) || !defined(HGRN_BUILT_CUDA)
#error "build_info.c is compiled with the definitions CMakeLists.txt gives it"
#endif

static const BuildInfo INFO = {HGRN_VERSION,     HGRN_GIT_COMMIT,   HGRN_BUILD_TYPE, HGRN_BUILT_CUDA,
                               HGRN_BUILT_CUDNN, HGRN_BUILT_NVJPEG, HGRN_BUILT_NCCL, HGRN_BUILT_MPI};

const BuildInfo *build_info(void) { return &INFO; }

static const char *yes(int v) { return v ? "yes" : "no"; }

void build_info_print(FILE *f) {
    fprintf(f, "hgrn %s\ncommit      %s\nbuild type  %s\nbackends    CUDA %s, cuDNN %s, nvJPEG %s, NCCL %s, MPI %s\n",
            INFO.version, INFO.commit, INFO.build_type, yes(INFO.cuda), yes(INFO.cudnn), yes(INFO.nvjpeg),
            yes(INFO.nccl), yes(INFO.mpi));
}

static const char *tf(int v) { return v ? "true" : "false"; }

void build_info_json(char *buf, size_t len) {
    snprintf(buf, len,
             "\"version\": \"%s\", \"commit\": \"%s\", \"build_type\": \"%s\", \"backends\": {\"cuda\": %s, "
             "\"cudnn\": %s, \"nvjpeg\": %s, \"nccl\": %s, \"mpi\": %s}",
             INFO.version, INFO.commit, INFO.build_type, tf(INFO.cuda), tf(INFO.cudnn), tf(INFO.nvjpeg), tf(INFO.nccl),
             tf(INFO.mpi));
}

void build_info_backends(char *buf, size_t len) {
    snprintf(buf, len, "cuda=%s cudnn=%s nvjpeg=%s nccl=%s mpi=%s", yes(INFO.cuda), yes(INFO.cudnn), yes(INFO.nvjpeg),
             yes(INFO.nccl), yes(INFO.mpi));
}
