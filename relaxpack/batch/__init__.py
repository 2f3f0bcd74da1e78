"""Batch scoring: a picklable :class:`Predictor` for Dask and Ray, and ``relaxpack batch`` on Dask.

:class:`Predictor` needs numpy alone; :mod:`relaxpack.batch.dask_job` (the
``relaxpack batch`` command) needs the ``dask`` extra (``pip install
'relaxpack[dask]'``: dask and distributed) and imports it only when it runs.
"""

from .predictor import Predictor, read_inputs, write_outputs

__all__ = ["Predictor", "read_inputs", "write_outputs"]
