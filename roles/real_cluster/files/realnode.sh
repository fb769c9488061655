#!/usr/bin/env bash
# The plumbing that makes one host look like several machines to Kubernetes.
#
# Each node gets a network namespace (its own interfaces, routes, nftables and iptables rules,
# sysctls), a mount namespace (its own /etc/kubernetes, /var/lib/kubelet, containerd state,
# /tmp ...), a UTS namespace (its own hostname) and a cgroup parent of its own. A bridge on
# the host joins the nodes like a LAN switch; the host itself sits on that LAN as the gateway,
# so the API server and every pod are reachable from it.
#
#   realnode.sh host-up    STATE BRIDGE GATEWAY/PREFIX CGROUP
#   realnode.sh node-up    STATE NAME ADDRESS/PREFIX GATEWAY BRIDGE CGROUP
#   realnode.sh routes     BRIDGE ADDRESS=POD_CIDR...     every pod CIDR via its node, on every node
#   realnode.sh node-down  STATE NAME CGROUP
#   realnode.sh host-down  STATE BRIDGE CGROUP
#   realnode.sh leftovers  STATE BRIDGE CGROUP            what is still there; nothing = clean
#   realnode.sh pids       STATE NAME CGROUP              every process that belongs to the node
#
# host-up, node-up, routes, node-down and host-down print "changed" when they changed
# something, so a second run reports nothing. Run as root.
set -euo pipefail

# Directories each node has for itself, bind-mounted over the host's in its mount namespace.
# /usr/local/sbin holds the node's kubeadm and kubectl, on the PATH as a package installs them.
# /etc/hosts is the node's own too (a file, below), naming the node.
NODE_DIRS=(/etc/kubernetes /etc/tas /var/lib/kubelet /var/lib/containerd /run/containerd /var/lib/etcd
  /var/log/pods /var/log/containers /var/log/kubernetes /etc/cni/net.d /var/lib/cni /run/netns
  /var/lib/node-exporter /usr/local/sbin)
NETNS_PREFIX=tasrn-

changed() { echo changed; }
die() { echo "realnode.sh: $*" >&2; exit 1; }
node_fs() { echo "$1/nodes/$2/fs"; }                # STATE NAME: the node's own directories
flat() { local p=${1#/}; echo "${p//\//-}"; }        # /var/lib/kubelet -> var-lib-kubelet
ns_file() { echo "$1/ns/$2.$3"; }                   # STATE NAME mnt|uts
cgroup_hierarchies() {                              # every cgroup v1 hierarchy (not the v2 one)
  local h
  for h in /sys/fs/cgroup/*/; do
    [[ -e ${h}cgroup.procs && $h != */unified/ ]] && echo "${h%/}"
  done
}

# make_cgroup PATH: a cgroup in every v1 hierarchy. cpuset children start with no CPUs or
# memory nodes, and no task can join them until they are copied from the parent.
make_cgroup() {
  local h dir
  for h in $(cgroup_hierarchies); do
    dir=$h/$1
    [[ -d $dir ]] && continue
    mkdir -p "$dir"
    if [[ -e $dir/cpuset.cpus ]]; then
      cat "$(dirname "$dir")/cpuset.cpus" >"$dir/cpuset.cpus"
      cat "$(dirname "$dir")/cpuset.mems" >"$dir/cpuset.mems"
    fi
    CHANGED=1
  done
}

# host_veth NETNS: the host's end of the veth pair whose other end is the node's eth0
# ("eth0@if42": the peer's interface index on the host), or nothing.
host_veth() {
  local index
  index=$(ip -n "$1" -o link show eth0 2>/dev/null | sed -n 's/^[0-9]*: eth0@if\([0-9]*\):.*/\1/p')
  [[ -n $index ]] || return 0
  ip -o link show | awk -F': ' -v i="$index" '$1 == i {sub(/@.*/, "", $2); print $2}'
}

remove_cgroup() { # deepest first: a cgroup directory only goes with rmdir, once it is empty
  local h
  # runc also mirrors the pods' cgroups into the v2 hierarchy of a hybrid host
  for h in $(cgroup_hierarchies) /sys/fs/cgroup/unified; do
    [[ -d $h/$1 ]] || continue
    find "$h/$1" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ -d $h/$1 ]] && die "cgroup $h/$1 still has processes"
    CHANGED=1
  done
}

host_up() {
  local state=$1 bridge=$2 gateway=$3 cgroup=$4 dir
  CHANGED=0
  mkdir -p "$state/ns"
  # unshare --mount=FILE needs FILE on a mount with private propagation.
  if ! mountpoint -q "$state/ns"; then
    mount --bind "$state/ns" "$state/ns"
    mount --make-private "$state/ns"
    CHANGED=1
  fi
  # Mount points for the nodes' own directories. Those the host lacks are created here and
  # listed, so host-down removes exactly them.
  for dir in "${NODE_DIRS[@]}"; do
    if [[ ! -e $dir ]]; then
      mkdir -p "$dir"
      echo "$dir" >>"$state/created-host-dirs"
      CHANGED=1
    fi
  done
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip address add "$gateway" dev "$bridge"
    ip link set "$bridge" up
    CHANGED=1
  fi
  make_cgroup "$cgroup"
  ((CHANGED)) && changed || true
}

node_up() {
  local state=$1 name=$2 address=$3 gateway=$4 bridge=$5 cgroup=$6
  local netns=$NETNS_PREFIX$name fs mnt uts dir veth
  CHANGED=0
  fs=$(node_fs "$state" "$name") mnt=$(ns_file "$state" "$name" mnt) uts=$(ns_file "$state" "$name" uts)
  # Network: a veth pair, the host end on the bridge, the node end as the node's eth0.
  if ! ip netns list | grep -qw "^$netns"; then
    ip netns add "$netns"
    CHANGED=1
  fi
  if ! ip -n "$netns" link show eth0 >/dev/null 2>&1; then
    veth=trn-${address%/*}; veth=trn-${veth##*.}   # named for the address's last octet
    ip link add "$veth" type veth peer name eth0 netns "$netns"
    ip link set "$veth" master "$bridge" up
    ip -n "$netns" address add "$address" dev eth0
    ip -n "$netns" link set lo up
    ip -n "$netns" link set eth0 up
    ip -n "$netns" route add default via "$gateway"
    # Pods reach other nodes and Services through the node (ip_forward), and kube-proxy must
    # see traffic between pods on the same bridge (bridge-nf-call-iptables). Both sysctls
    # are per network namespace: the host's own values are never touched.
    ip netns exec "$netns" sysctl -qw net.ipv4.ip_forward=1 net.bridge.bridge-nf-call-iptables=1
    CHANGED=1
  fi
  # Mount and UTS namespaces, kept alive by a bind mount of their files, entered with nsenter.
  if ! mountpoint -q "$mnt"; then
    for dir in "${NODE_DIRS[@]}"; do mkdir -p "$fs/$(flat "$dir")"; done
    touch "$mnt" "$uts"
    unshare --mount="$mnt" --uts="$uts" --propagation slave true
    nsenter --mount="$mnt" --uts="$uts" -- hostname "$name"
    for dir in "${NODE_DIRS[@]}"; do
      nsenter --mount="$mnt" -- mount --bind "$fs/$(flat "$dir")" "$dir"
    done
    CHANGED=1
  fi
  # Its own /etc/hosts naming it, as a machine's does: sudo and others resolve their own host
  # name, and the LAN has no DNS server to ask.
  if ! nsenter --mount="$mnt" -- mountpoint -q /etc/hosts; then
    { cat /etc/hosts; echo "${address%/*} $name"; } >"$fs/etc-hosts"
    nsenter --mount="$mnt" -- mount --bind "$fs/etc-hosts" /etc/hosts
    CHANGED=1
  fi
  # A node made by an older version of this script lacks the directories added since.
  for dir in "${NODE_DIRS[@]}"; do
    if ! nsenter --mount="$mnt" -- mountpoint -q "$dir"; then
      mkdir -p "$fs/$(flat "$dir")" "$dir"
      nsenter --mount="$mnt" -- mount --bind "$fs/$(flat "$dir")" "$dir"
      CHANGED=1
    fi
  done
  make_cgroup "$cgroup/$name"
  ((CHANGED)) && changed || true
}

routes() {
  local bridge=$1 spec address cidr other netns
  shift
  CHANGED=0
  for spec in "$@"; do
    address=${spec%%=*} cidr=${spec#*=}
    # from the host, over the bridge
    if ! ip route show "$cidr" | grep -q "via $address "; then
      ip route replace "$cidr" via "$address" dev "$bridge"
      CHANGED=1
    fi
    # from every other node
    for other in "$@"; do
      [[ $other == "$spec" ]] && continue
      netns=$(node_netns_of "${other%%=*}")
      if ! ip -n "$netns" route show "$cidr" | grep -q "via $address "; then
        ip -n "$netns" route replace "$cidr" via "$address" dev eth0
        CHANGED=1
      fi
    done
  done
  ((CHANGED)) && changed || true
}

node_netns_of() { # ADDRESS: the node network namespace whose eth0 has that address
  local netns
  for netns in $(ip netns list | awk -v p="$NETNS_PREFIX" 'index($1, p) == 1 {print $1}'); do
    ip -n "$netns" -o -4 address show dev eth0 2>/dev/null | grep -q " $1/" && { echo "$netns"; return; }
  done
  die "no node has the address $1"
}

ns_inode() { stat -L -c %i "$1" 2>/dev/null || true; }

node_pids() { # every process in the node's namespaces or cgroups (containers have their own)
  local state=$1 name=$2 cgroup=$3 mnt net pid
  mnt=$(ns_inode "$(ns_file "$state" "$name" mnt)")
  net=$(ns_inode "/run/netns/$NETNS_PREFIX$name")
  {
    for pid in /proc/[0-9]*; do
      pid=${pid#/proc/}
      [[ $pid == "$$" || $pid == "$BASHPID" ]] && continue
      case "$(readlink "/proc/$pid/ns/mnt" 2>/dev/null)" in "mnt:[$mnt]") [[ -n $mnt ]] && echo "$pid" ;; esac
      case "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" in "net:[$net]") [[ -n $net ]] && echo "$pid" ;; esac
    done
    [[ -d /sys/fs/cgroup/pids/$cgroup/$name ]] &&
      find "/sys/fs/cgroup/pids/$cgroup/$name" -name cgroup.procs -exec cat {} + 2>/dev/null
  } | sort -un
}

node_down() {
  local state=$1 name=$2 cgroup=$3 netns pids signal try file veth
  netns=$NETNS_PREFIX$name
  CHANGED=0
  # The kubelet leaves its containers running when it stops, and shims outlive containerd:
  # stop everything that lives in the node, politely first.
  for signal in TERM KILL; do
    pids=$(node_pids "$state" "$name" "$cgroup")
    [[ -z $pids ]] && break
    # shellcheck disable=SC2086
    kill -s "$signal" $pids 2>/dev/null || true
    CHANGED=1
    for try in $(seq 50); do
      [[ -z $(node_pids "$state" "$name" "$cgroup") ]] && break
      sleep 0.2
    done
  done
  [[ -n $(node_pids "$state" "$name" "$cgroup") ]] && die "processes of node $name would not stop"
  # With no process left in it, unmounting its file frees the mount namespace, and with it
  # every mount the node made (container root filesystems, volumes, pod network namespaces).
  for file in "$(ns_file "$state" "$name" mnt)" "$(ns_file "$state" "$name" uts)"; do
    if mountpoint -q "$file" 2>/dev/null; then umount "$file"; CHANGED=1; fi
    rm -f "$file"
  done
  # The kernel frees a deleted network namespace later, in a work queue, and its veth pair
  # with it: on a busy machine the host end (and its IPv6 routes) outlive `ip netns delete` by
  # seconds. Deleting the host end deletes the pair at once.
  if ip netns list | grep -qw "^$netns"; then
    veth=$(host_veth "$netns")
    if [[ -n $veth ]]; then ip link delete "$veth"; fi
    ip netns delete "$netns"
    CHANGED=1
  fi
  remove_cgroup "$cgroup/$name"
  ((CHANGED)) && changed || true
}

host_down() {
  local state=$1 bridge=$2 cgroup=$3 dir
  CHANGED=0
  # routes over the bridge go with it
  if ip link show "$bridge" >/dev/null 2>&1; then ip link delete "$bridge"; CHANGED=1; fi
  remove_cgroup "$cgroup"
  if mountpoint -q "$state/ns" 2>/dev/null; then umount "$state/ns"; CHANGED=1; fi
  if [[ -f $state/created-host-dirs ]]; then
    while read -r dir; do rmdir "$dir" 2>/dev/null && CHANGED=1 || true; done <"$state/created-host-dirs"
    rm -f "$state/created-host-dirs"
  fi
  ((CHANGED)) && changed || true
}

leftovers() {
  local state=$1 bridge=$2 cgroup=$3 h
  ip link show "$bridge" >/dev/null 2>&1 && echo "bridge $bridge"
  ip netns list | awk -v p="$NETNS_PREFIX" 'index($1, p) == 1 {print "network namespace " $1}'
  for h in $(cgroup_hierarchies) /sys/fs/cgroup/unified; do [[ -d $h/$cgroup ]] && echo "cgroup $h/$cgroup"; done
  awk -v s="$state" 'index($5, s) == 1 {print "mount " $5}' /proc/self/mountinfo
  [[ -s $state/created-host-dirs ]] && sed 's/^/host directory /' "$state/created-host-dirs"
  true
}

case ${1:-} in
  host-up) shift; host_up "$@" ;;
  node-up) shift; node_up "$@" ;;
  routes) shift; routes "$@" ;;
  node-down) shift; node_down "$@" ;;
  host-down) shift; host_down "$@" ;;
  leftovers) shift; leftovers "$@" ;;
  pids) shift; node_pids "$@" ;;
  *) die "usage: realnode.sh host-up|node-up|routes|node-down|host-down|leftovers|pids ..." ;;
esac
