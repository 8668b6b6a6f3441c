#!/usr/bin/env bash
# Install Horovod 0.28.1 built against the installed torch: Gloo (CPU) controller, no MPI.
#
#     bash scripts/install-horovod.sh            # PYTHON=... to pick the interpreter
#
# Why a script: Horovod ships only an sdist, and its CMake files ask for C++14 while torch
# 2.13's headers need C++17. We patch the standard, build a wheel once (a few minutes; needs
# network for the sdist, g++ >= 8 and the Python headers; cmake comes from pip when missing)
# and keep it in a cache keyed by the Horovod, torch and Python versions and by any HOROVOD_*
# build flags, so later runs install in seconds. HOROVOD_WHEEL_CACHE moves the cache.
# Build flags pass through, e.g. for MPI and NCCL:
#     HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_MPI=0 HOROVOD_GPU_OPERATIONS=NCCL bash scripts/install-horovod.sh
set -euo pipefail

PY="${PYTHON:-python3}"
HVD_VERSION="0.28.1"
# Runtime dependencies of Horovod's Python package (the wheel is installed with --no-deps).
RUNTIME_DEPS=(cloudpickle psutil pyyaml packaging)

# Build flags the caller set (they select a different wheel than the default Gloo build).
FLAGS="$(env | grep -E '^HOROVOD_(WITH|WITHOUT|GPU|NCCL|CUDA|ROCM|CPU_OPERATIONS|BUILD|DEBUG|CMAKE)' | sort || true)"

if [[ -z "$FLAGS" ]] && "$PY" - <<PYEOF 2>/dev/null
import horovod, horovod.torch as hvd
assert horovod.__version__ == "$HVD_VERSION" and hvd.gloo_built()
PYEOF
then
    echo "install-horovod: horovod $HVD_VERSION already importable with torch"
    exit 0
fi

TORCH_VERSION="$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')"
PY_TAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
CACHE_ROOT="${HOROVOD_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/det-lite/wheels}"
CACHE_DIR="$CACHE_ROOT/horovod-$HVD_VERSION-torch$TORCH_VERSION-$PY_TAG"
if [[ -n "$FLAGS" ]]; then
    CACHE_DIR="$CACHE_DIR-$(printf '%s' "$FLAGS" | sha1sum | cut -c1-10)"
fi

WHEEL="$(ls "$CACHE_DIR"/horovod-"$HVD_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
if [[ -z "$WHEEL" ]]; then
    echo "install-horovod: building horovod $HVD_VERSION for torch $TORCH_VERSION ($PY_TAG); takes minutes"
    BUILD="$(mktemp -d)"
    trap 'rm -rf "$BUILD"' EXIT
    "$PY" -m pip download --quiet --no-deps --no-binary :all: "horovod==$HVD_VERSION" -d "$BUILD"
    tar -xzf "$BUILD/horovod-$HVD_VERSION.tar.gz" -C "$BUILD"
    SRC="$BUILD/horovod-$HVD_VERSION"
    for f in "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt"; do
        if ! grep -q 'set(CMAKE_CXX_STANDARD 14)' "$f"; then
            echo "install-horovod: $f does not set CMAKE_CXX_STANDARD 14; cannot patch it to 17" >&2
            exit 1
        fi
        sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' "$f"
    done
    if ! command -v cmake >/dev/null; then
        "$PY" -m pip install --quiet "cmake>=3.13,<4"
    fi
    "$PY" -m pip install --quiet "${RUNTIME_DEPS[@]}" wheel setuptools
    export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
    export HOROVOD_WITH_GLOO=1
    export HOROVOD_WITHOUT_MPI="${HOROVOD_WITHOUT_MPI:-1}"
    export MAKEFLAGS="${MAKEFLAGS:--j$(nproc)}"
    "$PY" -m pip wheel --no-deps --no-build-isolation -w "$BUILD/dist" "$SRC"
    mkdir -p "$CACHE_DIR"
    cp "$BUILD"/dist/horovod-"$HVD_VERSION"-*.whl "$CACHE_DIR/"
    WHEEL="$(ls "$CACHE_DIR"/horovod-"$HVD_VERSION"-*.whl | head -n1)"
fi

"$PY" -m pip install --quiet "${RUNTIME_DEPS[@]}"
# --force-reinstall: replace a same-version Horovod built against another torch or flags.
"$PY" -m pip install --quiet --no-deps --force-reinstall "$WHEEL"
"$PY" -c 'import horovod.torch as hvd; print("install-horovod: ok, gloo built:", hvd.gloo_built(), "mpi built:", hvd.mpi_built(), "nccl built:", bool(hvd.nccl_built()))'
