"""Check the built intel.tas tarball: the changelog's last release, only what users need.

Usage: check_collection_build.py COLLECTION_DIR BUILD_DIR. galaxy.yml's version must be the last
release in changelogs/changelog.yaml, and BUILD_DIR/intel-tas-<version>.tar.gz must hold the
license, readme, changelog and runtime metadata, and no tests, caches or compiled files.
"""

from __future__ import annotations

import pathlib
import sys
import tarfile

import yaml
from packaging.version import Version

REQUIRED = ("MANIFEST.json", "FILES.json", "LICENSE", "README.md", "CHANGELOG.rst", "meta/runtime.yml")


def forbidden(name: str) -> bool:
    parts = name.split("/")
    return parts[0] == "tests" or "__pycache__" in parts or name.endswith((".pyc", ".pyo")) or ".ansible" in parts


def main(collection: pathlib.Path, build: pathlib.Path) -> list[str]:
    galaxy = yaml.safe_load((collection / "galaxy.yml").read_text())
    releases = yaml.safe_load((collection / "changelogs" / "changelog.yaml").read_text())["releases"]
    last = str(max(releases, key=Version))
    problems = []
    if str(galaxy["version"]) != last:
        problems.append(f"galaxy.yml version {galaxy['version']} is not the changelog's last release {last}")
    tarball = build / f"{galaxy['namespace']}-{galaxy['name']}-{galaxy['version']}.tar.gz"
    if not tarball.exists():
        return problems + [f"{tarball} was not built"]
    with tarfile.open(tarball) as archive:
        names = [member.name.removeprefix("./") for member in archive.getmembers()]
    problems += [f"{tarball.name} holds {name}" for name in names if forbidden(name)]
    problems += [f"{tarball.name} lacks {name}" for name in REQUIRED if name not in names]
    return problems


if __name__ == "__main__":
    found = main(pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]))
    for problem in found:
        print(problem, file=sys.stderr)
    print("collection build: " + ("FAILED" if found else "version and contents as expected"))
    sys.exit(1 if found else 0)
