#!/usr/bin/env bash
# CI: the runtime on the oldest numpy that pyproject.toml accepts (numpy>=2.0). The full install
# (the python given as $1, the pinned numpy) converts every zoo model and records relaxpack's
# outputs; a fresh venv of `pip install numpy==<floor> relaxpack` must run every archive to the
# same bits (tests/models/zoo/numpy_floor.py) and through the CLI; then the runtime's own tests
# run on the floor numpy in a full install.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
full_python="$1"

# the oldest numpy 2 with wheels for this Python
case "$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')" in
    3.10|3.11|3.12) floor="2.0.2" ;;
    3.13) floor="2.1.3" ;;
    *) floor="" ;;
esac
if [ -z "$floor" ]; then
    echo "numpy floor: no wheel of numpy 2.0-2.1 for this Python; skipped"
    exit 0
fi

# one BLAS thread on both sides: a product split over threads may sum in another order (the same
# numpy gives other bits at 2 threads than at 1 on the zoo's UNet and wav2vec2)
export OPENBLAS_NUM_THREADS=1
work="$(mktemp -d)"
# shellcheck disable=SC2064
trap "rm -rf '$work'" EXIT

"$full_python" -m tests.models.zoo.numpy_floor write "$work/zoo"

python3 -m venv "$work/old"
old="$work/old/bin/python"
"$old" -m pip install --quiet --upgrade pip
"$old" -m pip install --quiet "numpy==$floor" "$repo"
(
    cd "$work"     # away from the source tree: the installed package runs
    "$old" "$repo/tests/models/zoo/numpy_floor.py" compare "$work/zoo"
    "$work/old/bin/relaxpack" run "$work/zoo/bert_ts-O2.rpk" --fill random --dim batch=2 --dim sequence=9 >/dev/null
    "$work/old/bin/relaxpack" inspect "$work/zoo/sk_random_forest-O2.rpk" >/dev/null
)
echo "numpy floor: the CLI runs archives on numpy $floor"

# the runtime's tests (their references need onnx and onnxruntime) on the floor numpy
python3 -m venv "$work/full"
sed "s/^numpy==.*/numpy==$floor/" .ci/constraints.txt > "$work/constraints.txt"
"$work/full/bin/python" -m pip install --quiet --upgrade pip
"$work/full/bin/python" -m pip install --quiet -c "$work/constraints.txt" -e '.[onnx,test]'
"$work/full/bin/python" -c "import numpy; assert numpy.__version__ == '$floor', numpy.__version__"
"$work/full/bin/python" -m pytest -p no:cacheprovider tests/runtime tests/serve tests/batch
echo "numpy floor: the runtime's tests pass on numpy $floor"
