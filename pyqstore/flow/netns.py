"""Loopback only: the rule for every Ray test and benchmark.

Ray binds its services to the machine's interface address, and a
``ray.cluster_utils.Cluster`` given ``node_ip_address="127.0.0.1"`` still
connected to that address on a machine with a real interface.  Inside a
network namespace that holds only the loopback device Ray finds no other
address, and nothing it sends can leave the machine.  The Ray tests and the
Ray benchmark re-execute themselves through :func:`loopback_command`, or
refuse to run when :func:`only_loopback` is False.
"""
from __future__ import annotations

import os
import shutil
import socket
import sys
from typing import NoReturn, Sequence

__all__ = ["only_loopback", "loopback_up", "loopback_command", "reexec_in_loopback",
           "NETNS_ENV"]

#: set in the environment of a command re-executed in its own namespace, so
#: that a namespace that still shows an interface is an error, not a loop
NETNS_ENV = "PYQSTORE_LOOPBACK_NETNS"


def only_loopback() -> bool:
    """True when this process's network namespace has no device but ``lo``
    and ``lo`` is up.  Read through the kernel's interface list of the
    calling process (if_nameindex), not /sys/class/net, which shows the
    namespace that mounted sysfs."""
    if [name for _, name in socket.if_nameindex()] != ["lo"]:
        return False
    return loopback_up()


def loopback_up() -> bool:
    """True when a TCP connection to 127.0.0.1 can be made (``lo`` is up)."""
    with socket.socket() as server:
        try:
            server.bind(("127.0.0.1", 0))
        except OSError:
            return False
        server.listen(1)
        with socket.socket() as client:
            client.settimeout(2.0)
            try:
                client.connect(server.getsockname())
            except OSError:
                return False
    return True


def loopback_command(argv: Sequence[str]) -> list[str]:
    """argv wrapped to run in a new network namespace with only ``lo``, up:
    ``unshare -n`` as root, ``unshare -rn`` (a user namespace mapping the
    caller to root) otherwise.  RuntimeError when unshare or ip is missing."""
    for tool in ("unshare", "ip"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"{tool} is not installed: the Ray tests and benchmark run only in "
                               f"a network namespace with loopback alone (util-linux, iproute2)")
    flags = "-n" if os.geteuid() == 0 else "-rn"
    return ["unshare", flags, "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]


def reexec_in_loopback(argv: Sequence[str]) -> NoReturn:
    """Replace this process by argv run through :func:`loopback_command`,
    marked with NETNS_ENV.  RuntimeError instead when this process is such
    a re-execution already (its namespace still shows an interface, or lo
    is down: running again would loop), or unshare or ip is missing."""
    if os.environ.get(NETNS_ENV):
        raise RuntimeError("re-executed in a new network namespace, but it still shows an "
                           "interface other than lo, or lo is down")
    cmd = loopback_command(argv)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(cmd[0], cmd, dict(os.environ, **{NETNS_ENV: "1"}))
