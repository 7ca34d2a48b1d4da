"""A Linux network namespace joined to the host by a veth pair, and TCP partitions inside it.

Why a namespace and not a proxy: a partition must look like a partition to both ends. With the slave in its own
namespace, an ``iptables DROP`` of the master's HA port there silently blackholes that one link (no RST, no FIN:
the master only sees acks stop, the slave only sees frames stop), while the slave keeps its other links (the
nameserver, the master's remoting port for metadata sync, the clients). A proxy would have to emulate that.

Layout: namespace ``name`` holds ``ns_if`` with ``ns_ip``; the host keeps ``host_if`` with ``host_ip`` (a /30 of
10.213.x.y/30 no local interface uses). Deleting the namespace removes both veth ends and every rule in it, so
``destroy()`` (or a crash followed by ``ip netns del``) leaves nothing behind on the host.

Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN), ``ip`` (iproute2) and ``iptables``; ``unavailable()`` says why not.
Processes enter the namespace with ``harness.netns_broker`` (setns before the broker opens a socket).
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass

SUBNET = ipaddress.ip_network("10.213.0.0/16")


class NetnsError(RuntimeError):
    """An ``ip``/``iptables`` command failed; the message holds the command and its output."""


def _run(*cmd: str) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=30)
    if proc.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()}")
    return proc.stdout


def unavailable() -> str | None:
    """Why namespaces cannot be used here (None: they can); tries a real ``ip netns add``."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = f"pyrmq-probe-{os.getpid()}"
    try:
        _run("ip", "netns", "add", probe)
        _run("ip", "netns", "exec", probe, "iptables", "-L", "-n")
    except (NetnsError, OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot create a network namespace with a firewall: {exc}"
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


def reap_stale() -> list[str]:
    """Delete ``pyrmq-*-<pid>`` namespaces whose process is gone (a run killed before its teardown)."""
    reaped = []
    for line in _run("ip", "netns", "list").splitlines():
        name = line.split()[0] if line.split() else ""
        pid = name.rpartition("-")[2]
        if not name.startswith("pyrmq-") or not pid.isascii() or not pid.isdigit():
            continue
        if not os.path.exists(f"/proc/{int(pid)}"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
            reaped.append(name)
    return reaped


def _used_networks() -> list[ipaddress.IPv4Network]:
    out = []
    for line in _run("ip", "-o", "-4", "addr", "show").splitlines():
        parts = line.split()
        if "inet" in parts:
            out.append(ipaddress.ip_interface(parts[parts.index("inet") + 1]).network)
    return out


@dataclass
class NetNamespace:
    name: str
    host_if: str
    ns_if: str
    host_ip: str
    ns_ip: str
    cuts: set[tuple[str, int]]

    @classmethod
    def create(cls, tag: str) -> NetNamespace:
        """A fresh namespace named ``pyrmq-<tag>-<pid>`` on a /30 no local interface overlaps."""
        reap_stale()
        used = _used_networks()
        start = (os.getpid() * 4) % SUBNET.num_addresses
        for i in range(SUBNET.num_addresses // 4):
            net = ipaddress.ip_network(f"{SUBNET.network_address + (start + 4 * i) % SUBNET.num_addresses}/30")
            if not any(net.overlaps(u) for u in used):
                break
        else:
            raise NetnsError(f"no free /30 left in {SUBNET}")
        host_ip, ns_ip = (str(h) for h in net.hosts())
        short = f"{os.getpid() % 100000}{tag[:3]}"
        ns = cls(f"pyrmq-{tag}-{os.getpid()}", f"vh{short}"[:15], f"vn{short}"[:15], host_ip, ns_ip, set())
        try:
            _run("ip", "netns", "add", ns.name)
            _run("ip", "link", "add", ns.host_if, "type", "veth", "peer", "name", ns.ns_if)
            _run("ip", "link", "set", ns.ns_if, "netns", ns.name)
            _run("ip", "addr", "add", f"{host_ip}/30", "dev", ns.host_if)
            _run("ip", "link", "set", ns.host_if, "up")
            _run("ip", "-n", ns.name, "addr", "add", f"{ns_ip}/30", "dev", ns.ns_if)
            _run("ip", "-n", ns.name, "link", "set", ns.ns_if, "up")
            _run("ip", "-n", ns.name, "link", "set", "lo", "up")
        except NetnsError:
            ns.destroy()
            raise
        return ns

    def destroy(self) -> None:
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, check=False)
        subprocess.run(["ip", "link", "del", self.host_if], capture_output=True, check=False)

    def _rules(self, action: str, peer_ip: str, port: int, served: bool = False) -> None:
        base = ("ip", "netns", "exec", self.name, "iptables", "-w")
        here, there = ("--sport", "--dport") if served else ("--dport", "--sport")
        _run(*base, action, "OUTPUT", "-p", "tcp", "-d", peer_ip, here, str(port), "-j", "DROP")
        _run(*base, action, "INPUT", "-p", "tcp", "-s", peer_ip, there, str(port), "-j", "DROP")

    def cut(self, peer_ip: str, port: int) -> None:
        """Blackhole TCP between this namespace and ``peer_ip:port`` (both directions, silently)."""
        if (peer_ip, port) not in self.cuts:
            self._rules("-A", peer_ip, port)
            self.cuts.add((peer_ip, port))

    def cut_served(self, peer_ip: str, port: int) -> None:
        """Blackhole TCP between ``peer_ip`` and this namespace's own listening ``port`` (both directions): e.g.
        the slaves' HA connections to a master in here, while clients on other ports still reach it."""
        if (peer_ip, -port) not in self.cuts:
            self._rules("-A", peer_ip, port, served=True)
            self.cuts.add((peer_ip, -port))

    def heal(self, peer_ip: str, port: int) -> None:
        """Undo ``cut`` (``port``) or ``cut_served`` (``-port``)."""
        if (peer_ip, port) in self.cuts:
            self._rules("-D", peer_ip, abs(port), served=port < 0)
            self.cuts.discard((peer_ip, port))

    def heal_all(self) -> None:
        for peer_ip, port in list(self.cuts):
            self.heal(peer_ip, port)
