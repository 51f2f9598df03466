#!/usr/bin/env bash
# prof_kernels.sh - Nsight Compute on the scan kernels: occupancy, issue
# activity, DRAM throughput and the main warp stall reasons, one launch each.
#
#   dev/prof_kernels.sh HGRN [log-dir]
#
# HGRN is a built hgrn binary (with CUDA); the kernels run under its
# `hgrn bench --ops`. Profiles the HGRU1 scan (bf16, B 256, N 256, D 192) and
# the HGRU2 scan (bf16, B 256, N 256, D 384, e 16), forward and backward.
# Other jobs: PROF_JOBS="name|kernel-regex|launches-to-skip;..." (replaces the
# list). Skips count the kernel's launches in `hgrn bench --ops` before the
# one profiled: a forward runs 1 + 3 + 3 x 20 times (once for the statistics,
# warm-up, timed batches), a backward 3 + 3 x 20, fp32 rows first (the HGRU1
# scan at three shapes, the HGRU2 scan at two), so 198 (forward) and 194
# (backward) land in the first timed batch of the bf16 rows named above.
# Kernel regexes match the mangled names, template arguments included
# (_Z11k_hgru1_fwdI13__nv_bfloat16Li8ELi16 is the bf16 forward with TT 8, CH 16).
set -uo pipefail
hgrn=$1
logs=${2:-${OUT:-/tmp}}
command -v ncu >/dev/null || { echo "ncu not found"; exit 1; }
st=smsp__average_warps_issue_stalled
mets=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__occupancy_limit_warps,launch__occupancy_limit_blocks,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,dram__bytes_write.sum
for s in long_scoreboard barrier short_scoreboard wait math_pipe_throttle lg_throttle mio_throttle not_selected no_instruction membar dispatch_stall; do
    mets=$mets,${st}_${s}_per_issue_active.ratio
done
jobs=${PROF_JOBS:-"hgru1_fwd|k_hgru1_fwd|198;hgru1_bwd|k_hgru1_bwd|194;hgru2_fwd|k_hgru2_fwd|198;hgru2_bwd|k_hgru2_bwd|194"}
IFS=';' read -ra list <<<"$jobs"
for j in "${list[@]}"; do
    IFS='|' read -r name kern skip <<<"$j"
    timeout 300 ncu --kernel-name-base mangled --clock-control none -k "regex:$kern" -s "${skip:-2}" -c 1 --metrics "$mets" \
        "$hgrn" bench --ops >"$logs/ncu_$name.log" 2>&1
    echo "== $name ($kern): rc=$?"
    grep -E "^ +(gpu__|dram__|smsp__|sm__|launch__|l1tex__|lts__)" "$logs/ncu_$name.log" |
        awk '{v=$NF; n=$1; sub("smsp__average_warps_issue_stalled_","stall_",n); sub("_per_issue_active.ratio","",n); printf "  %-58s %s\n", n, v}'
done
