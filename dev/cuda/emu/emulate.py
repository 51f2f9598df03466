#!/usr/bin/env python3
"""emulate.py SANDBOX.cu > OUT.cpp - a dev/cuda sandbox rewritten as C++ for
g++ -std=c++20 -I dev/cuda/emu -I dev/cuda (cuda_runtime.h here says what is
emulated): kernel launches `k<<<grid, block[, smem]>>>(args);` become
emu_launch calls, the dynamic shared-memory declaration a pointer to the
emulator's buffer, the tanh.approx PTX instruction tanhf, NULL nullptr (a
kernel argument's type is deduced)."""
import re
import sys


def split_top(s):
    parts, depth, cur = [], 0, ''
    for ch in s:
        depth += ch in '(<'
        depth -= ch in ')>'
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    return parts + [cur]


def launch(m):
    kern, cfg, args = m.group(1), split_top(m.group(2)), m.group(3)
    if len(cfg) == 3:
        return f'emu_launch_smem(dim3({cfg[0]}), dim3({cfg[1]}), (size_t)({cfg[2]}), {kern}, {args});'
    if len(cfg) == 2:
        return f'emu_launch(dim3({cfg[0]}), dim3({cfg[1]}), {kern}, {args});'
    sys.exit(f'emulate.py: a launch with {len(cfg)} configuration values: {m.group(0)}')


def main():
    if len(sys.argv) != 2:
        sys.exit('usage: emulate.py SANDBOX.cu > OUT.cpp')
    try:
        src = open(sys.argv[1]).read()
    except OSError as e:
        sys.exit(f'emulate.py: {e}')
    src = re.sub(r'extern __shared__ [^;]*?(\w+)\[\];', r'unsigned char *\1 = emu_dyn_smem;', src)
    src = re.sub(r'asm\("tanh\.approx\.f32 %0, %1;" : "=f"\((\w+)\) : "f"\((.*?)\)\);', r'\1 = tanhf(\2);', src)
    src = re.sub(r'\bNULL\b', 'nullptr', src)
    src = re.sub(r'(\S+?)<<<(.+?)>>>\((.*)\);', launch, src)
    sys.stdout.write(src)


main()
