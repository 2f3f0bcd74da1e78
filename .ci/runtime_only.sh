#!/usr/bin/env bash
# CI: the runtime-only install. `pip install .` into a fresh virtual environment
# must bring numpy and relaxpack and nothing else, and run an archive made by the
# full install (the python given as $1) through the Python API and the CLI.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$(pwd)"
full_python="$1"

work="$(mktemp -d)"
# shellcheck disable=SC2064
trap "rm -rf '$work'" EXIT

# The full side: an archive of the bundled example, inputs, and onnxruntime's outputs.
"$full_python" -m relaxpack.cli convert relaxpack/examples/transformer_block.onnx -o "$work/block.rpk" \
    --dim batch=1..8 --dim seq=1..64 >/dev/null
"$full_python" - "$work" <<'EOF'
import sys
import numpy as np
import onnxruntime as ort
work = sys.argv[1]
x = np.random.default_rng(0).standard_normal((2, 7, 32)).astype(np.float32)
session = ort.InferenceSession("relaxpack/examples/transformer_block.onnx", providers=["CPUExecutionProvider"])
np.savez(f"{work}/in.npz", x=x)
np.savez(f"{work}/want.npz", **dict(zip([o.name for o in session.get_outputs()], session.run(None, {"x": x}))))
EOF

# The runtime side: a fresh venv with `pip install .`, numpy alone beside relaxpack.
python3 -m venv "$work/rt"
rt="$work/rt/bin/python"
"$rt" -m pip install --quiet --upgrade pip
"$rt" -m pip install --quiet -c .ci/constraints.txt "$repo"
installed="$("$rt" -m pip list --format=freeze | cut -d= -f1 | tr 'A-Z' 'a-z' | sort | tr '\n' ' ')"
echo "runtime-only install holds: $installed"
for name in $installed; do
    case "$name" in
        numpy|relaxpack|pip|setuptools) ;;
        *) echo "CI: the runtime-only install pulled in $name" >&2; exit 1 ;;
    esac
done

cd "$work"     # away from the source tree: the installed package runs
"$rt" - <<'EOF'
import numpy as np
from relaxpack.runtime import InferenceSession
session = InferenceSession("block.rpk")
[x] = session.get_inputs()
assert (x.name, x.type, x.shape) == ("x", "tensor(float)", ["batch", "seq", 32]), x
with np.load("in.npz") as feed, np.load("want.npz") as want:
    (y,) = session.run(None, {"x": feed["x"]})
    np.testing.assert_allclose(y, want["y"], rtol=1e-4, atol=1e-5)
print("runtime-only InferenceSession: outputs agree with onnxruntime's")
EOF
"$work/rt/bin/relaxpack" run block.rpk --inputs in.npz --expected want.npz
"$work/rt/bin/relaxpack" inspect block.rpk
"$work/rt/bin/relaxpack" bench block.rpk -n 3 --dim batch=1 --dim seq=16 --profile --top 5
"$work/rt/bin/relaxpack" inspect block.rpk --plot plan.svg --dim batch=2 --dim seq=16
# the commands that need an extra say which, in one line
for extra in "convert $repo/relaxpack/examples/small_cnn.onnx:convert needs onnx and onnxruntime:onnx" \
             "serve block.rpk:serve needs starlette and uvicorn:serve" \
             "batch block.rpk . -o out:batch needs dask and distributed:dask"; do
    IFS=: read -r args needs name <<<"$extra"
    set +e
    # shellcheck disable=SC2086
    message="$("$work/rt/bin/relaxpack" $args 2>&1)"
    code=$?
    set -e
    if [ "$code" -ne 1 ] || [ "$message" != "error: relaxpack $needs, which this install lacks: pip install 'relaxpack[$name]'" ]; then
        echo "CI: ${args%% *} in the runtime-only install said ($code): $message" >&2
        exit 1
    fi
    echo "runtime-only ${args%% *}: $message"
done
echo "venv sizes: runtime-only $(du -sh "$work/rt" | cut -f1), full $(du -sh "$(dirname "$(dirname "$full_python")")" | cut -f1)"
