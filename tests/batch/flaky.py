"""A predictor whose first attempt at each file fails as a lost disk would (an OSError), for the retry
tests; importable by Dask's worker processes."""

from __future__ import annotations

from pathlib import Path

from relaxpack.batch import Predictor


class FlakyPredictor(Predictor):
    """Fails the first time it meets each file (a marker file beside the output remembers it)."""

    def score_file(self, source, target):
        marker = Path(f"{target}.tried")
        if not marker.exists():
            marker.touch()
            raise OSError(f"transient failure reading {Path(source).name}")
        return super().score_file(source, target)
