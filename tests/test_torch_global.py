"""``shuffle="global"``: one permutation of every record of the selection per epoch,
deterministic in (seed, epoch), each record once across ranks x workers (real
DataLoaders with worker processes)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from torch.utils.data import DataLoader

from tfrecord_io.dataset.permutation import Permutation
from tfrecord_io.errors import IndexFileError
from tfrecord_io.torch import TFRecordBatchDataset, TFRecordDataset

from tests.torch_data import write_examples, write_indexed_parts

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

SIZES = (150, 40, 110)
TOTAL = sum(SIZES)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    return write_indexed_parts(str(tmp_path_factory.mktemp("global")), SIZES, "g")


def order_of(ds, workers=0, batch_size=None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(ds, batch_size=batch_size, num_workers=workers)
        return [int(i) for b in loader for i in np.asarray(b["id"]).reshape(-1)]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 7, 64, 65, 1000, 4099])
def test_permutation_is_a_bijection(n):
    p = Permutation(n, "seed:1:epoch:0")
    got = p.permute(np.arange(n))
    assert sorted(got.tolist()) == list(range(n))
    # evaluated in pieces, it agrees with the whole
    if n > 3:
        assert p.permute(np.arange(n // 3, n)).tolist() == got[n // 3 :].tolist()


def test_permutation_depends_on_the_key_only():
    a = Permutation(1000, "k1").permute(np.arange(1000))
    assert a.tolist() == Permutation(1000, "k1").permute(np.arange(1000)).tolist()
    b = Permutation(1000, "k2").permute(np.arange(1000))
    assert a.tolist() != b.tolist()
    assert a.tolist() != list(range(1000))


def test_an_epoch_is_one_permutation_of_all_records(shards):
    ds = TFRecordDataset(shards, "auto", ["id"], shuffle="global", seed=5)
    got = order_of(ds)
    assert sorted(got) == list(range(TOTAL))
    # a permutation of the whole selection, not a local shuffle: records travel across
    # the whole epoch (a buffer of q records moves a record at most q places earlier)
    moved_earlier = max(i - pos for pos, i in enumerate(got))
    assert moved_earlier > TOTAL // 2
    # neighbours in the output come from all files, not one file at a time
    first_files = {next(k for k in range(3) if i < sum(SIZES[: k + 1])) for i in got[:20]}
    assert first_files == {0, 1, 2}


def test_the_order_is_deterministic_in_seed_and_epoch(shards):
    def run(seed, epoch):
        ds = TFRecordDataset(shards, "auto", ["id"], shuffle="global", seed=seed)
        ds.set_epoch(epoch)
        return order_of(ds)

    assert run(1, 0) == run(1, 0)
    assert run(1, 0) != run(1, 1)
    assert run(1, 0) != run(2, 0)


@pytest.mark.parametrize("workers", [0, 2])
def test_each_record_once_across_ranks_and_workers(shards, workers):
    got = []
    for rank in range(2):
        ds = TFRecordDataset(shards, "auto", ["id"], shuffle="global", seed=3, rank=rank, world_size=2)
        got += order_of(ds, workers, batch_size=8)
    assert sorted(got) == list(range(TOTAL))


def test_batches_are_the_same_whatever_the_number_of_workers(shards):
    """The permutation is cut into batches before the workers take theirs: the same
    batches come out with 0 or 2 workers (only their interleaving differs)."""

    def batches(workers):
        ds = TFRecordBatchDataset(shards, "auto", {"id": "int"}, batch_size=16, shuffle="global", seed=9)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return sorted(
                tuple(b["id"].reshape(-1).tolist()) for b in DataLoader(ds, batch_size=None, num_workers=workers)
            )

    one, two = batches(0), batches(2)
    assert one == two
    assert sorted(i for b in one for i in b) == list(range(TOTAL))


def test_persistent_workers_get_a_new_permutation_each_pass(shards):
    ds = TFRecordBatchDataset(shards, "auto", {"id": "int"}, batch_size=50, shuffle="global", seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True)
        epochs = [sorted(tuple(b["id"].reshape(-1).tolist()) for b in loader) for _ in range(2)]
    assert epochs[0] != epochs[1]
    for e in epochs:
        assert sorted(i for b in e for i in b) == list(range(TOTAL))


def test_global_shuffle_needs_indexes_and_a_seed_across_ranks(shards, tmp_path):
    bare = str(tmp_path / "bare.tfrecord")
    write_examples(bare, range(10))
    with pytest.raises(IndexFileError, match="shuffle='global'.*indexed") as err:
        list(TFRecordDataset([shards[0], bare], [shards[0] + ".index", None], ["id"], shuffle="global", seed=1))
    assert bare in str(err.value)
    with pytest.raises(ValueError, match="needs seed"):
        list(TFRecordDataset(shards, "auto", ["id"], shuffle="global", rank=0, world_size=2))
    with pytest.raises(ValueError, match="shuffle='random'"):
        TFRecordDataset(shards, "auto", ["id"], shuffle="random")


def test_record_ranges_of_files_are_respected(shards):
    """A slice of files (as a built dataset's selection gives) is permuted alone."""
    from tfrecord_io.format.sharding import describe_files

    infos = describe_files(shards, [p + ".index" for p in shards])
    infos = [infos[0].with_records(10, 20), infos[2].with_records(100, 110)]
    got = order_of(TFRecordDataset(infos, None, ["id"], shuffle="global", seed=2))
    assert sorted(got) == list(range(10, 20)) + list(range(290, 300))
