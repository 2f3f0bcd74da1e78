"""docs/coverage.md is generated; it must match the code and the expected-failure list."""

from .coverage_matrix import DOC, matrix
from .expected import expected_failures


def test_the_coverage_matrix_is_current():
    current = matrix(expected_failures())
    assert DOC.read_text() == current, (
        "docs/coverage.md is out of date: run python -m tests.conformance.coverage_matrix --write")


def test_every_row_names_how_the_op_is_imported():
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) > 200
    assert all(row.split(" | ")[3] in ("—", "function body")
               or row.split(" | ")[3].startswith(("converter (opset ", "refused: ")) for row in rows)


def test_the_map_ops_convert_and_only_onnxruntimes_nchwc_layout_is_refused():
    """The map ops, refused until maps joined the IR, are converter rows now; the refusals
    section holds onnxruntime's NCHWc layout ops only, on one line (they share their reason)."""
    text = DOC.read_text()
    for op in ("CastMap", "DictVectorizer", "ZipMap"):
        row = next(line for line in text.splitlines() if line.startswith(f"| {op} | ai.onnx.ml |"))
        assert row.split(" | ")[3] == "converter (opset 1+)", row
    assert "| refused: " not in text
    refused = text.split("## Deliberately refused ops\n\n", 1)[1].strip().splitlines()
    assert len(refused) == 1 and "(com.microsoft.nchwc): onnxruntime's NCHWc layout" in refused[0]
    assert "**Conv**" in refused[0] and "**ReorderInput**" in refused[0]
