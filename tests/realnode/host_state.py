"""What the real-node cluster could leave behind on the host, read straight from the kernel.

    python tests/realnode/host_state.py snapshot FILE    before the cluster comes up
    python tests/realnode/host_state.py compare FILE     after it went down: exit 1 and list
                                                          every difference

Independent of roles/real_cluster/files/realnode.sh on purpose: the test must not trust the
code it checks.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

CLUSTER_MARKERS = ("tas-real-cluster", "tasrn")
SYSCTLS = (
    "net/ipv4/ip_forward",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
)
NODE_DIRS = (
    "/etc/kubernetes", "/etc/tas", "/var/lib/kubelet", "/var/lib/containerd", "/run/containerd",
    "/var/lib/etcd", "/var/log/pods", "/var/log/containers", "/etc/cni/net.d", "/var/lib/cni",
    "/run/netns", "/var/lib/node-exporter", "/usr/local/sbin",
)
# The automation host's own directory for the collection: in the managed phase this machine is
# the control_plane host and keeps the extender's CA in /etc/tas/pki (certificates_dir), and the
# uninstall takes it away with /etc/tas when nothing else is in it. An earlier run cut off before
# its uninstall leaves that directory here; this run's uninstall then removes it, as it should.
AUTOMATION_HOST_DIR = "/etc/tas"
COLLECTION_OWNED = "pki"


def _collection_files(directory: str) -> list[str] | None:
    """What is in the collection's directory on this machine (None when it does not exist)."""
    root = pathlib.Path(directory)
    if not root.is_dir():
        return None
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


# iproute2 makes /run/netns a mount point of its own at its first `ip netns add` and never takes
# it away; empty, it holds nothing of the cluster's (the namespaces are compared one by one), so
# it counts only when something is in it. A fresh machine has none before the cluster.
NETNS_DIR = "/run/netns"


def _left_by_iproute2(path: str) -> bool:
    return path == NETNS_DIR and not any(pathlib.Path(NETNS_DIR).iterdir())


def _run(*argv: str) -> str:
    """What a command prints; a tool the machine lacks (nft before the cluster's packages) reads
    as one line saying so, which differs from anything the tool would print."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=False).stdout
    except FileNotFoundError:
        return f"{argv[0]}: not installed\n"


def _processes() -> list[str]:
    """Processes that belong to the cluster: named for it, or in its cgroups or namespaces."""
    init_ns = {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in ("mnt", "net")}
    found = []
    for proc in pathlib.Path("/proc").glob("[0-9]*"):
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            cgroups = (proc / "cgroup").read_text()
            ns = {kind: os.readlink(proc / "ns" / kind) for kind in ("mnt", "net")}
        except OSError:
            continue
        if proc.name == str(os.getpid()):
            continue
        if (any(m in cmdline or m in cgroups for m in CLUSTER_MARKERS)
                or ns["net"] != init_ns["net"] or ns["mnt"] != init_ns["mnt"]):
            found.append(f"{proc.name} {cmdline[:120]}")
    return sorted(found)


def snapshot() -> dict[str, object]:
    cgroups = sorted(
        str(d) for h in pathlib.Path("/sys/fs/cgroup").iterdir() if h.is_dir()
        for d in h.iterdir() if d.is_dir()
    )
    mounts = [line.split()[4] for line in pathlib.Path("/proc/self/mountinfo").read_text().splitlines()]
    sysctls = {}
    for name in SYSCTLS:
        try:
            sysctls[name] = pathlib.Path("/proc/sys", name).read_text().strip()
        except OSError:
            sysctls[name] = None
    return {
        "links": sorted(line.split(":")[1].strip().split("@")[0]
                        for line in _run("ip", "-o", "link", "show").splitlines()),
        "addresses": sorted(_run("ip", "-o", "address", "show").splitlines()),
        "routes": sorted(_run("ip", "route", "show", "table", "all").splitlines()),
        "network namespaces": sorted(_run("ip", "netns", "list").splitlines()),
        "mounts": sorted(m for m in mounts if not _left_by_iproute2(m)),
        "cgroups": cgroups,
        "nftables": _run("nft", "list", "ruleset").splitlines(),
        "iptables": [rule for rule in _run("iptables-save").splitlines() if not rule.startswith("#")],
        "sysctls": sysctls,
        "host directories": [d for d in NODE_DIRS if os.path.exists(d) and not _left_by_iproute2(d)],
        "collection files on this machine": _collection_files(AUTOMATION_HOST_DIR),
        # the user Ansible logs in as, and its sudo rule
        "users": sorted(line.split(":")[0] for line in pathlib.Path("/etc/passwd").read_text().splitlines()),
        "sudoers.d": sorted(p.name for p in pathlib.Path("/etc/sudoers.d").glob("*")),
        "homes": sorted(p.name for p in pathlib.Path("/home").glob("*")),
        "processes": _processes(),
    }


def _earlier_install(files: list[str] | None) -> bool:
    """Whether the collection's directory held nothing but what its certificates role writes."""
    return files is not None and all(f.split("/")[0] == COLLECTION_OWNED for f in files)


def compare(before: dict[str, object], after: dict[str, object]) -> list[str]:
    problems = []
    # An earlier install's CA (and nothing else) removed by this run's uninstall is not a loss.
    removed_earlier_install = (_earlier_install(before.get("collection files on this machine"))
                               and after.get("collection files on this machine") is None)
    for key, old in before.items():
        new = after.get(key)
        if removed_earlier_install and key == "collection files on this machine":
            continue
        if removed_earlier_install and key == "host directories":
            old = [d for d in old if d != AUTOMATION_HOST_DIR]
        if isinstance(old, list) and isinstance(new, list):
            added = [x for x in new if x not in old]
            removed = [x for x in old if x not in new]
            problems += [f"{key}: left behind {x!r}" for x in added]
            problems += [f"{key}: gone {x!r}" for x in removed]
        elif old != new:
            problems.append(f"{key}: was {old!r}, now {new!r}")
    return problems


def main(argv: list[str]) -> int:
    command, path = argv
    if command == "snapshot":
        pathlib.Path(path).write_text(json.dumps(snapshot(), indent=1))
        return 0
    problems = compare(json.loads(pathlib.Path(path).read_text()), snapshot())
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
