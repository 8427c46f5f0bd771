"""Opaque runtime objects: coroutine .send/.throw, futures, get_loop, tasks, frames,
generators, the scheduler's own state."""

from __future__ import annotations

from .corpus import Attack, attack

_HELPER = '''
async def helper(ctx):
    return await ctx.run("text.generate", {"prompt": "helper"})


'''

RUNTIME: list[Attack] = [
    attack("coro-send-get-loop", "runtime", '''
        tagged = helper(ctx)
        coro = getattr(tagged, "_coro", tagged)
        op = coro.send(None)
        return str(op[1].get_loop())
        ''', before=_HELPER, tries="coro.send(None) for a Future, then .get_loop()"),
    attack("coro-throw-into-helper", "runtime", '''
        tagged = helper(ctx)
        c = getattr(tagged, "_coro", tagged)
        c.send(None)
        c.throw(KeyError("injected"))
        return 1
        ''', before=_HELPER, tries="coro.throw into a running helper"),
    attack("call-object-fields-rewritten", "runtime", '''
        call = ctx.run("text.generate", {"prompt": "x"})
        call._capability = "image.generate"
        return await call
        ''', route=None, tries="rewrite a ctx.run awaitable's capability before awaiting"),
    attack("call-awaited-by-hand", "runtime", '''
        it = ctx.run("text.generate", {"prompt": "x"}).__await__()
        return str(it.send(None))
        ''', route=None, tries="drive a call's __await__ by hand to get what the loop gets"),
    attack("fanout-get-loop", "runtime", '''
        return str(ctx.parallel([helper(ctx)]).get_loop())
        ''', route=None, before=_HELPER, tries="a fanout awaitable's event loop"),
    attack("task-stack-frames", "runtime", '''
        sched = g["_SCHEDULER"]
        frame = sched.current.coro.cr_frame
        names = []
        for i in range(50):
            if frame is None:
                break
            names.append(frame.f_code.co_name)
            frame = frame.f_back
        return names
        ''', tries="the current task's coroutine frames"),
    attack("generator-frame-globals", "runtime", '''
        gen = (x for x in [1])
        return str(gen.gi_frame.f_globals["__builtins__"])[:300]
        ''', route=None, tries="a generator expression's frame and globals"),
    attack("asyncio-loop-subprocess", "runtime", '''
        asyncio = imp("asyncio")
        async def shell():
            proc = await asyncio.create_subprocess_shell(
                "cat " + args["secret_file"] + "; id", stdout=-1, stderr=-2)
            out, _ = await proc.communicate()
            return out.decode()
        return asyncio.new_event_loop().run_until_complete(shell())
        ''', tries="an event loop of its own and loop.subprocess_shell"),
    attack("scheduler-ready-injection", "runtime", '''
        sched = g["_SCHEDULER"]
        task = sched.current
        sched.ready.append((task, "injected", None))
        sched.ready.append((task, None, KeyError("x")))
        return await ctx.run("text.generate", {"prompt": "x"})
        ''', tries="resume its own task twice through the scheduler's ready queue",
        calls=1),
    attack("frame-locals-rewrite-job", "runtime", '''
        frame = e_frame = None
        try:
            1 // 0
        except ZeroDivisionError as e:
            e_frame = e.__traceback__.tb_frame
        frame = e_frame
        for i in range(40):
            if frame is None or "job" in frame.f_locals:
                break
            frame = frame.f_back
        job = frame.f_locals["job"] if frame is not None else {}
        job["nonce"] = "forged"
        g["_SCHEDULER"].nonce = "forged"
        return await ctx.run("text.generate", {"prompt": "x"})
        ''', tries="rewrite the runtime's job and nonce through frame locals",
        statuses=frozenset({"stopped"}), error="SandboxProtocolError"),
    attack("settrace-hooks-runtime", "runtime", '''
        sys = imp("sys")
        seen = []
        def tracer(frame, event, arg):
            if len(seen) < 20:
                seen.append(frame.f_code.co_name)
            return None
        sys.settrace(tracer)
        sys.setprofile(tracer)
        await ctx.run("text.generate", {"prompt": "x"})
        return seen
        ''', tries="trace the runtime's own frames (nonce, channel)", calls=1),
    attack("result-message-early", "runtime", '''
        sched = g["_SCHEDULER"]
        sched.channel.send({"t": "result", "nonce": sched.nonce, "ok": True,
                            "result": open(args["secret_file"]).read(), "logs": []})
        return 1
        ''', tries="send a result early that carries a host file"),
    attack("race-commit-forged-winner", "runtime", '''
        if args.get("never"):
            await ctx.race([ctx.run("text.generate", {"prompt": "a"})])
        sched = g["_SCHEDULER"]
        site = "orchestrate/if0/#0"
        sched.channel.send({"t": "batch", "nonce": sched.nonce, "frames": [
            {"seq": 1, "kind": "race_commit", "site": site, "path": [], "occurrence": 0,
             "winner": 0}]})
        imp("time").sleep(3)
        return "not stopped"
        ''', tries="commit a race that was never looked up",
        statuses=frozenset({"stopped"}), error="SandboxProtocolError"),
    attack("pipeline-of-builtins", "runtime", '''
        return await ctx.pipeline([print, open], args["secret_file"])
        ''', route="globals", tries="ctx.pipeline stages that are builtins, not helpers"),
    attack("log-flood-private-limit", "runtime", '''
        ctx._log_lines = 10 ** 9
        for i in range(3000):
            ctx.log("y" * 1999)
        return 1
        ''', route=None, tries="raise ctx's log-line limit and flood the host with logs",
        statuses=frozenset({"stopped", "failed"})),
    attack("result-nested-past-the-limit", "runtime", '''
        value = []
        for i in range(40):
            value = [value]
        return value
        ''', route=None, checker="harmless", statuses=frozenset({"failed"}),
        error="ValueError", tries="a result nested 40 deep, which the checker and the "
        "runtime accepted and the host refused as a protocol error (one limit now)"),
    attack("payload-nested-past-the-limit", "runtime", '''
        value = {"prompt": "x"}
        for i in range(40):
            value = {"prompt": "x", "more": value}
        return await ctx.run("text.generate", value)
        ''', route=None, checker="harmless", statuses=frozenset({"failed"}),
        error="ValueError", tries="a payload nested 40 deep"),
]
