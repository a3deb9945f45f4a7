"""Fixtures of the package's tests: a generated R-MAT with features and labels, and Cora."""

import numpy as np
import pytest

import sagessd


@pytest.fixture(scope="session")
def rmat(tmp_path_factory):
    """2^11 nodes, f32 features of 8 values, 5 classes."""
    path = tmp_path_factory.mktemp("rmat") / "ds"
    return sagessd.Dataset.generate(path, 11, edge_factor=8, seed=3, feature_dim=8, classes=5)


@pytest.fixture(scope="session")
def cora(tmp_path_factory):
    """Cora, imported from the wheel scripts/setup.sh downloads (found from any folder)."""
    return sagessd.Dataset.import_cora(tmp_path_factory.mktemp("cora") / "ds")


def neighbours(ds, v):
    """Node v's neighbour list, read straight from the dataset's arrays (not through sagessd's
    samplers): the oracle the tests check sampled edges against."""
    indptr, indices = ds.indptr(), ds.indices()
    return np.asarray(indices[indptr[v]:indptr[v + 1]], dtype=np.int64)
