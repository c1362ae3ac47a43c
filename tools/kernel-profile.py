#!/usr/bin/env python3
"""kernel-profile: where a GPU program's time goes, kernel by kernel, from Nsight Compute.

Reads the raw CSV page of an `ncu` run that collected `gpu__time_duration.sum` (one pass, so no
kernel is replayed) and prints each kernel's total time, launch count and share, largest first.
Kernels that differ only in their template arguments or suffix share a row with --family; with
--category they are summed by what they do (GEMM, copy, elementwise, each mixer, ...).
With --marker NAME, only the kernels of one training step are summed: those after the K-th launch
of NAME up to and including the (K+1)-th (AdamW's `mt_adamw` ends every step), so the table is
one whole step and not the first, which compiles and allocates. With --tail NAME:N, those from
the N-th last launch of NAME to the end: a benchmark's last iteration, where each iteration holds
N launches of NAME, the first of them opening it (RAttention's forward + backward: rope_table:4).

    ncu --metrics gpu__time_duration.sum --clock-control none --csv --page raw \\
        --launch-skip 2000 --launch-count 5000 .gpu/bin/swax train ... > step.csv
    tools/kernel-profile.py step.csv --marker mt_adamw --step 1 [--family] [--top 40]
    tools/kernel-profile.py all.csv --tail rope_table:4 --category
"""
import argparse
import csv
import re
import sys
from collections import defaultdict

TIME = "gpu__time_duration.sum"


def rows(path):
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    reader = csv.reader(lines)
    header = next(reader)
    name_col, time_col = header.index("Kernel Name"), header.index(TIME)
    for r in reader:
        if len(r) <= time_col:
            continue
        try:
            ns = float(r[time_col].replace(",", ""))
        except ValueError:  # the units row
            continue
        yield r[name_col], ns


def family(name):
    name = re.sub(r"<.*", "", name)
    name = re.sub(r"\(.*", "", name)
    return re.sub(r"_(f32|bf16|f16|d\d+)$", "", name)


# What a kernel does, by its name's start; cuBLAS's GEMMs are named by their tiles (nvjet_...).
CATEGORIES = [
    ("GEMM (cuBLAS)", ("nvjet", "cublas", "void cublas", "sm90_xmma", "gemm")),
    ("copy", ("copy_",)),
    ("elementwise (binary, unary, cast, fill)", ("binary", "unary", "cast_", "fill_")),
    ("mLSTM", ("mlstm_",)),
    ("SWA", ("swa_",)),
    ("RAttention linear branch", ("rla_",)),
    ("gated delta rule", ("gdn_", "gated_delta")),
    ("short convolution", ("short_conv",)),
    ("SwiGLU", ("swiglu",)),
    ("RMSNorm", ("norm_",)),
    ("RoPE", ("rope",)),
    ("cross-entropy", ("ce_",)),
    ("optimizer", ("mt_",)),
    ("reductions, gathers, scatters", ("reduce", "gather", "scatter", "cumsum")),
]


def category(name):
    return next((c for c, starts in CATEGORIES if name.startswith(starts)), "other")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("--marker", help="a kernel launched once per step, last in it")
    p.add_argument("--step", type=int, default=1, help="which whole step after the first marker")
    p.add_argument("--tail", help="NAME:N, from the N-th last launch of NAME to the end")
    p.add_argument("--family", action="store_true", help="merge kernels that differ by suffix")
    p.add_argument("--category", action="store_true", help="sum kernels by what they do")
    p.add_argument("--top", type=int, default=40)
    a = p.parse_args()
    kernels = list(rows(a.csv))
    if not kernels:
        sys.exit(f"{a.csv}: no kernel rows with {TIME}")
    if a.marker:
        ends = [i for i, (n, _) in enumerate(kernels) if a.marker in n]
        if len(ends) < a.step + 1:
            sys.exit(f"{a.csv}: {len(ends)} launches of {a.marker}, a whole step {a.step} needs {a.step + 1}")
        kernels = kernels[ends[a.step - 1] + 1 : ends[a.step] + 1]
    if a.tail:
        name, _, n = a.tail.rpartition(":")
        if not name or not n.isdigit() or int(n) == 0:
            sys.exit(f"--tail {a.tail}: want NAME:N with N at least 1")
        starts = [i for i, (k, _) in enumerate(kernels) if name in k]
        if len(starts) < int(n):
            sys.exit(f"{a.csv}: {len(starts)} launches of {name}, --tail needs {n}")
        kernels = kernels[starts[-int(n)] :]
    total = defaultdict(float)
    count = defaultdict(int)
    for name, ns in kernels:
        key = category(name) if a.category else family(name) if a.family else re.sub(r"\(.*", "", name)
        total[key] += ns
        count[key] += 1
    all_ns = sum(total.values())
    print(f"{len(kernels)} launches, {all_ns / 1e6:.3f} ms of kernel time (serialised, as ncu runs them)")
    print("| kernel | launches | ms | share |")
    print("|---|---|---|---|")
    for key in sorted(total, key=total.get, reverse=True)[: a.top]:
        print(f"| {key[:90]} | {count[key]} | {total[key] / 1e6:.3f} | {100 * total[key] / all_ns:.1f}% |")


if __name__ == "__main__":
    main()
