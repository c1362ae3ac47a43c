# peer-env: sourced by the pair scripts (train-pair.sh, kernel-pair.sh) on a GPU machine, from the
# repository root. It sets SWAX_COMMIT from .gpu/commit where it is unset, keeps inductor's
# compile workers to one, and installs the peers' pure-Python dependencies, which that machine
# lacks and cannot download (mlstm_kernels; fla: flash_linear_attention and fla_core), from the
# wheels carried in .whl/ into a folder of their own put on PYTHONPATH (README: "Running the GPU
# tests and benchmarks").
if [ -z "${SWAX_COMMIT:-}" ] && [ -f .gpu/commit ]; then
  export SWAX_COMMIT=$(cat .gpu/commit)
fi
export TORCHINDUCTOR_COMPILE_THREADS=1
if ! python3 -c "import mlstm_kernels, fla.ops" 2>/dev/null; then
  wheels=$(mktemp -d)
  python3 -m pip install --quiet --no-deps --no-index --target "$wheels" .whl/*.whl
  export PYTHONPATH="$wheels${PYTHONPATH:+:$PYTHONPATH}"
fi
