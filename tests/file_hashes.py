"""Every file under a directory with its SHA-256, to compare a directory before and after.

    python tests/file_hashes.py snapshot FILE DIR...   write each DIR's hashes to FILE (JSON)

The real-node scenario snapshots every control plane's /etc/kubernetes as kubeadm wrote it,
before site.yml; test_kubeadm_files.py compares them after playbooks/uninstall.yml.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import sys


def hashes(root: pathlib.Path) -> dict[str, str]:
    return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(root.rglob("*")) if path.is_file()}


def differences(before: dict[str, str], after: dict[str, str]) -> list[str]:
    return ([f"added {name}" for name in sorted(set(after) - set(before))]
            + [f"removed {name}" for name in sorted(set(before) - set(after))]
            + [f"changed {name}" for name in sorted(set(before) & set(after)) if before[name] != after[name]])


if __name__ == "__main__":
    if len(sys.argv) < 4 or sys.argv[1] != "snapshot":
        sys.exit(__doc__)
    missing = [directory for directory in sys.argv[3:] if not pathlib.Path(directory).is_dir()]
    if missing:  # a wrong path would snapshot nothing, and the comparison would fail far from here
        sys.exit(f"file_hashes.py: not a directory: {', '.join(missing)}")
    snapshot = {directory: hashes(pathlib.Path(directory)) for directory in sys.argv[3:]}
    pathlib.Path(sys.argv[2]).write_text(json.dumps(snapshot, indent=1))
