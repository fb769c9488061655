"""Go programs of the benchmarks (standard library only, so they build offline), built with the
Go toolchain on PATH once per source and Go version: each binary is cached under
~/.cache/tas-bench, named by a hash of both."""

from __future__ import annotations

import functools
import hashlib
import os
import pathlib
import shutil
import subprocess
import tempfile

CACHE = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "tas-bench"


@functools.cache  # once per run: the latency stage asks for the load client before every sample
def binary(source: pathlib.Path, name: str) -> pathlib.Path:
    """The program in `source` built as `name`, unless one of the same source and Go version exists."""
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(f"{name} needs the Go toolchain (go 1.26) on PATH")
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOPROXY": "off", "GOFLAGS": "-mod=mod", "CGO_ENABLED": "0"}
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True,
                             env=env).stdout.strip()
    digest = hashlib.sha256(version.encode())
    for path in sorted(source.rglob("*")):
        if path.is_file():
            digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes())
    built_binary = CACHE / f"{name}-{digest.hexdigest()[:16]}"
    if built_binary.exists():
        return built_binary
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as tmp:
        built = pathlib.Path(tmp) / name
        result = subprocess.run([go, "build", "-trimpath", "-o", str(built), "."], cwd=source, env=env,
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"go build of {source} failed:\n{result.stderr}")
        built.replace(built_binary)  # whole or not at all: a half-written binary is never found
    return built_binary
