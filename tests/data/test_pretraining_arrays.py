"""data/pretraining_arrays.py: the GPU bundle's compact form of our shards. Every example of real
shards comes back exactly; examples outside the packer's layout are refused; the batch stream is
deterministic, covers every example once per epoch and resumes exactly."""
import numpy as np
import pytest

from data.errors import DataError
from data.pretraining_arrays import array_batches, load_arrays, pack, unpack, write_arrays
from data.tfrecord_io import find_shards, read_examples
from tests.pretrain.test_run_pretraining import SEQ, tiny_data  # noqa: F401 (fixture)


def test_shards_round_trip_exactly(tiny_data, tmp_path):  # noqa: F811
    files = find_shards(tiny_data[0])
    path = str(tmp_path / "train.npz")
    count = write_arrays(files, path, SEQ)
    ours = load_arrays(path)
    ref = [read_examples(f, SEQ) for f in files]
    assert count == len(ours["input_ids"]) == sum(len(r["input_ids"]) for r in ref) > 0
    for name in ("input_ids", "input_mask", "segment_ids"):
        np.testing.assert_array_equal(ours[name], np.concatenate([r[name] for r in ref]))
        assert ours[name].dtype == np.int32
    assert (ours["segment_ids"] == 1).any()     # two-segment examples are among them


def test_ram_filesystem(tiny_data):  # noqa: F811
    pytest.importorskip("tensorflow")
    files = find_shards(tiny_data[0])
    write_arrays(files[:1], "ram://arrays/train.npz", SEQ)
    assert load_arrays("ram://arrays/train.npz")["input_ids"].shape[1] == SEQ


def test_refuses_examples_outside_the_packer_layout():
    ids = np.array([[101, 5, 102, 6, 102, 0]])
    good = {"input_ids": ids, "input_mask": np.array([[1, 1, 1, 1, 1, 0]]),
            "segment_ids": np.array([[0, 0, 0, 1, 1, 0]])}
    assert pack(good)["input_ids"].dtype == np.uint16
    np.testing.assert_array_equal(unpack(pack(good))["segment_ids"], good["segment_ids"])
    bad = dict(good, segment_ids=np.array([[0, 1, 0, 1, 1, 0]]))
    with pytest.raises(DataError, match=r"shard-7: record 0 is not \[CLS\] A \[SEP\]"):
        pack(bad, where="shard-7")


def test_not_an_array_file(tmp_path):
    path = tmp_path / "x.npz"
    np.savez(path, something=np.zeros(3))
    with pytest.raises(DataError, match=f"{path}: no array"):
        load_arrays(str(path))


def test_batches_cover_each_epoch_and_resume():
    n = 10
    arrays = {"input_ids": np.arange(n)[:, None].repeat(4, axis=1).astype(np.int32),
              "label_ids": np.arange(n).astype(np.float32)}
    stream = array_batches(arrays, 4, seed=3)
    batches = [next(stream) for _ in range(5)]          # 20 examples: two epochs
    rows = np.concatenate([b["input_ids"][:, 0] for b in batches])
    assert sorted(rows[:10]) == list(range(n)) and sorted(rows[10:]) == list(range(n))
    assert list(batches[1]["example_id"]) == [4, 5, 6, 7]
    np.testing.assert_array_equal(batches[2]["label_ids"], batches[2]["input_ids"][:, 0])
    resumed = array_batches(arrays, 4, seed=3, skip_batches=3)
    for expected in batches[3:]:
        got = next(resumed)
        for key in expected:
            np.testing.assert_array_equal(got[key], expected[key])
    other = next(array_batches(arrays, 4, seed=4))
    assert list(other["input_ids"][:, 0]) != list(batches[0]["input_ids"][:, 0])
