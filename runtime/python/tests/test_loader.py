"""Every sampler on every in-process storage target: the subgraphs are valid neighbour samples
of the stored graph (checked against its arrays, not against sagessd), every sampler draws the
same ones, features and labels are the dataset's, and errors are clear."""

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import sagessd
from conftest import neighbours

FANOUTS = [6, 3]
ON_FILES = ["memory", "mmap", "direct", "uring", "agnes", "hyperbatch"]
ON_DEVICE = ["agnes", "hyperbatch", "isp", "isp-ids", "isp-hyperbatch"]
CASES = [(k, "files") for k in ON_FILES] + [(k, "emulator") for k in ON_DEVICE]


def test_every_registered_sampler_is_tested_and_the_cli_names_the_same_ones():
    """``sagessd.samplers()`` is the registry's list: each one is among this file's cases, and
    ``sagessd sample --help`` lists exactly these names (the CLI the suite built: target/debug,
    or $SAGESSD_CLI)."""
    names = sagessd.samplers()
    assert names == sagessd.SAMPLERS
    assert set(names) == set(ON_FILES) | set(ON_DEVICE), "a sampler this file does not test"
    root = Path(__file__).resolve().parents[3]
    cli = Path(os.environ.get("SAGESSD_CLI", root / "target" / "debug" / "sagessd"))
    assert cli.is_file(), f"no sagessd CLI at {cli} (cargo build -p sagessd-cli, or set SAGESSD_CLI)"
    help_text = subprocess.run([str(cli), "sample", "--help"], check=True, capture_output=True,
                               text=True).stdout
    section = help_text[help_text.index("--sampler"):]
    block = section[section.index("Possible values:"):].split("\n\n")[0]
    assert tuple(re.findall(r"^\s*- ([a-z-]+)", block, re.M)) == names


def options():
    # Small AGNES blocks and buffers, so that the block samplers read and evict.
    return dict(block_kb=4, graph_buffer_mb=1, cache_mb=1, hyperbatch=4, prefetch=2,
                max_batch_size=64, labels=True)


def check_sample(ds, batch, targets):
    """A valid sample: targets first, blocks nested, every edge in the graph, each destination
    with min(degree, fanout) distinct neighbours."""
    unique_targets = list(dict.fromkeys(int(t) for t in targets))
    nodes = batch.nodes
    assert list(nodes[:len(unique_targets)]) == unique_targets
    assert len(np.unique(nodes)) == len(nodes)
    assert batch.batch_size == len(unique_targets)
    prev_src = len(unique_targets)
    for hop, (block, fanout) in enumerate(zip(batch.blocks, FANOUTS)):
        assert block.num_dst == prev_src, f"hop {hop}: destinations are the last hop's sources"
        assert block.indptr.shape == (block.num_dst + 1,)
        assert block.indices.max(initial=0) < block.num_src <= len(nodes)
        for j in range(block.num_dst):
            src = block.indices[block.indptr[j]:block.indptr[j + 1]]
            drawn = nodes[src]
            graph = neighbours(ds, nodes[j])
            assert len(drawn) == min(len(graph), fanout)
            assert len(np.unique(drawn)) == len(drawn)
            assert np.isin(drawn, graph).all(), f"hop {hop}: an edge not in the graph"
        edge_index = block.edge_index()
        assert edge_index.shape == (2, len(block.indices))
        prev_src = block.num_src
    assert prev_src == len(nodes)


@pytest.mark.parametrize("kind,storage", CASES)
def test_every_sampler_draws_valid_samples_with_the_datasets_rows(rmat, kind, storage):
    loader = sagessd.Loader(rmat, kind, FANOUTS, storage=storage, features="agnes", **options())
    assert loader.description.startswith("dataset ")
    train = np.asarray(rmat.split("train"))
    batches = list(loader.epoch(train[:256], 64, seed=5))
    assert len(batches) == 4 and loader.pending == 0
    x, y = rmat.features(), rmat.labels()
    for b in batches:
        check_sample(rmat, b, b.nodes[:b.batch_size])
        assert np.array_equal(b.features, x[b.nodes])
        assert np.array_equal(b.labels, y[b.nodes[:b.batch_size]])
    stats = loader.stats()
    assert stats["minibatches"] == 4 and stats["feature_bytes"] > 0
    if storage == "emulator":
        assert stats["device_ns"] > 0 and stats["nand_pages_read"] is not None


def test_every_sampler_draws_the_same_subgraphs(rmat):
    targets = np.asarray(rmat.split("train"))[:40]
    first = None
    for kind, storage in CASES:
        b = sagessd.Loader(rmat, kind, FANOUTS, storage=storage, **options()).sample(targets, 9)
        flat = [b.nodes] + [a for blk in b.blocks for a in (blk.indptr, blk.indices)]
        if first is None:
            first = flat
        else:
            assert all(np.array_equal(p, q) for p, q in zip(first, flat)), f"{kind} {storage}"
    # Another seed is another sample: the comparison can fail.
    other = sagessd.Loader(rmat, "memory", FANOUTS).sample(targets, 10)
    assert not np.array_equal(other.blocks[0].indices, first[2])


def test_bgl_features_and_float16(tmp_path):
    ds = sagessd.Dataset.generate(tmp_path / "f16", 9, feature_dim=6, feature_dtype="float16")
    loader = sagessd.Loader(ds, "direct", [4], features="bgl", cache_mb=1)
    b = loader.sample([1, 2, 3])
    assert b.features.dtype == np.float16
    assert np.array_equal(b.features, ds.features()[b.nodes])


def test_bad_options_and_requests_are_errors(rmat):
    with pytest.raises(ValueError, match="sampler \"nope\""):
        sagessd.Loader(rmat, "nope", FANOUTS)
    with pytest.raises(sagessd.Error, match="needs a device"):
        sagessd.Loader(rmat, "isp", FANOUTS)
    with pytest.raises(sagessd.Error, match="floppy"):
        sagessd.Loader(rmat, "agnes", FANOUTS, storage="floppy")
    with pytest.raises(sagessd.Error, match="/no/hw.toml"):
        sagessd.Loader(rmat, "isp", FANOUTS, storage="emulator:/no/hw.toml")
    with pytest.raises(ValueError, match="fanout"):
        sagessd.Loader(rmat, "mmap", [0])
    with pytest.raises(sagessd.Error, match="layers"):
        sagessd.Loader(rmat, "mmap", [2] * 5)
    with pytest.raises(ValueError, match="features"):
        sagessd.Loader(rmat, "mmap", FANOUTS, features="lru")
    with pytest.raises(sagessd.Error, match="prefetch 1000000"):
        sagessd.Loader(rmat, "mmap", FANOUTS, prefetch=10**6)
    for kind, storage in [("mmap", "files"), ("isp", "emulator")]:
        loader = sagessd.Loader(rmat, kind, FANOUTS, storage=storage)
        with pytest.raises(sagessd.Error, match="not below the node count"):
            loader.sample([0, rmat.num_nodes])
        with pytest.raises(ValueError, match="negative"):
            loader.sample([-1])
        # The loader still works after a refused minibatch.
        assert loader.sample([0, 1]).nodes[:2].tolist() == [0, 1]


def test_a_refusing_device_is_an_error_with_its_status(rmat, tmp_path):
    # An emulated SSD whose firmware keeps at most 64 nodes a subgraph refuses larger ones.
    hw = tmp_path / "small.toml"
    root = Path(__file__).resolve().parents[3]
    text = (root / "hw-configs" / "cosmos-plus.toml").read_text()
    for line in ["max_subgraph_nodes = 2_097_152", "max_targets = 16_384"]:
        assert line in text
        text = text.replace(line, line.split("=")[0] + "= 64")
    hw.write_text(text)
    loader = sagessd.Loader(rmat, "isp", FANOUTS, storage=f"emulator:{hw}")
    with pytest.raises(sagessd.Error, match="NS_"):
        loader.sample(np.arange(32))
