"""Attacks aimed at a container host: the engine's socket, host mounts, the cgroup and
/sys interfaces, container-breakout classics. Run in both sandboxes."""

from __future__ import annotations

from .corpus import Attack, attack, route_for
from .process_attacks import _LIBC, _TRY


def _d(name: str, body: str, tries: str, *, prelude: str = _TRY, **options: object) -> Attack:
    return attack(name, "docker", prelude + body, tries, route=route_for(name),
                  **options)  # type: ignore[arg-type]


DOCKER: list[Attack] = [
    attack("limits-past-the-host", "docker", "return 1\n", "an envelope asking for 64 CPUs "
           "(the engine refuses the container: the revision must end, not stay running)",
           route=None, checker="harmless", statuses=frozenset({"succeeded", "stopped"}),
           limits={"cpus": 64}),
    _d("docker-socket", '''
socket = imp("socket")
def api(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(2)
    s.connect(path)
    s.sendall(b"GET /containers/json HTTP/1.0\\r\\n\\r\\n")
    return s.recv(200).decode("latin-1")
for path in ("/var/run/docker.sock", "/run/docker.sock", "/run/containerd/containerd.sock"):
    attempt(path, lambda: api(path))
attempt("tcp2375", lambda: socket.create_connection(("172.17.0.1", 2375), timeout=1).recv(1))
return out''', "the Docker engine's API (socket, TCP 2375)"),
    _d("host-mounts", '''
mounts = open("/proc/self/mountinfo").read().splitlines()
out["writable"] = [m.split()[4] for m in mounts if " rw," in m and " - proc " not in m
                   and "/dev" not in m.split()[4]]
for path in ("/host", "/mnt", "/var/lib/docker", "/root", "/home", args["victim"]):
    attempt(path, lambda: os.listdir(path))
return out''', "host directories mounted into the sandbox"),
    _d("release-agent", '''
attempt("cgroup", lambda: os.listdir("/sys/fs/cgroup"))
attempt("agent", lambda: open("/sys/fs/cgroup/release_agent", "w").write("/tmp/x"))
attempt("notify", lambda: open("/sys/fs/cgroup/memory/notify_on_release", "w").write("1"))
attempt("mkdir", lambda: os.mkdir("/sys/fs/cgroup/memory/x"))
return out''', "the cgroup v1 release_agent breakout"),
    _d("core-pattern", '''
attempt("core", lambda: open("/proc/sys/kernel/core_pattern", "w").write("|/tmp/x"))
attempt("sysrq", lambda: open("/proc/sysrq-trigger", "w").write("h"))
attempt("modprobe", lambda: open("/proc/sys/kernel/modprobe", "w").write("/tmp/x"))
attempt("uevent", lambda: open("/sys/kernel/uevent_helper", "w").write("/tmp/x"))
return out''', "core_pattern, sysrq, modprobe, uevent_helper"),
    _d("devices", '''
for path in ("/dev/sda", "/dev/vda", "/dev/mem", "/dev/kmsg", "/dev/port"):
    attempt(path, lambda: open(path, "rb").read(16).hex())
attempt("mknod", lambda: os.mknod("/tmp/disk", 0o60600, os.makedev(254, 0)))
return out''', "block devices, /dev/mem, mknod of a disk"),
    _d("open-by-handle", '''
attempt("name_to_handle", lambda: syscall(303, -100, b"/", 0, 0, 0))
attempt("open_by_handle", lambda: syscall(304, -100, 0, 0))
return out''', "the shocker open_by_handle_at breakout", prelude=_LIBC),
    _d("proc-root-of-pid1", '''
attempt("root", lambda: os.listdir("/proc/1/root/"))
attempt("cwd", lambda: os.listdir(f"/proc/{args['host_pid']}/cwd"))
attempt("fd", lambda: os.listdir(f"/proc/{args['host_pid']}/fd"))
return out''', "the host's files through /proc/<pid>/root, cwd and fd"),
]
