"""hvdcrun_network - the network the hosts talk over: what --network-interfaces gives Open MPI and
NCCL, the interfaces of this host, and the choice of one network among those every host shares
(hvdcrun --check, hvdcrun_check.py).

    --network-interfaces eth0,ib0     Open MPI: btl_tcp_if_include/oob_tcp_if_include eth0,ib0
                                      NCCL:     NCCL_SOCKET_IFNAME=eth0,ib0 (as horovodrun)
    --network-interfaces 10.0.0.0/24  Open MPI: the same; NCCL takes names, not networks: no
                                      NCCL_SOCKET_IFNAME (--check finds each host's names)

Runs in the hvdcrun process. Python 3 standard library only.
"""
import ipaddress
import re

from hvdcrun_hosts import UsageError
from hvdcrun_probe import interfaces  # noqa: F401  (this host's, for the driver and tests)

NAME = re.compile(r"[A-Za-z0-9_.:@-]+")


def split_interfaces(value, where="--network-interfaces"):
    """'eth0,10.0.0.0/24' -> (['eth0'], ['10.0.0.0/24']): interface names and CIDR networks, the
    two forms Open MPI's *_if_include accept."""
    names, networks = [], []
    for item in value.split(",") if value is not None else []:
        item = item.strip()
        if "/" in item:
            try:
                networks.append(str(ipaddress.ip_network(item, strict=False)))
            except ValueError:
                raise UsageError("%s: '%s' is not a network; expected an interface name (eth0) or "
                                 "a CIDR network (10.0.0.0/24)" % (where, item))
        elif NAME.fullmatch(item):
            names.append(item)
        else:
            raise UsageError("%s '%s': expected interface names or CIDR networks separated by "
                             "commas, e.g. eth0,ib0 or 10.0.0.0/24" % (where, value))
    return names, networks


def nccl_env(value, env):
    """NCCL_SOCKET_IFNAME from --network-interfaces' names (horovodrun sets it from its NICs),
    unless it is set already: the user's own value wins, and travels as every NCCL_* does."""
    names, _ = split_interfaces(value)
    if not names or "NCCL_SOCKET_IFNAME" in env:
        return {}
    return {"NCCL_SOCKET_IFNAME": ",".join(names)}


# ---- this host's interfaces (hvdcrun_probe.interfaces: the probe runs the same code) ------

def network_of(address, prefix):
    return str(ipaddress.ip_network("%s/%d" % (address, prefix), strict=False))


# ---- one network for the job ---------------------------------------------------------------

def pick_network(shared, preferred_addresses=()):
    """One of the networks every pair of hosts reached each other on: the one holding the
    addresses the host names resolve to (the network the user named the hosts by), else the
    one with the longest prefix (the most specific), else the first by address. shared maps
    network -> {host: interface name}; None when it is empty."""
    if not shared:
        return None
    for net in shared:
        if any(ipaddress.ip_address(a) in ipaddress.ip_network(net) for a in preferred_addresses):
            return net
    return sorted(shared, key=lambda n: (-ipaddress.ip_network(n).prefixlen,
                                         ipaddress.ip_network(n)))[0]


def network_settings(net, names):
    """(Open MPI arguments, NCCL variables) that keep a job on network net, whose interfaces on
    the hosts are names: Open MPI takes the network itself, NCCL the names (exact: '=' keeps
    eth1 from also meaning eth10)."""
    mca = ["--mca", "btl_tcp_if_include", net, "--mca", "oob_tcp_if_include", net]
    return mca, {"NCCL_SOCKET_IFNAME": "=" + ",".join(sorted(set(names)))}
