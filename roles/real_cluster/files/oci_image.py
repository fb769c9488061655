#!/usr/bin/env python3
"""Write a single-layer OCI image archive that `ctr images import` loads, with no registry.

    oci_image.py build NAME OUT.tar [--base ROOTFS.tar] [--file SRC:DEST[:MODE]]...
        [--tree SRC_DIR:DEST] [--dir DEST[:MODE[:UID]]]... [--entrypoint JSON] [--cmd JSON]
        [--user UID:GID] [--env K=V]... [--workdir DIR]
    oci_image.py digest OUT.tar      the manifest digest ctr will report for the image
    oci_image.py name OUT.tar        the image name the archive carries
    oci_image.py sync CTR ADDRESS OUT.tar...   import each archive whose image is missing or
                                     differs in the containerd at ADDRESS; prints "changed"

The layer is an uncompressed tar, so its digest is also its diff_id. Entries added with
--file and --dir get a fixed owner and time, so the same inputs give the same digest and a
re-import is a no-op. The image name travels in index.json's io.containerd.image.name
annotation, which is where `ctr images import` takes it from.
"""
from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

EPOCH = 0  # fixed mtime of the entries this script adds


def _sha256_file(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _parent_dirs(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


def _tree_files(trees: list[str]) -> list[str]:
    """--tree SRC:DEST as the --file entries of every regular file and symlink under SRC."""
    specs = []
    for tree in trees:
        src, dest = tree.split(":")
        for root, _dirs, names in os.walk(src):
            for name in sorted(names):
                path = os.path.join(root, name)
                if "__pycache__" in path:
                    continue
                specs.append(f"{path}:{dest.rstrip('/')}/{os.path.relpath(path, src)}")
    return specs


def _write_layer(layer: str, base: str | None, files: list[str], dirs: list[str]) -> None:
    existing: set[str] = set()
    if base:
        shutil.copyfile(base, layer)
        with tarfile.open(base) as t:
            existing = {m.name.lstrip("./").rstrip("/") for m in t.getmembers()}
    with tarfile.open(layer, "a" if base else "w", format=tarfile.PAX_FORMAT) as t:

        def add_dir(name: str, mode: int = 0o755, uid: int = 0) -> None:
            if name in existing:
                return
            existing.add(name)
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime, info.uid, info.gid = tarfile.DIRTYPE, mode, EPOCH, uid, uid
            t.addfile(info)

        for spec in dirs:
            dest, *rest = spec.split(":")
            dest = dest.strip("/")
            for parent in _parent_dirs(dest):
                add_dir(parent)
            add_dir(dest, int(rest[0], 8) if rest else 0o755, int(rest[1]) if len(rest) > 1 else 0)
        for spec in files:
            src, dest, *mode = spec.split(":")
            dest = dest.lstrip("/")
            for parent in _parent_dirs(dest):
                add_dir(parent)
            info = t.gettarinfo(src, arcname=dest)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = EPOCH
            if mode:
                info.mode = int(mode[0], 8)
            with open(src, "rb") as f:
                t.addfile(info, f)


def build(args: argparse.Namespace) -> str:
    out_dir = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(dir=out_dir)
    try:
        layer = os.path.join(tmp, "layer.tar")
        _write_layer(layer, args.base, args.file + _tree_files(args.tree), args.dir)
        layer_digest, layer_size = _sha256_file(layer), os.path.getsize(layer)
        config: dict = {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", *args.env],
            "WorkingDir": args.workdir,
        }
        if args.entrypoint:
            config["Entrypoint"] = json.loads(args.entrypoint)
        if args.cmd:
            config["Cmd"] = json.loads(args.cmd)
        if args.user:
            config["User"] = args.user
        image_config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": config,
                "rootfs": {"type": "layers", "diff_ids": ["sha256:" + layer_digest]},
            },
            sort_keys=True,
        ).encode()
        manifest = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {
                    "mediaType": "application/vnd.oci.image.config.v1+json",
                    "digest": "sha256:" + hashlib.sha256(image_config).hexdigest(),
                    "size": len(image_config),
                },
                "layers": [
                    {
                        "mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": "sha256:" + layer_digest,
                        "size": layer_size,
                    }
                ],
            },
            sort_keys=True,
        ).encode()
        manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        index = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [
                    {
                        "mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": manifest_digest,
                        "size": len(manifest),
                        "platform": {"architecture": "amd64", "os": "linux"},
                        "annotations": {
                            "io.containerd.image.name": args.name,
                            "org.opencontainers.image.ref.name": args.name.rsplit(":", 1)[-1],
                        },
                    }
                ],
            },
            sort_keys=True,
        ).encode()
        partial = os.path.join(tmp, "image.tar")
        with tarfile.open(partial, "w") as t:

            def add_bytes(name: str, data: bytes) -> None:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, EPOCH
                t.addfile(info, io.BytesIO(data))

            add_bytes("oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
            add_bytes("index.json", index)
            add_bytes("blobs/sha256/" + manifest_digest.split(":")[1], manifest)
            add_bytes("blobs/sha256/" + hashlib.sha256(image_config).hexdigest(), image_config)
            t.add(layer, arcname="blobs/sha256/" + layer_digest)
        os.replace(partial, args.out)
        return manifest_digest
    finally:
        shutil.rmtree(tmp)


def _entry(path: str) -> dict:
    with tarfile.open(path) as t:
        member = t.extractfile("index.json")
        if member is None:
            raise SystemExit(f"{path}: no index.json, not an OCI image archive")
        return json.load(member)["manifests"][0]


def digest(path: str) -> str:
    return _entry(path)["digest"]


def name(path: str) -> str:
    return _entry(path)["annotations"]["io.containerd.image.name"]


def sync(ctr: str, address: str, archives: list[str]) -> bool:
    """Import the archives whose image containerd lacks or has with another digest."""
    base = [ctr, "--address", address, "--namespace", "k8s.io"]
    listing = subprocess.run([*base, "images", "ls"], check=True, capture_output=True, text=True).stdout
    present = {}
    for line in listing.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3:
            present[fields[0]] = fields[2]
    changed = False
    for archive in archives:
        with tarfile.open(archive) as t:
            member = t.extractfile("index.json")
            entry = json.load(member)["manifests"][0] if member else {}
        name = entry.get("annotations", {}).get("io.containerd.image.name", "")
        if name and present.get(name) == entry["digest"]:
            continue
        subprocess.run([*base, "images", "import", "--platform", "linux/amd64", archive], check=True,
                       stdout=subprocess.DEVNULL)
        changed = True
    return changed


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build")
    b.add_argument("name")
    b.add_argument("out")
    b.add_argument("--base")
    b.add_argument("--file", action="append", default=[])
    b.add_argument("--tree", action="append", default=[])
    b.add_argument("--dir", action="append", default=[])
    b.add_argument("--entrypoint")
    b.add_argument("--cmd")
    b.add_argument("--user")
    b.add_argument("--env", action="append", default=[])
    b.add_argument("--workdir", default="/")
    d = sub.add_parser("digest")
    d.add_argument("archive")
    n = sub.add_parser("name")
    n.add_argument("archive")
    s = sub.add_parser("sync")
    s.add_argument("ctr")
    s.add_argument("address")
    s.add_argument("archives", nargs="+")
    args = parser.parse_args(argv)
    if args.command == "build":
        print(build(args))
    elif args.command == "digest":
        print(digest(args.archive))
    elif args.command == "name":
        print(name(args.archive))
    elif sync(args.ctr, args.address, args.archives):
        print("changed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
