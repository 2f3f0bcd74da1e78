#!/usr/bin/env bash
# Run tests as on an x86-64 CPU with AVX2 but without AVX-512/VNNI (a Haswell),
# whatever this machine has: under qemu's user-mode emulator (Debian: apt-get
# install qemu-user). onnxruntime then takes its u8 x s8 GEMM path that adds
# products in int16-saturating pairs, which tests of integer ops must survive.
#
#   bash scripts/test_without_vnni.sh                      # the integer-op tests
#   bash scripts/test_without_vnni.sh tests/some_test.py   # any tests
#
# numpy's own AVX2 kernels are switched off (NPY_DISABLE_CPU_FEATURES=X86_V3):
# qemu 7.2 mis-executes some of them (a strided np.maximum answers wrong or
# segfaults), which has nothing to do with the CPU being emulated.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v qemu-x86_64 >/dev/null || { echo "qemu-x86_64 not found (apt-get install qemu-user)" >&2; exit 1; }
python="$(python3 -c 'import sys; print(sys.executable)')"
tests=("$@")
if [ ${#tests[@]} -eq 0 ]; then
    tests=(tests/test_integer_semantics.py tests/test_cross_check.py
           tests/importers/onnx/test_convert_quantize.py tests/importers/onnx/test_convert_microsoft.py
           tests/importers/onnx/test_ort_quantized.py
           "tests/test_cli_commands.py::test_check_blames_onnxruntime_for_a_saturating_integer_gemm")
fi
NPY_DISABLE_CPU_FEATURES=X86_V3 qemu-x86_64 -cpu Haswell "$python" -m pytest -p no:cacheprovider "${tests[@]}" \
    2> >(grep -v "TCG doesn't support requested feature" >&2)
