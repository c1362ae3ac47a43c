"""The commit a peer's figures record, as the swax benchmarks record theirs: SWAX_COMMIT where
it is set (on the GPU machine, whose checkout's git may be stale), else what git says."""
import os
import subprocess


def commit():
    if os.environ.get("SWAX_COMMIT"):
        return os.environ["SWAX_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"
