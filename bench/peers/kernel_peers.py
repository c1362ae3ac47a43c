"""What the kernel peers (attention_peers.py, recurrent_peers.py) share: the named shapes, as
bench/src/shape.rs names them, the timing, and their JSON lines. Each peer case is one line in
the file given by --results: `case` (as bench-attention-gpu and bench-recurrent-gpu name it),
`shape` (the same label as theirs, e.g. "B16 T4096 H12 D64", "B16 T4096 H12 Dk32 Dv64"),
`peer`, `peer_ms` (forward + backward median, ms) and `fwd_ms`; where the peer refuses the
shape or fails, `peer_ms` is null and `refused` says why, and the run goes on. The swax
benchmarks read these lines with --peer and set each case beside its fastest peer.

Imported before torch: it sets TORCHINDUCTOR_COMPILE_THREADS=1 (inductor's parallel compile
workers fork a pool the device machine does not need).
"""
import os

os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import argparse
import datetime
import json
import subprocess
import sys

import torch
import triton

from swax_commit import commit

# bench/src/shape.rs: B, T, heads, the head dim D (attention, the gated delta rule, the mLSTM's
# values) and the mLSTM's q/k width (half the head in swax-small's layers).
SHAPES = {
    "paper": {"B": 8, "T": 8192, "H": 16, "D": 128, "MLSTM_DK": 128},
    "swax-small": {"B": 16, "T": 4096, "H": 12, "D": 64, "MLSTM_DK": 32},
}


def label(shape, dk, dv):
    """A shape as the result lines name it (bench/src/shape.rs `Shape::label`)."""
    heads = f"D{dk}" if dk == dv else f"Dk{dk} Dv{dv}"
    return f"B{shape['B']} T{shape['T']} H{shape['H']} {heads}"


def median_ms(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def parser(description, results):
    """The arguments every kernel peer takes: --shapes and --results (default `results`)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--shapes", default="paper,swax-small",
                   help=f"comma-separated, of {', '.join(SHAPES)}")
    p.add_argument("--results", default=results, help="the JSON-lines file appended to")
    return p


def shapes(arg):
    names = arg.split(",")
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise SystemExit(f"shape(s) {unknown}: expected {', '.join(SHAPES)}")
    return [(n, SHAPES[n]) for n in names]


def refusal(e):
    """Why a peer did not run, in one line."""
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:300]}"


class Recorder:
    """Appends each peer case's line to `path` as it is measured (a later crash keeps the lines
    before it) and prints it as a table row."""

    def __init__(self, path, bench):
        self.path, self.bench = path, bench
        self.date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
        self.commit = commit()
        self.lines = 0
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        print(f"torch {torch.__version__}, triton {triton.__version__}, "
              f"{torch.cuda.get_device_name()}; bf16, median ms (triton.testing.do_bench)")
        print("| case | shape | peer | fwd ms | fwd+bwd ms |")
        print("|---|---|---|---|---|")

    def write(self, case, shape, peer, fwd_ms=None, peer_ms=None, refused=None, **extra):
        line = {"bench": self.bench, "case": case, "shape": shape, "peer": peer,
                "peer_ms": peer_ms, "fwd_ms": fwd_ms, **extra,
                "torch": torch.__version__, "triton": triton.__version__,
                "device": torch.cuda.get_device_name(), "date": self.date, "commit": self.commit}
        if refused is not None:
            line["refused"] = refused
        with open(self.path, "a") as f:
            f.write(json.dumps(line) + "\n")
        self.lines += 1
        figures = "| refused: " + refused if refused is not None else f"{fwd_ms:.3f} | {peer_ms:.3f}"
        print(f"| {case} | {shape} | {peer} | {figures} |", flush=True)
        return line

    def time(self, case, shape, peer, make):
        """Times the peer `make()` builds: (forward, forward + backward) callables. A peer that
        refuses the shape or fails is written as a refusal; returns the line."""
        try:
            fwd, both = make()
            with torch.no_grad():
                fwd_ms = median_ms(fwd)
            peer_ms = median_ms(both)
        except Exception as e:  # a refusal or a failure is recorded, not fatal
            torch.cuda.empty_cache()
            return self.write(case, shape, peer, refused=refusal(e))
        return self.write(case, shape, peer, fwd_ms=fwd_ms, peer_ms=peer_ms)

    def isolated(self, case, shape, peer, argv):
        """Runs `python3 argv` (the same script, one peer, appending to the same file) in a
        process of its own; where it dies without writing its line, writes a refusal with the
        exit status and the last line of its error output."""
        before = self._count()
        run = subprocess.run([sys.executable, *argv, "--results", self.path],
                             capture_output=True, text=True)
        rows = run.stdout.splitlines()[3:-1]  # the child's own table rows, not its header
        if rows:
            print("\n".join(rows), flush=True)
        if self._count() == before:
            tail = (run.stderr.strip().splitlines() or [""])[-1][:300]
            self.write(case, shape, peer, refused=f"the process exited with {run.returncode}: {tail}")
        else:
            self.lines += self._count() - before

    def _count(self):
        try:
            with open(self.path) as f:
                return sum(1 for _ in f)
        except FileNotFoundError:
            return 0

    def done(self):
        print(f"appended {self.lines} lines to {self.path}")


def randn(*dims, grad=True):
    x = torch.randn(*dims, device="cuda", dtype=torch.bfloat16)
    return x.requires_grad_() if grad else x
