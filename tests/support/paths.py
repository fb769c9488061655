"""Where things are: the repository, its test fixtures, and the state directories of the local
and real-node clusters."""

from __future__ import annotations

import os
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
DEFAULT_CLUSTER_DIR = pathlib.Path.home() / ".local" / "state" / "tas-local-cluster"
REAL_CLUSTER_DIR = pathlib.Path(
    os.environ.get("TAS_REAL_CLUSTER_DIR", pathlib.Path.home() / ".local" / "state" / "tas-real-cluster")
)
