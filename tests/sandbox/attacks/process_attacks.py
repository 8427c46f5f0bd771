"""The sandbox itself (both runners): host files and secrets, network, namespaces,
privileges, processes that try to outlive the run or kill their host. Docker-specific
attacks (the engine's socket, host mounts) are in ``docker_attacks``; both lists run in
both sandboxes."""

from __future__ import annotations

from .corpus import Attack, attack, route_for

# Collect what each probe did; a probe that "worked" returns data the judge looks at,
# but the judge decides from the host side (files, tokens, sockets, /proc).
_TRY = '''
out = {}
def attempt(name, fn):
    try:
        out[name] = fn()
    except Exception as exc:
        out[name] = type(exc).__name__
'''

_LIBC = _TRY + '''
ctypes = imp("ctypes")
libc = ctypes.CDLL(None, use_errno=True)
def syscall(number, *arguments):
    ctypes.set_errno(0)
    return [libc.syscall(number, *arguments), ctypes.get_errno()]
'''

_SPAWN = '''
sys = imp("sys")
def daemon_argv():
    return [sys.executable, "-c", "import time\\nwhile True: time.sleep(0.2)", args["marker"]]
'''


def _p(name: str, body: str, tries: str, *, prelude: str = _TRY, **options: object) -> Attack:
    return attack(name, "process", prelude + body, tries, route=route_for(name),
                  **options)  # type: ignore[arg-type]


PROCESS: list[Attack] = [
    _p("read-etc-shadow", '''
attempt("shadow", lambda: open("/etc/shadow").read())
attempt("passwd", lambda: open("/etc/passwd").read()[:50])
return out''', "read /etc/shadow"),
    _p("read-victim-file", '''
attempt("secret", lambda: open(args["secret_file"]).read())
attempt("listing", lambda: os.listdir(args["victim"]))
return out''', "read the test's 0600 secret file by its host path"),
    _p("list-revise-home", '''
attempt("home", lambda: os.listdir(args["home"]))
attempt("db", lambda: open(args["home"] + "/revise.db", "rb").read(64).hex())
attempt("log", lambda: open(args["home"] + "/provider-log.jsonl").read())
return out''', "list REVISE_HOME and read its database and provider log"),
    _p("host-environ", '''
attempt("environ", lambda: open(f"/proc/{args['host_pid']}/environ", "rb").read().decode())
attempt("self", lambda: dict(os.environ))
attempt("pid1", lambda: open("/proc/1/environ", "rb").read().decode())
return out''', "the provider key from /proc/<host pid>/environ"),
    _p("host-mem", '''
def mem():
    with open(f"/proc/{args['host_pid']}/mem", "rb") as fh:
        fh.seek(0x400000)
        return fh.read(64).hex()
attempt("mem", mem)
attempt("maps", lambda: open(f"/proc/{args['host_pid']}/maps").read()[:200])
return out''', "read /proc/<host pid>/mem"),
    _p("proc-walk-for-secret", '''
found = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            found.append(open(f"/proc/{pid}/environ", "rb").read().decode("latin-1"))
        except OSError:
            pass
return found''', "every visible process's environment"),
    _p("redis-tcp", '''
socket = imp("socket")
def redis():
    s = socket.create_connection(("127.0.0.1", 6379), timeout=2)
    s.sendall(f"SET {args['redis_key']} pwned\\r\\nPING\\r\\n".encode())
    return s.recv(100).decode()
attempt("redis", redis)
return out''', "SET a key in the host's Redis on 127.0.0.1:6379"),
    _p("postgres-tcp", '''
socket = imp("socket")
attempt("pg", lambda: socket.create_connection(("127.0.0.1", 5432), timeout=2).recv(1))
attempt("pg6", lambda: socket.create_connection(("::1", 5432), timeout=2).recv(1))
return out''', "connect to the host's PostgreSQL"),
    _p("canary-tcp", '''
socket = imp("socket")
for host in ("127.0.0.1", "localhost", "172.17.0.1", "10.0.2.2"):
    attempt(host, lambda: socket.create_connection((host, args["canary"]), timeout=1).close())
attempt("dns", lambda: socket.gethostbyname("pypi.org"))
return out''', "reach a port the test listens on, by every name for the host"),
    _p("unix-sockets-of-host", '''
socket = imp("socket")
def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1)
    s.connect(path)
    return "connected"
for path in ("/var/run/redis/redis-server.sock", "/var/run/postgresql/.s.PGSQL.5432",
             "\\0/tmp/.X11-unix/X0", "/run/dbus/system_bus_socket"):
    attempt(path, lambda: connect(path))
return out''', "the host's Unix sockets (Redis, PostgreSQL, abstract names)"),
    _p("setns-host-net", '''
def enter(path):
    return syscall(308, os.open(path, os.O_RDONLY), 0)
for path in (f"/proc/{args['host_pid']}/ns/net", "/proc/1/ns/net", "/proc/self/ns/net",
             "/proc/1/ns/user", "/proc/1/ns/mnt"):
    attempt(path, lambda: enter(path))
attempt("unshare", lambda: syscall(272, 0x10000000 | 0x40000000))
return out''', "setns into the host's network namespace, or unshare a user namespace",
       prelude=_LIBC),
    _p("write-outside-workdir", '''
for path in (args["victim"] + "/planted", args["home"] + "/planted", "/usr/planted",
             "/opt/revise/runtime.py", "/rpc/planted", "/etc/planted",
             "/tmp/../planted", "/proc/sys/kernel/hostname"):
    attempt(path, lambda: open(path, "a").write("pwned"))
return out''', "write into the host's dirs, the runtime, /rpc and /proc/sys"),
    _p("symlink-out-of-tmp", '''
attempt("link", lambda: os.symlink(args["secret_file"], "/tmp/link"))
attempt("read", lambda: open("/tmp/link").read())
attempt("hard", lambda: os.link("/opt/revise/runtime.py", "/tmp/rt"))
return out''', "symlinks and hard links from the writable /tmp to host paths"),
    _p("fork-bomb", '''
made = 0
for i in range(400):
    try:
        if os.fork() == 0:
            os.execv(daemon_argv()[0], daemon_argv())
        made += 1
    except OSError:
        break
return made''', "fork 400 processes that outlive the script", prelude=_TRY + _SPAWN,
       limits={"pids": 32}),
    _p("setsid-daemon", '''
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(daemon_argv()[0], daemon_argv())
    os._exit(0)
imp("time").sleep(0.3)
return "daemonized"''', "a double-forked setsid daemon that survives the run",
       prelude=_TRY + _SPAWN),
    _p("daemon-ignores-signals", '''
signal = imp("signal")
if os.fork() == 0:
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    os.setsid()
    os.execv(daemon_argv()[0], daemon_argv())
return "spawned"''', "a daemon that ignores SIGTERM/SIGHUP", prelude=_TRY + _SPAWN),
    _p("kill-the-parent", '''
signal = imp("signal")
attempt("parent", lambda: os.kill(os.getppid(), signal.SIGKILL))
attempt("host", lambda: os.kill(args["host_pid"], signal.SIGKILL))
attempt("all", lambda: os.kill(-1, signal.SIGKILL))
return out''', "SIGKILL the parent, the host's pid and every process it can see"),
    _p("ptrace-attach", '''
attempt("host", lambda: syscall(101, 16, args["host_pid"], 0, 0))
attempt("parent", lambda: syscall(101, 16, os.getppid(), 0, 0))
attempt("traceme", lambda: syscall(101, 0, 0, 0, 0))
attempt("vm_readv", lambda: syscall(310, args["host_pid"], 0, 0, 0, 0, 0))
return out''', "ptrace the host or the parent, process_vm_readv", prelude=_LIBC),
    _p("mount-and-chroot", '''
attempt("mount", lambda: syscall(165, b"none", b"/tmp", b"tmpfs", 0, 0))
attempt("proc", lambda: syscall(165, b"proc", b"/tmp", b"proc", 0, 0))
attempt("chroot", lambda: syscall(161, b"/tmp"))
attempt("pivot", lambda: syscall(155, b"/tmp", b"/tmp"))
attempt("open_tree", lambda: syscall(428, -100, b"/", 1))
return out''', "mount, chroot, pivot_root, open_tree", prelude=_LIBC),
    _p("uid-changes", '''
attempt("setuid", lambda: os.setuid(0))
attempt("setgid", lambda: os.setgid(0))
attempt("setresuid", lambda: os.setresuid(0, 0, 0))
attempt("setgroups", lambda: os.setgroups([0]))
def setuid_binary():
    pid = os.fork()
    if pid == 0:
        for path in ("/usr/bin/su", "/usr/bin/sudo", "/bin/mount"):
            try:
                os.execv(path, [path, "-c", "cat " + args["secret_file"], args["marker"]])
            except OSError:
                pass
        os._exit(9)
    return os.waitpid(pid, 0)[1]
attempt("su", setuid_binary)
return out''', "become root: setuid, setgroups, a setuid binary"),
    _p("kernel-interfaces", '''
attempt("keyctl", lambda: syscall(250, 0, -3, 0))
attempt("bpf", lambda: syscall(321, 0, 0, 0))
attempt("io_uring", lambda: syscall(425, 1, 0))
attempt("perf", lambda: syscall(298, 0, 0, -1, -1, 0))
attempt("userfaultfd", lambda: syscall(323, 0))
attempt("kexec", lambda: syscall(246, 0, 0, 0, 0))
attempt("init_module", lambda: syscall(175, 0, 0, b""))
attempt("pdeathsig", lambda: syscall(157, 1, 0))
return out''', "keyrings, bpf, io_uring, perf, userfaultfd, modules, clearing pdeathsig",
       prelude=_LIBC),
    _p("clone-namespaces", '''
attempt("clone_newuser", lambda: syscall(56, 0x10000000 | 17, 0, 0, 0, 0))
attempt("clone3", lambda: syscall(435, 0, 0))
attempt("x32", lambda: syscall(0x40000000 | 39))
return out''', "clone with namespace flags, clone3, the x32 ABI", prelude=_LIBC),
    _p("tmpfs-fill", '''
def fill():
    with open("/tmp/fill", "wb") as fh:
        for i in range(1000):
            fh.write(b"\\0" * (1 << 20))
    return "filled"
attempt("fill", fill)
return out''', "fill /tmp (past its size) to reach the host's disk"),
    _p("memory-hog", '''
hog = []
for i in range(200):
    hog.append(B["bytearray"](16 << 20))
return len(hog)''', "allocate 3 GB", limits={"memory_mb": 128}),
    _p("cpu-spin", "while True:\n    pass\n", "spin past the deadline", timeout=3.0,
       statuses=frozenset({"stopped"}), error="SandboxTimeout"),
    _p("sleep-past-deadline", 'imp("time").sleep(60)\nreturn 1\n',
       "sleep past the deadline", timeout=3.0, statuses=frozenset({"stopped"}),
       error="SandboxTimeout"),
    _p("stdout-flood", '''
sys = imp("sys")
for i in range(200000):
    sys.stdout.write("flood " * 20 + "\\n")
return 1''', "flood stdout (the host's output log)"),
    _p("init-memory-write", '''
def poke():
    maps = open("/proc/1/maps").read().splitlines()
    start = int(maps[0].split("-")[0], 16)
    with open("/proc/1/mem", "r+b", buffering=0) as fh:
        fh.seek(start)
        return fh.write(b"\\xcc" * 16)
attempt("poke", poke)
attempt("self", lambda: open("/proc/self/mem", "r+b", buffering=0).write(b""))
return out''', "write into the sandbox init's memory (to clear its death signal)"),
    _p("tty-injection", '''
fcntl, termios = imp("fcntl"), imp("termios")
def inject():
    fd = os.open("/dev/tty", os.O_RDWR)
    return fcntl.ioctl(fd, termios.TIOCSTI, b"x")
attempt("tiocsti", inject)
attempt("ptmx", lambda: os.open("/dev/ptmx", os.O_RDWR))
return out''', "TIOCSTI into a controlling terminal, a new pty"),
    _p("raise-own-limits", '''
resource = imp("resource")
for name in ("RLIMIT_NPROC", "RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NOFILE"):
    which = getattr(resource, name)
    attempt(name, lambda: resource.setrlimit(which, (resource.RLIM_INFINITY,) * 2))
def oom():
    with open("/proc/self/oom_score_adj", "w") as fh:
        fh.write("-1000")
    return open("/proc/self/oom_score_adj").read()
attempt("oom", oom)
attempt("nice", lambda: os.nice(-10))
return out''', "raise its own rlimits, OOM score and priority"),
    _p("busy-children-past-deadline", '''
spin = [sys.executable, "-c", "while True: pass", args["marker"]]
for i in range(20):
    try:
        if os.fork() == 0:
            os.execv(spin[0], spin)
    except OSError:
        break
imp("time").sleep(30)
return 1''', "busy children that should outlive a deadline kill", prelude=_TRY + _SPAWN,
       timeout=3.0, statuses=frozenset({"stopped"}), error="SandboxTimeout",
       limits={"pids": 8}),
]
