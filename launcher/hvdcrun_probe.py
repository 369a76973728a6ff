"""hvdcrun_probe - what `hvdcrun --check` runs on every host, through the launch agent a real
launch uses (ssh, srun, or mpirun's plm_rsh_agent): it reports the host, and tries the other
hosts' addresses. Self-contained (Python 3 standard library, no other hvdcrun module), because
its source travels on the command line: `python3 -c SOURCE LIBHVDC TOKEN DEADLINE_S`.

    probe                                  driver (hvdcrun_check.py)
    listens on TCP port P (any address)
    HVDCRUN-PROBE {"hello": {host,    -->  every host reached; versions, GPUs, interfaces
                   interfaces, port,
                   versions}}
                                      <--  {"targets": [[host, address, port], ...], "timeout": T}
    connects to each target, sends TOKEN; a probe that hears its TOKEN answers with the
    address the connection came from (as horovodrun's task services do, so a route through
    another network or a NAT is not taken for this one)
    HVDCRUN-PROBE {"probes": [[host, address, ok, seen, why, seconds], ...]}  -->
                                      <--  end of input: the probe exits
The probe exits by itself DEADLINE_S after it started, whatever happens to the driver.

interfaces() is also what the driver uses for this host (hvdcrun_network.py).
"""
import array
import fcntl
import ipaddress
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

MARK = "HVDCRUN-PROBE "
SIOCGIFFLAGS, SIOCGIFADDR, SIOCGIFNETMASK = 0x8913, 0x8915, 0x891B
IFF_UP, IFF_LOOPBACK = 0x1, 0x8


def _ioctl(sock, request, name):
    buf = array.array("B", struct.pack("256s", name.encode()[:15]))
    fcntl.ioctl(sock.fileno(), request, buf, True)
    return buf.tobytes()


def interfaces():
    """[(name, address, prefix length)] of this host's IPv4 interfaces that are up, loopback
    last (the primary address of each: what ifconfig shows)."""
    found = []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            try:
                flags = struct.unpack("H", _ioctl(s, SIOCGIFFLAGS, name)[16:18])[0]
                addr = socket.inet_ntoa(_ioctl(s, SIOCGIFADDR, name)[20:24])
                mask = socket.inet_ntoa(_ioctl(s, SIOCGIFNETMASK, name)[20:24])
            except OSError:  # no IPv4 address
                continue
            if flags & IFF_UP:
                prefix = ipaddress.ip_network("0.0.0.0/" + mask).prefixlen
                found.append((name, addr, prefix, bool(flags & IFF_LOOPBACK)))
    found.sort(key=lambda f: f[3])
    return [f[:3] for f in found]


# Run in a child: a library that cannot load (or an ASan build, which aborts whatever loads it
# late) costs the answer about versions, not the probe.
VERSIONS = r"""
import ctypes, json, re, sys
out = {}
lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_GLOBAL)
lib.hvd_build_info.restype = ctypes.c_char_p
for line in lib.hvd_build_info().decode().splitlines():
    key, _, value = line.partition(": ")
    if key in ("version", "mpi", "cuda", "nccl"):
        out[key] = value
maps = open("/proc/self/maps").read()
def loaded(stem):
    hits = re.findall(r"(/\S*/%s[^/\s]*)" % stem, maps)
    return hits[0] if hits else None
cudart, nccl = loaded("libcudart.so"), loaded("libnccl.so")
if cudart:
    c = ctypes.CDLL(cudart)
    c.cudaGetErrorString.restype = ctypes.c_char_p
    n, d = ctypes.c_int(0), ctypes.c_int(0)
    rc = c.cudaGetDeviceCount(ctypes.byref(n))
    out["gpus"] = n.value if rc == 0 else 0
    if rc != 0:
        out["gpu_error"] = c.cudaGetErrorString(rc).decode()
    if c.cudaDriverGetVersion(ctypes.byref(d)) == 0 and d.value:
        out["driver"] = "%d.%d" % (d.value // 1000, d.value % 1000 // 10)
if nccl:
    v = ctypes.c_int(0)
    if ctypes.CDLL(nccl).ncclGetVersion(ctypes.byref(v)) == 0:
        out["nccl_running"] = "%d.%d.%d" % (v.value // 10000, v.value // 100 % 100, v.value % 100)
print(json.dumps(out))
"""


def versions(library):
    try:
        r = subprocess.run([sys.executable, "-c", VERSIONS, library], capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": "cannot run %s: %s" % (sys.executable, e)}
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
        return {"error": "cannot load %s: %s" % (library, last)}
    return json.loads(r.stdout)


def serve(listener, token, hostname):
    """Answers every connection that sends our token with the address it came from."""
    while True:
        try:
            conn, peer = listener.accept()
        except OSError:
            return
        with conn:
            conn.settimeout(5)
            try:
                if conn.recv(256).strip() == token.encode():
                    conn.sendall((json.dumps({"host": hostname, "seen": peer[0]}) + "\n").encode())
            except OSError:
                pass


def try_target(target, token, timeout, results):
    host, address, port = target
    t0 = time.monotonic()
    ok, seen, why = False, None, ""
    try:
        with socket.create_connection((address, port), timeout=timeout) as s:
            s.settimeout(max(0.1, timeout - (time.monotonic() - t0)))
            s.sendall(token.encode() + b"\n")
            answer = json.loads(s.makefile().readline() or "{}")
            ok, seen = answer.get("host") is not None, answer.get("seen")
            why = "" if ok else "something else answers on this port"
    except socket.timeout:
        why = "no answer within %g s" % timeout
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or str(e)
    results.append([host, address, ok, seen, why, round(time.monotonic() - t0, 3)])


def say(obj):
    sys.stdout.write(MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(library, token, deadline_s):
    threading.Timer(float(deadline_s), lambda: os._exit(3)).start()  # never outlive the check
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("0.0.0.0", 0))
    listener.listen(64)
    hostname = socket.gethostname()
    threading.Thread(target=serve, args=(listener, token, hostname), daemon=True).start()
    say({"hello": {"host": hostname, "port": listener.getsockname()[1],
                   "interfaces": interfaces(), "versions": versions(library),
                   "python": sys.executable}})
    for line in sys.stdin:
        request = json.loads(line)
        results = []
        workers = [threading.Thread(target=try_target,
                                    args=(t, token, request["timeout"], results))
                   for t in request["targets"]]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        say({"probes": results})
    os._exit(0)


if __name__ == "__main__":
    main(*sys.argv[1:4])
