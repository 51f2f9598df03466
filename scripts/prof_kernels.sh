#!/usr/bin/env bash
# prof_kernels.sh - Nsight Compute on the scan kernels: occupancy, issue
# activity, DRAM throughput and the main warp stall reasons, one launch each.
#
#   scripts/prof_kernels.sh EXE [log-dir]
#
# EXE is a built test_ops_cuda. Profiles, in its timing mode: the HGRU1 scan
# (bf16, B 256, N 256, D 192) forward and backward, and the HGRU2 scan (bf16,
# B 256, N 256, D 384, e 16) recurrent forward and chunked backward. Extra
# jobs: PROF_JOBS="name|ENV=..|kernel-regex|launches-to-skip;..." (replaces
# the list; the HGRU1 timings run fp32 first, 7 shapes x 63 launches, so the
# bf16 default shape starts at launch 441). Kernel regexes match the mangled
# names, template arguments included (_Z11k_hgru1_fwdI13__nv_bfloat16Li8ELi16
# is the bf16 forward with TT 8, CH 16).
set -uo pipefail
exe=$1
logs=${2:-${OUT:-/tmp}}
command -v ncu >/dev/null || { echo "ncu not found"; exit 1; }
st=smsp__average_warps_issue_stalled
mets=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__occupancy_limit_warps,launch__occupancy_limit_blocks,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum,dram__bytes_write.sum
for s in long_scoreboard barrier short_scoreboard wait math_pipe_throttle lg_throttle mio_throttle not_selected no_instruction membar dispatch_stall; do
    mets=$mets,${st}_${s}_per_issue_active.ratio
done
jobs=${PROF_JOBS:-"hgru1_fwd|HGRN_BENCH_ONLY=1 HGRN_BENCH_NOGEMM=1|k_hgru1_fwd|446;hgru1_bwd|HGRN_BENCH_ONLY=1 HGRN_BENCH_NOGEMM=1|k_hgru1_bwd|446;hgru2_fwd_rec|HGRN_BENCH_HGRU2=1 HGRN_BENCH_HGRU2_ONLY=bf16,384,16,rec|k_hgru2_fwd|2;hgru2_bwd_chunk|HGRN_BENCH_HGRU2=1 HGRN_BENCH_HGRU2_ONLY=bf16,384,16,chunk|k_hc_bwd|2"}
IFS=';' read -ra list <<<"$jobs"
for j in "${list[@]}"; do
    IFS='|' read -r name envs kern skip <<<"$j"
    env $envs timeout 200 ncu --kernel-name-base mangled --clock-control none -k "regex:$kern" -s "${skip:-2}" -c 1 --metrics "$mets" \
        "$exe" >"$logs/ncu_$name.log" 2>&1
    echo "== $name ($kern): rc=$?"
    grep -E "^ +(gpu__|dram__|smsp__|sm__|launch__|l1tex__|lts__)" "$logs/ncu_$name.log" |
        awk '{v=$NF; n=$1; sub("smsp__average_warps_issue_stalled_","stall_",n); sub("_per_issue_active.ratio","",n); printf "  %-58s %s\n", n, v}'
done
