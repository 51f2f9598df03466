# sass_ops.awk - per-kernel SASS instruction counts of the HGRU1 scan kernels
# (static: the chunk loops are fully unrolled, so the TT 16 minus TT 8 count
# over 8 is the cost per token).
#   cuobjdump -sass build-gpu/hgrn | awk -f dev/sass_ops.awk
/Function : / { flush(); name = $3; keep = (name ~ /hgru1/); n = 0; delete ops; next }
keep && /\/\*[0-9a-f][0-9a-f][0-9a-f][0-9a-f]\*\// {
    line = $0
    sub(/^[ \t]*\/\*[0-9a-f]+\*\/[ \t]*/, "", line)
    sub(/^@!?U?P[T0-9]+[ \t]+/, "", line)
    split(line, w, /[ \t]/); split(w[1], o, "."); op = o[1]
    if (op == "NOP" || op == "") next
    n++; ops[op]++
}
function flush(   s, k) {
    if (!keep || n == 0) return
    s = ""
    for (k in ops) if (ops[k] >= 8) s = s " " k ":" ops[k]
    printf "%6d %s\n      %s\n", n, name, s
}
END { flush() }
