"""Batch scoring on Dask: ``relaxpack batch`` over 100 files on a 2-worker LocalCluster gives what a
loop over ``vm.run`` gives; bad files are reported and the others scored; failed tasks are retried;
the predictor pickles as its archive's path and works from dask.bag."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from relaxpack.batch import Predictor
from relaxpack.errors import ArchiveError, InputError
from relaxpack.runtime import VirtualMachine, load
from tests.cli_helpers import invoke
from tests.serve.models import lookup_onnx, save, tabular_onnx

distributed = pytest.importorskip("distributed")

rng = np.random.default_rng(11)


@pytest.fixture(scope="module")
def archive(tmp_path_factory):
    path = tmp_path_factory.mktemp("batch") / "lookup.rpk"
    save(lookup_onnx(), path, batch=(1, 32), k=(1, 16))
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    feeds = {}
    for i in range(100):
        name = f"part-{i:03d}.npz"
        feeds[name] = {"ids": rng.integers(-50, 50, (int(rng.integers(1, 9)), int(rng.integers(1, 17))),
                                           dtype=np.int64)}
        np.savez(folder / name, **feeds[name])
    return folder, feeds


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as c:
        yield c


def loop_over_vm_run(archive, feeds):
    vm = VirtualMachine(load(archive))
    return {name: vm.run(feed) for name, feed in feeds.items()}


def read(path):
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def test_the_predictor_pickles_as_its_path_and_runs_the_same(archive, inputs):
    predictor = Predictor(archive)
    data = pickle.dumps(predictor)
    assert len(data) < 1000 and str(archive.resolve()).encode() in data
    again = pickle.loads(data)
    _, feeds = inputs
    feed = feeds["part-000.npz"]
    np.testing.assert_array_equal(again(feed)["out"], VirtualMachine(load(archive)).run(feed)["out"])
    assert again.outputs == ["out"] and again.inputs == {"ids": "int64"}


def test_a_changed_archive_is_refused_where_the_predictor_reopens_it(tmp_path):
    path = tmp_path / "m.rpk"
    save(lookup_onnx(), path)
    code = textwrap.dedent('''
        import pickle, sys
        predictor = pickle.loads(sys.stdin.buffer.read())
        try:
            predictor.session
        except Exception as err:
            print(type(err).__name__, err)
    ''')
    data = pickle.dumps(Predictor(path))
    save(lookup_onnx(vocab=60), path)          # rebuilt meanwhile: other weights
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, check=True)
    assert out.stdout.decode().startswith(ArchiveError.__name__) and b"changed since" in out.stdout


def test_batch_scores_100_files_on_a_2_worker_local_cluster(archive, inputs, tmp_path):
    folder, feeds = inputs
    out = tmp_path / "out"
    result = invoke("batch", archive, folder, "-o", out, "--workers", 2)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"scored 100 of 100 files into {out} in ")
    assert "on 2 worker(s) of a LocalCluster" in result.stdout
    want = loop_over_vm_run(archive, feeds)
    assert sorted(p.name for p in out.iterdir()) == sorted(feeds)
    for name, outputs in want.items():
        got = read(out / name)
        assert list(got) == ["out"]
        np.testing.assert_array_equal(got["out"], outputs["out"])


def test_bad_files_are_reported_and_the_others_scored(archive, inputs, client, tmp_path):
    folder, feeds = inputs
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    for name in list(feeds)[:6]:
        (mixed / name).write_bytes((folder / name).read_bytes())
    (mixed / "corrupt.npz").write_bytes(b"PK\x03\x04 not really a zip")
    np.savez(mixed / "wrong-dtype.npz", ids=np.zeros((2, 3), np.float32))
    np.savez(mixed / "out-of-range.npz", ids=np.full((2, 3), 50, np.int64))
    out = tmp_path / "out"
    result = invoke("batch", archive, mixed, "-o", out, "--scheduler", client.scheduler.address)
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith(f"scored 6 of 9 files into {out}") and "of the scheduler at tcp://" in lines[0]
    assert lines[1] == "3 failed:"
    assert lines[2].startswith("  corrupt.npz: cannot read corrupt.npz as .npz")
    assert lines[3] == "  out-of-range.npz: ONNX node 'Gather:rows': take: index 50 is out of range for axis 0 of size 50"
    assert lines[4] == "  wrong-dtype.npz: input 'ids': has dtype float32, expected int64"
    assert sorted(p.name for p in out.iterdir()) == sorted(list(feeds)[:6])


def test_failed_tasks_are_retried(archive, inputs, client, tmp_path):
    from relaxpack.batch.dask_job import score_directory
    from tests.batch.flaky import FlakyPredictor

    folder, feeds = inputs
    report = score_directory(FlakyPredictor(archive), folder, tmp_path / "retried", client, retries=1)
    assert report.failed == {} and len(report.scored) == 100
    np.testing.assert_array_equal(read(tmp_path / "retried" / "part-042.npz")["out"],
                                  loop_over_vm_run(archive, {"x": feeds["part-042.npz"]})["x"]["out"])
    report = score_directory(FlakyPredictor(archive), folder, tmp_path / "no-retry", client, retries=0)
    assert not report.scored and len(report.failed) == 100
    assert report.failed["part-007.npz"] == "transient failure reading part-007.npz"


def test_dask_bag_maps_the_predictor(archive, inputs, client):
    import dask.bag as db

    _, feeds = inputs
    names = list(feeds)[:40]
    bag = db.from_sequence([feeds[n] for n in names], npartitions=4).map(Predictor(archive))
    results = bag.compute()          # on the client's cluster: the predictor is pickled to its workers
    want = loop_over_vm_run(archive, {n: feeds[n] for n in names})
    for name, got in zip(names, results):
        np.testing.assert_array_equal(got["out"], want[name]["out"])


def test_usage_errors(archive, inputs, tmp_path):
    folder, _ = inputs
    for args, message in [
        ((archive, tmp_path / "none", "-o", tmp_path / "o"), "input directory not found"),
        ((archive, tmp_path, "-o", tmp_path / "o"), "no .npz files in"),
        ((archive, folder, "-o", folder), "the output directory is the input directory"),
        ((archive, folder, "-o", tmp_path / "o", "--scheduler", "tcp://x:1", "--workers", 2),
         "--workers sizes a LocalCluster"),
        ((archive, folder), "the following arguments are required: -o/--output"),
    ]:
        result = invoke("batch", *args)
        assert result.exit_code == 1 and result.exception is None, result.output
        assert message in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_without_the_extra_batch_says_what_to_install(archive, inputs, tmp_path):
    folder, _ = inputs
    code = textwrap.dedent(f'''
        import sys
        for name in ("dask", "distributed"):
            sys.modules[name] = None
        from relaxpack.cli import main
        sys.exit(main(["batch", {str(archive)!r}, {str(folder)!r}, "-o", {str(tmp_path / "o")!r}]))
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1
    assert out.stderr == ("error: relaxpack batch needs dask and distributed, which this install lacks: "
                          "pip install 'relaxpack[dask]'\n")


def test_the_predictor_on_a_data_frame_as_map_partitions_and_ray_give_it(archive, inputs):
    pd = pytest.importorskip("pandas")
    ids = rng.integers(0, 50, (6, 4), dtype=np.int64)
    frame = pd.DataFrame({"ids": list(ids)}, index=[10, 11, 12, 13, 14, 15])    # a cell per row: its array
    result = Predictor(archive)(frame)
    assert isinstance(result, pd.DataFrame) and list(result.columns) == ["out"] and list(result.index) == \
        list(frame.index)
    want = VirtualMachine(load(archive)).run({"ids": ids})["out"]
    np.testing.assert_array_equal(np.stack(result["out"].to_list()), want)
    with pytest.raises(InputError, match=r"the frame lacks column\(s\) \['ids'\]"):
        Predictor(archive)(pd.DataFrame({"x": [1]}))


def test_the_predictor_stacks_feature_columns_into_one_input(tmp_path):
    pd = pytest.importorskip("pandas")
    path = tmp_path / "tabular.rpk"
    save(tabular_onnx(), path)
    features = ["a", "b", "c", "d"]
    table = rng.standard_normal((7, 4))                     # float64, as pandas makes it
    frame = pd.DataFrame(table, columns=features).assign(other="kept out")
    result = Predictor(path, columns={"X": features})(frame)
    want = VirtualMachine(load(path)).run({"X": table.astype(np.float32)})
    assert list(result.columns) == ["scores", "label"]
    np.testing.assert_array_equal(result["label"].to_numpy(), want["label"])
    np.testing.assert_array_equal(np.stack(result["scores"].to_list()), want["scores"])
    with pytest.raises(InputError, match=r"columns for unknown input\(s\) \['x'\]"):
        Predictor(path, columns={"x": features})
