#!/usr/bin/env bash
# Install Horovod 0.28.1 built against the installed torch, with Gloo (CPU) and no MPI.
#
# Why a script: Horovod ships only an sdist, and its CMake files ask for C++14 while
# torch 2.13's headers need C++17. We patch the standard, build a wheel once and keep it in
# a cache keyed by the Horovod, torch and Python versions, so later runs install in seconds.
# Set HOROVOD_WHEEL_CACHE to move the cache; extra HOROVOD_* build flags (e.g.
# HOROVOD_GPU_OPERATIONS=NCCL, HOROVOD_WITH_MPI=1) pass through to the build.
set -euo pipefail

PY="${PYTHON:-python3}"
HVD_VERSION="0.28.1"

if "$PY" - <<'PYEOF' 2>/dev/null
import horovod, horovod.torch as hvd  # noqa: F401
assert horovod.__version__ == "0.28.1"
PYEOF
then
    echo "install-horovod: horovod $HVD_VERSION already importable with torch"
    exit 0
fi

TORCH_VERSION="$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')"
PY_TAG="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
CACHE_ROOT="${HOROVOD_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/det-lite/wheels}"
CACHE_DIR="$CACHE_ROOT/horovod-$HVD_VERSION-torch$TORCH_VERSION-$PY_TAG"

WHEEL="$(ls "$CACHE_DIR"/horovod-"$HVD_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
if [[ -z "$WHEEL" ]]; then
    echo "install-horovod: building horovod $HVD_VERSION for torch $TORCH_VERSION ($PY_TAG); takes minutes"
    BUILD="$(mktemp -d)"
    trap 'rm -rf "$BUILD"' EXIT
    "$PY" -m pip download --quiet --no-deps --no-binary :all: "horovod==$HVD_VERSION" -d "$BUILD"
    tar -xzf "$BUILD/horovod-$HVD_VERSION.tar.gz" -C "$BUILD"
    SRC="$BUILD/horovod-$HVD_VERSION"
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
        "$SRC/CMakeLists.txt" "$SRC/horovod/torch/CMakeLists.txt"
    if ! command -v cmake >/dev/null; then
        "$PY" -m pip install --quiet "cmake>=3.13,<4"
    fi
    "$PY" -m pip install --quiet "packaging" "cloudpickle" "psutil" "pyyaml" "wheel" "setuptools"
    export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
    export HOROVOD_WITH_GLOO=1
    export HOROVOD_WITHOUT_MPI="${HOROVOD_WITHOUT_MPI:-1}"
    export MAKEFLAGS="${MAKEFLAGS:--j$(nproc)}"
    "$PY" -m pip wheel --no-deps --no-build-isolation -w "$BUILD/dist" "$SRC"
    mkdir -p "$CACHE_DIR"
    cp "$BUILD"/dist/horovod-"$HVD_VERSION"-*.whl "$CACHE_DIR/"
    WHEEL="$(ls "$CACHE_DIR"/horovod-"$HVD_VERSION"-*.whl | head -n1)"
fi

"$PY" -m pip install --quiet "$WHEEL"
"$PY" -c 'import horovod.torch as hvd; print("install-horovod: ok, gloo built:", hvd.gloo_built(), "mpi built:", hvd.mpi_built())'
