#!/usr/bin/env bash
# Builds PyG's own sampling backend, torch-sparse (and torch-scatter, which it imports), from
# their sdists for the venv's torch 2.13.0, and installs them into .venv-torch: PyPI has no
# wheels of them (nor of pyg-lib) for this torch. With them, examples/pyg_cora_sage.py also trains
# with PyG's NeighborLoader and the pytest suite compares it with sagessd's sampler edge for edge.
# CPU only; ~25 min on 2 cores, once (the wheels are kept in target/wheels/). Not part of
# scripts/setup.sh: the suite says, loudly, what it does not run without them.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-torch
[ -x "$venv/bin/python" ] || { echo "run scripts/setup.sh first" >&2; exit 1; }
mkdir -p target/wheels
for pkg in torch-scatter==2.1.2 torch-sparse==0.6.18; do
    name=${pkg%%==*}
    if ! ls target/wheels/"${name//-/_}"-*.whl >/dev/null 2>&1; then
        FORCE_ONLY_CPU=1 MAX_JOBS=${MAX_JOBS:-2} PATH="$PWD/$venv/bin:$PATH" \
            "$venv/bin/pip" wheel --quiet --no-build-isolation --no-deps -w target/wheels "$pkg"
    fi
done
"$venv/bin/pip" install --quiet --no-deps target/wheels/torch_scatter-*.whl target/wheels/torch_sparse-*.whl
# torch-sparse imports SciPy.
"$venv/bin/pip" install --quiet --disable-pip-version-check scipy==1.17.1
"$venv/bin/python" -c 'import torch_geometric.typing as t; assert t.WITH_TORCH_SPARSE; print("PyG sampling backend: torch-sparse")'
