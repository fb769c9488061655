#!/usr/bin/env bash
# Build the tas-extender image archive from the project's own source, once per source state.
#   build-extender-image.sh SOURCE_DIR PYTHON_ROOTFS.tar OUT_DIR IMAGE_NAME PYTHON OCI_IMAGE_PY CONSTRAINTS
# Prints the archive's path, after "built" when it had to be built. The archive's name carries
# a hash of the image's name, the source, the pins and the base, so an edit to the app gives a
# new image, never a stale one, and two names never share an archive. The image holds the package and what it needs at run time, at the versions
# CONSTRAINTS pins (the repository's constraints.txt), and nothing else.
set -euo pipefail
src=$(cd "$1" && pwd) rootfs=$2 out_dir=$3 name=$4 python=$5 oci_image=$6 constraints=$7

# What the Dockerfile copies: the package's metadata and code, no build output or caches.
files() ( cd "$src" && find pyproject.toml README.md tas_extender -type f -not -path '*/__pycache__/*' -print0 | sort -z )
hash=$( { echo "$name"; basename "$rootfs"; sha256sum <"$constraints"; files | (cd "$src" && xargs -0 sha256sum); } \
  | sha256sum | cut -c1-16)
out=$out_dir/tas-extender-$hash.tar
if [[ -s $out ]]; then echo "$out"; exit 0; fi

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir "$stage/src"
files | (cd "$src" && xargs -0 cp --parents -t "$stage/src")
# The image's Python is Debian bookworm's 3.11, the same minor version and C library as the
# Python that resolves the wheels here, so binary wheels fit.
"$python" -m pip install --quiet --no-cache-dir --disable-pip-version-check --target "$stage/site" \
  --constraint "$constraints" "$stage/src"
rm -rf "$stage/site/bin"
printf '#!/usr/bin/python3\nimport sys\nfrom tas_extender.cli import main\nsys.exit(main())\n' >"$stage/tas-extender"
mkdir -p "$out_dir"
"$python" "$oci_image" build "$name" "$out" --base "$rootfs" \
  --tree "$stage/site:/usr/local/lib/python3.11/dist-packages" \
  --file "$stage/tas-extender:/usr/local/bin/tas-extender:0755" \
  --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 \
  --user 65532:65532 --entrypoint '["/usr/local/bin/tas-extender", "serve"]' >/dev/null
echo "built $out"
