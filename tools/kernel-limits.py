#!/usr/bin/env python3
"""kernel-limits: what limits each kernel, from an Nsight Compute run's raw CSV page.

For every distinct kernel (its first profiled launch) it prints the duration, the SM and memory
throughput against their peaks (and L1, L2 and DRAM apart), the tensor pipe's active cycles, the
pipes that issue the most instructions, registers, shared memory, theoretical and achieved
occupancy with what bounds the former, and the warp stall reasons that cost the most cycles per
issued instruction. Collect with the sections below; each profiled launch is replayed, and -c
must reach the backward's kernels (the benchmarks run the forward alone 12 times first: -c 34
for the mLSTM, 64 for the gated delta rule, 40 for SWA):

    ncu --clock-control none --csv --page raw --section SpeedOfLight --section Occupancy \\
        --section LaunchStats --section WarpStateStats --section ComputeWorkloadAnalysis \\
        -k regex:mlstm -c 34 .gpu/bin/bench-recurrent-gpu --shapes paper --mixers mlstm --results /dev/null \\
        > limits.csv
    tools/kernel-limits.py limits.csv [--stalls 4]
"""
import argparse
import csv
import re

STALL = re.compile(r"^smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio$")
PIPE = re.compile(r"^sm__inst_executed_pipe_(\w+)\.avg\.pct_of_peak_sustained_active$")
FIELDS = [
    ("ms", "gpu__time_duration.sum", 1e-6),
    ("SM%", "sm__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("mem%", "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("L1%", "l1tex__throughput.avg.pct_of_peak_sustained_active", 1),
    ("L2%", "lts__throughput.avg.pct_of_peak_sustained_elapsed", 1),
    ("DRAM%", "dram__cycles_active.avg.pct_of_peak_sustained_elapsed", 1),
    ("tensor%", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active", 1),
    ("regs", "launch__registers_per_thread", 1),
    ("smem KB", "launch__shared_mem_per_block_dynamic", 1 / 1024),
    ("threads", "launch__block_size", 1),
    ("occ theor%", "sm__maximum_warps_per_active_cycle_pct", 1),
    ("occ achieved%", "sm__warps_active.avg.pct_of_peak_sustained_active", 1),
]
LIMITS = ["registers", "shared_mem", "warps", "blocks"]


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv")
    p.add_argument("--stalls", type=int, default=4, help="stall reasons shown per kernel")
    a = p.parse_args()
    with open(a.csv, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    reader = csv.reader(lines)
    header = next(reader)
    col = {name: i for i, name in enumerate(header)}
    seen = set()
    for r in reader:
        if len(r) < len(header) or number(r[col["gpu__time_duration.sum"]]) is None:
            continue  # the units row
        name = r[col["Kernel Name"]]
        if name in seen:
            continue
        seen.add(name)
        values = {h: number(r[i]) for h, i in col.items()}
        parts = []
        for label, metric, scale in FIELDS:
            v = values.get(metric)
            if v is not None:
                parts.append(f"{label} {v * scale:.3g}")
        limits = [(values.get(f"launch__occupancy_limit_{k}"), k) for k in LIMITS]
        bound = min(((v, k) for v, k in limits if v is not None), default=None)
        if bound:
            parts.append(f"blocks/SM {bound[0]:.0f} (by {bound[1]})")
        pipes = sorted(((v, m.group(1)) for h, v in values.items() if v is not None
                        for m in [PIPE.match(h)] if m), reverse=True)[:3]
        stalls = sorted(((v, m.group(1)) for h, v in values.items() if v is not None
                         for m in [STALL.match(h)] if m), reverse=True)[: a.stalls]
        print(f"{name}: " + ", ".join(parts))
        if pipes:
            print("    busiest issue pipes: " + ", ".join(f"{n} {v:.1f}%" for v, n in pipes))
        if stalls:
            print("    stalls (cycles per issue): " + ", ".join(f"{n} {v:.2f}" for v, n in stalls))


if __name__ == "__main__":
    main()
