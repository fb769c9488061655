#!/usr/bin/env bash
# Build a kind node image from what this project has already built, for a host that cannot pull
# kindest/node: the steps of kind's own images/base/Dockerfile and `kind build node-image`
# (pkg/build/nodeimage), done with mmdebstrap and docker instead of a Dockerfile and a pull.
#
#   build-node-image.sh IMAGE KIND_SOURCE KUBERNETES_BIN CONTAINERD_BIN ARCHIVE...
#
# IMAGE           the image to make, e.g. tas.local/kind-node:v1.36.3
# KIND_SOURCE     sigs.k8s.io/kind's module directory (its images/base/files are copied in)
# KUBERNETES_BIN  directory with kubeadm, kubelet and kubectl
# CONTAINERD_BIN  directory with containerd, containerd-shim-runc-v2 and ctr
# ARCHIVE...      image archives preloaded into the node's containerd (kubeadm's images)
#
# Where it differs from kind's base image, and why:
# - Debian bookworm's runc and CNI plugins (the packages the real-node cluster uses) instead of
#   runc and plugins built from GitHub, which this host cannot reach; no crictl and no
#   fuse-overlayfs snapshotter (nothing here uses them).
# - containerd does not lower oom_score_adj (OOMScoreAdjust dropped from its unit,
#   restrict_oom_score_adj = true): a host whose capability bounding set lacks CAP_SYS_RESOURCE
#   refuses every lowering, and each pod sandbox would die in runc. Elsewhere this only means
#   containerd is not shielded from the OOM killer.
# - No default CNI or storage manifest: kindnetd's and local-path-provisioner's images are not
#   on any source this host reaches. kind is told disableDefaultCNI, and the kind_cluster role
#   sets up the nodes' pod network (roles/kind_cluster/tasks/network.yml).
set -euo pipefail

image=$1 kind_source=$2 kubernetes_bin=$3 containerd_bin=$4
shift 4
work=$(mktemp -d)
container=""
cleanup() {
  [ -z "$container" ] || docker rm -f -v "$container" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

files=$kind_source/images/base/files
root=$work/rootfs

# The base image: kind's package list (less the storage e2e packages), with runc and the CNI
# plugins from Debian.
mmdebstrap --quiet --variant=apt \
  --include=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,bash,ca-certificates,curl,jq,procps,runc,containernetworking-plugins,python3,python3-venv \
  bookworm "$root" "deb http://deb.debian.org/debian bookworm main"

install -d -m 0755 "$root/kind/bin" "$root/etc/containerd" "$root/etc/default" "$root/etc/sysctl.d" \
  "$root/etc/systemd/system/kubelet.service.d" "$root/etc/kubernetes/manifests" "$root/opt/cni" "$root/LICENSES"
install -m 0755 "$files"/usr/local/bin/* "$root/usr/local/bin/"
install -m 0644 "$files"/kind/README.txt "$root/kind/"
install -m 0755 "$files"/kind/bin/* "$root/kind/bin/"
install -m 0644 "$files"/LICENSES/* "$root/LICENSES/"
install -m 0644 "$files"/etc/crictl.yaml "$root/etc/"
install -m 0644 "$files"/etc/containerd/config.toml "$root/etc/containerd/"
install -m 0644 "$files"/etc/default/kubelet "$root/etc/default/"
install -m 0644 "$files"/etc/sysctl.d/* "$root/etc/sysctl.d/"
install -m 0644 "$files"/etc/systemd/system/kubelet.service "$files"/etc/systemd/system/kubelet.slice \
  "$files"/etc/systemd/system/containerd.service "$files"/etc/systemd/system/undo-mount-hacks.service \
  "$root/etc/systemd/system/"
install -m 0644 "$files"/etc/systemd/system/kubelet.service.d/* "$root/etc/systemd/system/kubelet.service.d/"
ln -s /usr/lib/cni "$root/opt/cni/bin"

# No fuse-overlayfs snapshotter here; and no lowering of oom_score_adj (see above).
sed -i -e '/^\[proxy_plugins/,/^  address/d' \
  -e 's/^  restrict_oom_score_adj = false/  restrict_oom_score_adj = true/' "$root/etc/containerd/config.toml"
sed -i -e '/^OOMScoreAdjust=/d' "$root/etc/systemd/system/containerd.service"

install -m 0755 "$containerd_bin"/containerd "$containerd_bin"/containerd-shim-runc-v2 "$containerd_bin"/ctr \
  "$root/usr/local/bin/"
"$containerd_bin/ctr" oci spec \
  | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
  | jq 'del(.process.rlimits)' >"$root/etc/containerd/cri-base.json"

# kind's cleanups of the systemd units, as its Dockerfile does them.
find "$root/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$root"/lib/systemd/system/multi-user.target.wants/* "$root"/etc/systemd/system/*.wants/* \
  "$root"/lib/systemd/system/local-fs.target.wants/* "$root"/lib/systemd/system/sockets.target.wants/*udev* \
  "$root"/lib/systemd/system/sockets.target.wants/*initctl* "$root"/lib/systemd/system/basic.target.wants/*
echo "ReadKMsg=no" >>"$root/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$root/sbin/init"
chroot "$root" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
chroot "$root" systemctl mask systemd-binfmt.service >/dev/null 2>&1

# What `kind build node-image` adds: the Kubernetes binaries, /kind/version, the images.
install -m 0755 "$kubernetes_bin"/kubeadm "$kubernetes_bin"/kubelet "$kubernetes_bin"/kubectl "$root/usr/bin/"
"$kubernetes_bin/kubeadm" version -o short >"$root/kind/version"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*

base=$image-base
tar -C "$root" --numeric-owner -c . | docker import \
  --change 'ENV container=docker' \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' - "$base" >/dev/null

# Preload the images into the node's containerd, in a container of the base image, then commit.
container=kind-build-$$
docker run -d --name "$container" --entrypoint=sleep --security-opt seccomp=unconfined "$base" infinity >/dev/null
docker exec -d "$container" containerd
for _ in $(seq 60); do docker exec "$container" ctr version >/dev/null 2>&1 && break; sleep 1; done
for archive in "$@"; do
  docker exec -i "$container" ctr --namespace=k8s.io images import --label=io.cri-containerd.pinned=pinned --all-platforms --no-unpack --digests - <"$archive" >/dev/null
done
# containerd's sandbox image is the one kind's configuration names.
sandbox=$(sed -n 's/^ *sandbox_image = "\(.*\)"/\1/p' "$root/etc/containerd/config.toml")
pause=$(docker exec "$container" ctr --namespace=k8s.io images list --quiet | grep '^registry.k8s.io/pause:' | head -n 1)
[ "$pause" = "$sandbox" ] || docker exec "$container" ctr --namespace=k8s.io images tag --force "$pause" "$sandbox" >/dev/null
docker exec "$container" pkill containerd
for _ in $(seq 30); do docker exec "$container" pgrep containerd >/dev/null || break; sleep 1; done
docker commit --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' "$container" "$image" >/dev/null
docker rm -f -v "$container" >/dev/null
container=""
docker image rm "$base" >/dev/null
echo "built $image"
