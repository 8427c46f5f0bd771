"""RPC socket protocol abuse: forged frames, oversized and deep JSON, bad types, floods,
half-closed sockets, second connections. The host must end each run ``stopped`` with a
named error (or, where the abuse is only noise, keep serving), never crash or hang."""

from __future__ import annotations

from .corpus import Attack, attack

# The runtime's own socket and nonce, a whitelisted site that never runs by itself, and a
# sender of raw bytes.
_CHANNEL = '''
if args.get("never"):
    await ctx.run("text.generate", {"prompt": "whitelisted"})
sched = g["_SCHEDULER"]
sock = sched.channel._sock
nonce = sched.nonce
struct = imp("struct")
time = imp("time")
site = "orchestrate/if0/#0"
def raw(data):
    sock.sendall(struct.pack(">I", len(data)) + data)
def send(message):
    raw(json.dumps(message).encode())
def frame(seq, **fields):
    out = {"seq": seq, "kind": "call", "site": site, "path": [], "occurrence": 0,
           "capability": "text.generate", "payload": {"prompt": "x"}, "take": 1}
    out.update(fields)
    return out
def batch(*frames):
    send({"t": "batch", "nonce": nonce, "frames": list(frames)})
'''

# The same, where the whitelisted site is a branch of a two-wide ctx.parallel (its frames
# carry one path index, below 2) and a race of two (its branches, one index below 2).
_FANNED = _CHANNEL.replace(
    '    await ctx.run("text.generate", {"prompt": "whitelisted"})\n',
    '    await ctx.parallel([ctx.run("text.generate", {"prompt": "a"}),\n'
    '                        ctx.run("text.generate", {"prompt": "b"})])\n'
    '    await ctx.race([ctx.run("text.generate", {"prompt": "c"}),\n'
    '                    ctx.run("text.generate", {"prompt": "d"})])\n')

_STOPPED = frozenset({"stopped"})


def _proto(name: str, body: str, tries: str, *, error: str | None = "SandboxProtocolError",
           calls: int = 0, statuses: frozenset[str] = _STOPPED, timeout: float = 8.0,
           prelude: str = _CHANNEL) -> Attack:
    return attack(name, "protocol", prelude + body + '\ntime.sleep(4)\nreturn "not stopped"\n',
                  tries, error=error, calls=calls, statuses=statuses, timeout=timeout)


PROTOCOL: list[Attack] = [
    _proto("forged-nonce", 'send({"t": "batch", "nonce": "0" * 32, "frames": [frame(1)]})',
           "a batch under a guessed nonce"),
    _proto("unknown-site", 'batch(frame(1, site="orchestrate/#9"))',
           "a call at a site the host never annotated"),
    _proto("capability-swap", 'batch(frame(1, capability="image.generate"))',
           "a whitelisted site asking for another capability"),
    _proto("take-forged", "batch(frame(1, take=2))",
           "a further take the admitted script never declares (a second payment of one "
           "payload past the ledger)"),
    _proto("occurrence-skip", "batch(frame(1, occurrence=5))",
           "skip ahead in occurrences"),
    _proto("occurrence-replay", "batch(frame(1), frame(2))",
           "the same occurrence twice in one wave"),
    _proto("seq-backwards", "batch(frame(3), frame(2, occurrence=1))",
           "a sequence number that goes back"),
    _proto("seq-not-int", 'batch(frame("1"))', "a string sequence number"),
    _proto("seq-bool", "batch(frame(True))", "a boolean sequence number"),
    _proto("paths-invented", "batch(*[frame(i + 1, path=[i]) for i in range(40)])",
           "40 calls at fanout paths the script never enters, each a new identity and a "
           "new payment (the admitted script can call there once)"),
    _proto("occurrences-past-bound", '''
send({"t": "batch", "nonce": nonce, "frames": [frame(1, path=[3])], "more": True})
batch(frame(2, path=[3], occurrence=1, payload={"prompt": "y"}))''',
           "a second call at a site the admitted script reaches once, at a made-up path"),
    _proto("path-past-width", "batch(frame(1, path=[7]))",
           "a branch index past the width of the fanout around the site (a new identity "
           "the script cannot reach)", prelude=_FANNED),
    _proto("path-deeper-than-nesting", "batch(frame(1, path=[0, 0]))",
           "a path longer than the fanouts around the site", prelude=_FANNED),
    _proto("path-shorter-than-nesting", "batch(frame(1, path=[]))",
           "a path shorter than the fanouts around the site", prelude=_FANNED),
    _proto("race-branch-index-invented", 'batch(frame(1, site="orchestrate/if0/#3", '
           'path=[5]))', "a race branch call at an index past the race's width, with "
           "nothing committed there", prelude=_FANNED),
    _proto("path-negative", "batch(frame(1, path=[-1]))", "a negative fanout path"),
    _proto("path-too-long", "batch(frame(1, path=[0] * 1000))", "a 1000-deep fanout path"),
    _proto("occurrence-float", "batch(frame(1, occurrence=0.0))", "a float occurrence"),
    _proto("take-huge", "batch(frame(1, take=10 ** 6))", "take beyond the limit"),
    _proto("frame-not-object", 'send({"t": "batch", "nonce": nonce, "frames": [[1, 2]]})',
           "a frame that is a list"),
    _proto("frames-not-list", 'send({"t": "batch", "nonce": nonce, "frames": "x"})',
           "frames that is a string"),
    _proto("unknown-kind", 'batch(frame(1, kind="shell"))', "a frame of an unknown kind"),
    _proto("unknown-message", 'send({"t": "exec", "nonce": nonce, "cmd": "id"})',
           "a message type the host does not know"),
    _proto("message-not-object", 'raw(b"[1, 2, 3]")', "a JSON list as the message"),
    _proto("message-not-json", 'raw(b"\\xff\\xfe not json {")', "bytes that are not JSON"),
    _proto("nan-constant", 'raw(b\'{"t": "batch", "nonce": "\' + nonce.encode() + '
           'b\'", "frames": [], "x": NaN}\')', "a NaN constant"),
    _proto("lone-surrogate", 'raw(b\'{"t": "batch", "nonce": "\' + nonce.encode() + '
           'b\'", "frames": [], "x": "\\\\ud800"}\')', "a lone surrogate escape"),
    _proto("deep-json", 'raw(b"[" * 200000 + b"]" * 200000)',
           "JSON nested 200,000 deep"),
    _proto("deep-object-in-frame", '''
nested = []
for i in range(100):
    nested = [nested]
batch(frame(1, payload={"prompt": nested}))''', "a payload nested 100 deep"),
    _proto("oversized-header", 'sock.sendall(struct.pack(">I", 0xFFFFFFFF) + b"{")',
           "a length header of 4 GiB"),
    _proto("oversized-message", 'send({"t": "batch", "nonce": nonce, "frames": [], '
           '"pad": "x" * 9000000})', "a 9 MB message"),
    _proto("huge-wave", "batch(*[frame(i + 1, occurrence=i) for i in range(5000)])",
           "a wave of 5000 calls"),
    _proto("wave-bytes", '''
pad = "x" * 1000000
for i in range(24):
    send({"t": "batch", "nonce": nonce, "more": True,
          "frames": [frame(i + 1, occurrence=i, payload={"prompt": pad})]})''',
           "an unfinished wave of 24 MB in 1 MB messages (host memory)"),
    _proto("more-forever", '''
for i in range(5000):
    send({"t": "batch", "nonce": nonce, "frames": [frame(i + 1, occurrence=i)], "more": True})''',
           "a wave continued past the wave limit"),
    _proto("result-malformed-logs", 'send({"t": "result", "nonce": nonce, "ok": True, '
           '"result": 1, "logs": {"a": 1}})', "a result whose logs are a dict"),
    _proto("result-error-not-object", 'send({"t": "result", "nonce": nonce, "ok": False, '
           '"error": [1]})', "a failed result without an error object"),
    _proto("result-oversized", 'send({"t": "result", "nonce": nonce, "ok": True, '
           '"result": "r" * 3000000, "logs": []})', "a result past the output limit"),
    _proto("race-commit-no-lookup", 'batch(frame(1, kind="race_commit", winner=0))',
           "a race commit at a call site"),
    _proto("second-connection", '''
socket = imp("socket")
other = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
other.connect("/rpc/rpc.sock")
body = json.dumps({"t": "batch", "nonce": nonce, "frames": [frame(1)]}).encode()
other.sendall(struct.pack(">I", len(body)) + body)
batch()''', "a second connection speaking for the sandbox"),
    _proto("connection-flood", '''
socket = imp("socket")
held = []
for i in range(40):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("/rpc/rpc.sock")
        held.append(s)
    except OSError:
        break
batch()''', "40 connections to the host's socket"),
    _proto("empty-batch-flood", '''
body = json.dumps({"t": "batch", "nonce": nonce, "frames": [], "more": True}).encode()
chunk = (struct.pack(">I", len(body)) + body) * 20000
end = time.monotonic() + 20
while time.monotonic() < end:
    sock.sendall(chunk)''', "keep the host parsing empty batches past the deadline",
           error="SandboxTimeout", timeout=3.0),
    _proto("slowloris", '''
sock.sendall(struct.pack(">I", 1000))
for i in range(40):
    sock.sendall(b" ")
    time.sleep(0.2)''', "a message trickled a byte at a time past the deadline",
           error="SandboxTimeout", timeout=3.0),
    _proto("half-closed-write", '''
socket = imp("socket")
sock.shutdown(socket.SHUT_WR)
time.sleep(10)''', "shut the write side and linger",
           error=None, statuses=frozenset({"stopped", "failed"}), timeout=4.0),
    _proto("stop-reading-answers", '''
socket = imp("socket")
sock.shutdown(socket.SHUT_RD)
for i in range(50):
    batch(frame(i + 1, occurrence=i))
    time.sleep(0.01)''', "stop reading while the host answers 50 calls",
           error=None, statuses=frozenset({"stopped", "failed"}), calls=50, timeout=4.0),
    _proto("error-field-huge", '''
send({"t": "result", "nonce": nonce, "ok": False, "logs": [], "error": {
    "type": "ValueError", "message": "m", "identity": "i" * 3500000}})''',
           "an error identity of 3.5 MB (it went whole into the stored report and --json)"),
    _proto("error-status-huge-number", '''
send({"t": "result", "nonce": nonce, "ok": False, "logs": [], "error": {
    "type": "ValueError", "message": "m", "status": 10 ** 4000}})''',
           "an error status of 4000 digits"),
    _proto("log-line-huge", '''
send({"t": "result", "nonce": nonce, "ok": True, "result": 1, "logs": ["l" * 3000000]})''',
           "one log line of 3 MB"),
    _proto("logs-too-many", '''
send({"t": "result", "nonce": nonce, "ok": True, "result": 1, "logs": ["l"] * 5000})''',
           "5000 log lines (the runtime keeps 200)"),
    _proto("payload-too-many-values", "batch(frame(1, payload={\"prompt\": [0] * 300000}))",
           "a payload of 300,000 values (host memory: a JSON list of small values is many "
           "times larger as Python objects)"),
    _proto("payload-past-frame-bytes", "batch(frame(1, payload={\"prompt\": \"p\" * 2000000}))",
           "a 2 MB payload in one frame (the runtime holds frames to 1 MiB)"),
    _proto("wave-values", '''
for i in range(12):
    send({"t": "batch", "nonce": nonce, "more": i < 11, "frames": [
        frame(i + 1, occurrence=i, payload={"prompt": [{}] * 90000})]})''',
           "a wave of 12 frames, each of 90,000 empty objects (within the byte limits, "
           "a gigabyte of host memory as parsed objects)",
           timeout=60.0),  # parsed and counted: about 4 s of host CPU, over 20 s on a busy CI
    _proto("frame-unknown-field", "batch(frame(1, note=\"x\" * 1000))",
           "a frame field no frame kind has"),
    _proto("message-unknown-field", 'send({"t": "batch", "nonce": nonce, "frames": [], '
           '"pad": "x" * 1000})', "a message field no message kind has"),
    _proto("seq-past-number", "batch(frame(2 ** 62))", "a sequence number past 2**53"),
    _proto("race-branch-payload-huge", '''
send({"t": "batch", "nonce": nonce, "frames": [{"seq": 1, "kind": "race_lookup",
      "site": site, "path": [], "occurrence": 0, "branches": [
      {"site": site, "capability": "text.generate", "payload": {"p": "x" * 2000000},
       "take": 1}]}]})''', "a race branch carrying a 2 MB payload"),
    _proto("payload-not-object", 'batch(frame(1, payload="rm -rf /"))',
           "a call whose payload is a string", error=None),
    _proto("capability-null", "batch(frame(1, capability=None))",
           "a call without a capability"),
    _proto("frames-after-result", '''
send({"t": "result", "nonce": nonce, "ok": True, "result": "early", "logs": []})
for i in range(50):
    batch(frame(i + 1, occurrence=i))''', "calls after its own result", error=None,
           statuses=frozenset({"succeeded", "stopped"})),
    _proto("race-lookup-huge", '''
send({"t": "batch", "nonce": nonce, "frames": [{"seq": 1, "kind": "race_lookup",
      "site": site, "path": [], "occurrence": 0, "branches": [None] * 5000}]})''',
           "a race lookup with 5000 branches at a call site"),
    _proto("overflowing-numbers", '''
raw(b'{"t": "result", "nonce": "' + nonce.encode() + b'", "ok": true, '
    b'"result": {"x": 1e999, "y": -1e999, "z": 1' + b"0" * 4000 + b'}, "logs": []}')''',
           "numbers past float and int-parsing limits in a result", error=None,
           statuses=frozenset({"succeeded", "stopped"})),
    _proto("scm-rights-fds", '''
socket, array = imp("socket"), imp("array")
fds = [os.open("/dev/null", os.O_RDONLY) for i in range(4)]
body = json.dumps({"t": "batch", "nonce": nonce, "frames": []}).encode()
data = struct.pack(">I", len(body)) + body
for i in range(10):
    sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
batch(frame(1, site="nope"))''', "pass 40 file descriptors to the host over the socket"),
    _proto("out-of-band-bytes", '''
for i in range(50):
    try:
        sock.send(b"!", 1)  # MSG_OOB
    except OSError:
        break
batch(frame(1, site="nope"))''', "out-of-band bytes on the Unix socket"),
    attack("race-branch-unhashable-site", "protocol", '''
        if args.get("never"):
            await ctx.race([ctx.run("text.generate", {"prompt": "a"})])
        sched = g["_SCHEDULER"]
        sched.channel.send({"t": "batch", "nonce": sched.nonce, "frames": [
            {"seq": 1, "kind": "race_lookup", "site": "orchestrate/if0/#0", "path": [],
             "occurrence": 0, "branches": [{"site": ["unhashable"]}, {"site": {"a": 1}}]}]})
        imp("time").sleep(1)
        return "not stopped"
        ''', "race branches whose site is a list or a dict (crashed the host's handler)",
           statuses=frozenset({"succeeded", "stopped"})),
    attack("race-winner-never-called", "protocol", '''
        if args.get("never"):
            await ctx.race([ctx.run("text.generate", {"prompt": "a"})])
        sched = g["_SCHEDULER"]
        where = {"site": "orchestrate/if0/#0", "path": [], "occurrence": 0}
        sched.channel.send({"t": "batch", "nonce": sched.nonce, "frames": [
            {"seq": 1, "kind": "race_lookup", **where, "branches": [
                {"site": "orchestrate/if0/#1", "capability": "text.generate",
                 "payload": {"prompt": "a"}, "take": 1}]},
            {"seq": 2, "kind": "race_commit", **where, "winner": 0}]})
        imp("time").sleep(2)
        return "not stopped"
        ''', "a race decision for a branch whose first call the host never saw (it would "
           "be frozen for every later revision)", error="SandboxProtocolError",
           statuses=frozenset({"stopped"})),
    attack("race-winner-described-falsely", "protocol", '''
        if args.get("never"):
            await ctx.race([ctx.run("text.generate", {"prompt": "a"})])
        sched = g["_SCHEDULER"]
        where = {"site": "orchestrate/if0/#0", "path": [], "occurrence": 0}
        def ask(frame):
            sched.channel.send({"t": "batch", "nonce": sched.nonce, "frames": [frame]})
            return sched.channel.receive()
        ask({"seq": 1, "kind": "race_lookup", **where, "branches": [
            {"site": "orchestrate/if0/#1", "capability": "text.generate",
             "payload": {"prompt": "zzz"}, "take": 1}]})
        ask({"seq": 2, "kind": "call", "site": "orchestrate/if0/#1", "path": [0],
             "occurrence": 0, "capability": "text.generate", "payload": {"prompt": "a"},
             "take": 1})
        ask({"seq": 3, "kind": "race_commit", **where, "winner": 0})
        return "not stopped"
        ''', "a race decision whose winner is described with another payload than the call "
           "the host answered (it was frozen, and every later revision of the honest script "
           "stopped at the race)", error="SandboxProtocolError", calls=1,
           statuses=frozenset({"stopped"})),
    attack("race-lookups-never-decided", "protocol", '''
        if args.get("never"):
            for i in range(1000):
                await ctx.race([ctx.run("text.generate", {"prompt": "a"}),
                                ctx.run("text.generate", {"prompt": "b"})])
        sched = g["_SCHEDULER"]
        site = "orchestrate/if0/for0/#0"
        branch = {"site": "orchestrate/if0/for0/#1" + "x" * 4000, "capability": "t",
                  "payload": None, "take": 1}
        for i in range(40):
            sched.channel.send({"t": "batch", "nonce": sched.nonce, "frames": [
                {"seq": i + 1, "kind": "race_lookup", "site": site, "path": [],
                 "occurrence": i, "branches": [branch] * 1000}]})
            sched.channel.receive()
        return "not stopped"
        ''', "race lookups never committed, each holding 1000 long branch sites on the "
           "host (1.6 GB of host memory from one sandbox before they were bounded)",
           error="SandboxProtocolError", statuses=frozenset({"stopped"}), timeout=30.0),
    _proto("error-type-forged", '''
send({"t": "result", "nonce": nonce, "ok": False, "logs": [], "error": {
    "type": "AttemptUnresolved", "code": "attempt_unresolved", "message": "m",
    "identity": "orchestrate/if0/#0@:0"}})''', "a script ending with one of the host's own "
           "safety stops (how a run is settled and repaired follows its type)",
           error="ScriptError", statuses=frozenset({"failed"})),
    _proto("capability-error-forged", '''
send({"t": "result", "nonce": nonce, "ok": False, "logs": [], "error": {
    "type": "CapabilityError", "code": "quota_exceeded", "message": "m", "charged": "no",
    "identity": "orchestrate/if0/#0@:0"}})''', "a provider error for a call the host never "
           "answered with one", error="ScriptError", statuses=frozenset({"failed"})),
    _proto("result-error-field-types", '''
send({"t": "result", "nonce": nonce, "ok": False, "logs": [], "error": {
    "type": "ValueError", "message": "m", "identity": 7, "line": True,
    "capability": ["x"], "code": {"a": 1}, "status": [1]}})''',
           "error fields of the wrong types (a number identity crashed the report): each "
           "field is held to its type, the run stops"),
]
