"""Datasets: generate, open, import, their arrays, and errors that name what is wrong."""

import os

import numpy as np
import pytest

import sagessd


def test_a_generated_dataset_opens_with_its_arrays(rmat):
    again = sagessd.Dataset(rmat.path)
    assert again.num_nodes == rmat.num_nodes == 2048
    assert again.num_classes == 5 and again.symmetric
    indptr = again.indptr()
    assert indptr.shape == (2049,) and indptr[-1] == again.num_edges
    assert again.features().shape == (2048, 8) and again.features().dtype == np.float32
    splits = [again.split(s) for s in ("train", "valid", "test")]
    assert sum(len(s) for s in splits) == 2048
    assert len(np.intersect1d(splits[0], splits[1])) == 0


def test_cora_imports_with_its_published_shape(cora):
    assert cora.num_nodes == 2708 and cora.num_edges == 10556 and cora.num_classes == 7
    assert cora.features().shape == (2708, 1433)
    assert len(cora.split("train")) == 140


def test_cora_imports_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ds = sagessd.Dataset.import_cora(tmp_path / "cora")
    assert ds.num_nodes == 2708


def test_errors_name_the_file_or_option(tmp_path):
    with pytest.raises(sagessd.Error, match="/no/such/dataset"):
        sagessd.Dataset("/no/such/dataset")
    with pytest.raises(sagessd.Error, match="nowhere.whl"):
        sagessd.Dataset.import_cora(tmp_path / "c", source=tmp_path / "nowhere.whl")
    with pytest.raises(ValueError, match="feature_dtype"):
        sagessd.Dataset.generate(tmp_path / "g", 4, feature_dtype="int8")
    with pytest.raises(ValueError, match="scale"):
        sagessd.Dataset.generate(tmp_path / "g", 0)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "manifest.toml").write_text("format_version = 1\nname = 3\n")
    with pytest.raises(sagessd.Error, match="manifest.toml"):
        sagessd.Dataset(bad)


def test_a_missing_array_is_named(tmp_path):
    ds = sagessd.Dataset.generate(tmp_path / "plain", 5)
    with pytest.raises(sagessd.Error, match="no features array"):
        ds.features()
    with pytest.raises(ValueError, match="split"):
        ds.split("training")
    assert os.path.isdir(ds.path)


def test_a_snap_edge_list_imports(tmp_path):
    edges = tmp_path / "edges.txt"
    edges.write_text("# a triangle and a tail\n0\t1\n1\t2\n2\t0\n2\t3\n")
    ds = sagessd.Dataset.import_snap(tmp_path / "snap", edges)
    assert ds.num_nodes == 4 and ds.num_edges == 8 and ds.symmetric
    assert sorted(ds.indices()[ds.indptr()[2]:ds.indptr()[3]].tolist()) == [0, 1, 3]
    with pytest.raises(ValueError, match="format"):
        sagessd._native.Dataset.import_graph(str(tmp_path / "x"), str(edges), "csv")
    with pytest.raises(sagessd.Error, match="nowhere.txt"):
        sagessd.Dataset.import_snap(tmp_path / "y", tmp_path / "nowhere.txt")
