"""Checker bypasses: attributes, introspection, format strings, unicode spellings."""

from __future__ import annotations

from .corpus import Attack, attack

_READ = 'return open(args["secret_file"]).read()\n'

CHECKER: list[Attack] = [
    attack("globals-of-capabilityerror", "checker", _READ,
           "CapabilityError.__init__.__globals__ to the real builtins, then read a host file"),
    attack("traceback-frame-walk", "checker", _READ, route="traceback",
           tries="a caught error's __traceback__.tb_frame.f_back.f_globals"),
    attack("subclasses-wrap-close", "checker", _READ, route="subclasses",
           tries="().__class__.__base__.__subclasses__() to os._wrap_close's globals"),
    attack("builtin-self-is-builtins", "checker", '''
        real = isinstance.__self__
        return real.open(args["secret_file"]).read()
        ''', route=None, tries="isinstance.__self__ is the builtins module"),
    attack("format-string-globals", "checker", '''
        return "{0.__init__.__globals__[__builtins__]}".format(CapabilityError)[:200]
        ''', route=None, tries="str.format field lookups reach __globals__"),
    attack("format-map-class", "checker", '''
        return "{a.__class__.__mro__}".format_map({"a": args})
        ''', route=None, tries="format_map with attribute fields"),
    attack("percent-format-args", "checker", '''
        return args["tmpl"] % args
        ''', route=None, tries="%-formatting with a template from args"),
    attack("fullwidth-dunder-attributes", "checker", '''
        g = CapabilityError.__ｉｎｉｔ__.__ｇｌｏｂａｌｓ__
        return g["__builtins__"].__ｄｉｃｔ__["open"](args["secret_file"]).read()
        ''', route=None, tries="fullwidth spellings Python NFKC-normalises to __init__"),
    attack("fullwidth-getattr", "checker", '''
        f = ｇｅｔａｔｔｒ(CapabilityError, "__init__")
        return str(f)
        ''', route=None, tries="a fullwidth getattr (NFKC: getattr)"),
    attack("getattr-built-name", "checker", '''
        f = getattr(CapabilityError, "__in" + "it__")
        return getattr(f, "__glo" + "bals__")["__builtins__"]["open"](args["secret_file"]).read()
        ''', route=None, tries="getattr with a name built at run time"),
    attack("vars-dir-of-ctx", "checker", '''
        return [str(vars(ctx)), dir(ctx)]
        ''', route=None, tries="vars() and dir() of ctx"),
    attack("type-mro-object", "checker", '''
        return str(type(args).mro()[-1].__subclasses__())[:100]
        ''', route=None, tries="type() and .mro() up to object"),
    attack("eval-exec-compile", "checker", '''
        return eval("__import__('os').listdir('/')")
        ''', route=None, tries="eval of an import"),
    attack("import-os", "checker", '''
        import os
        return os.listdir(args["victim"])
        ''', route=None, tries="a plain import statement"),
    attack("ctx-private-state", "checker", '''
        ctx._log_lines = 1000000
        for i in range(100000):
            ctx.log("x" * 2000)
        return ctx.__class__.__name__
        ''', route=None, tries="ctx's private fields, then a log flood"),
    attack("exception-context-chain", "checker", '''
        try:
            {}["missing"]
        except KeyError as e:
            return str(e.__context__) + str(e.__traceback__.tb_frame.f_globals)[:100]
        ''', route=None, tries="__context__ and __traceback__ of a caught error"),
    attack("site-forgery", "checker", '''
        run = ctx.run
        return await run("text.generate", {"prompt": "forged"}, _site="forged/#0")
        ''', route=None, tries="forge the host's _site annotation through an alias",
        statuses=frozenset({"stopped"}), error="SandboxProtocolError"),
    attack("match-class-pattern", "checker", '''
        match CapabilityError:
            case type(__init__=init):
                return str(init)
        return 0
        ''', route=None, tries="a class pattern reads attributes by name"),
    attack("finally-swallows-stop", "checker", '''
        run = ctx.run
        try:
            return await run("text.generate", {"prompt": "x"}, _site="nope/#0")
        finally:
            return "swallowed"
        ''', route=None, tries="return in finally discards the host's safety stop",
        statuses=frozenset({"stopped"}), error="SandboxProtocolError"),
    # Accepted, and must be harmless when run: memory and CPU within the sandbox's limits.
    attack("accepted-memory-doubling", "checker", '''
        s = "x"
        for i in range(40):
            s = s + s
        return len(s)
        ''', route=None, checker="harmless", statuses=frozenset({"failed", "stopped"}),
        tries="a checked script that doubles a string to a terabyte"),
    attack("accepted-cpu-spin", "checker", '''
        total = 0
        for i in range(1000):
            for j in range(1000):
                total = total + len(sorted(WORDS))
        return total
        ''', route=None, before='WORDS = ["b", "a", "c"] * 300\n\n\n', checker="harmless",
        statuses=frozenset({"stopped"}), error="SandboxTimeout", timeout=3.0,
        tries="a checked script that spins past its deadline"),
    attack("accepted-lone-surrogate", "checker", '''
        return {"x": chr(55296)}
        ''', route=None, checker="harmless", statuses=frozenset({"stopped"}),
        error="SandboxProtocolError", tries="a lone surrogate the host cannot encode"),
    attack("host-tag-forgery", "checker", '''
        return await __at__("forged", helper(ctx))
        ''', route=None, before='''
        async def helper(ctx):
            return await ctx.run("text.generate", {"prompt": "x"})


        ''', tries="forge the host's __at__ call-site tag to move a call to another site",
        calls=1),  # the host's own inner tag wins: the call runs at its real site
    attack("annotation-escape", "checker", '''
        return await helper(ctx, 1)
        ''', route=None, before='''
        async def helper(ctx, x: CapabilityError.__init__.__globals__ = 1):
            return x


        ''', tries="an annotation (evaluated at def time) that walks to __globals__"),
    attack("default-argument-escape", "checker", '''
        return await helper(ctx)
        ''', route=None, before='''
        async def helper(ctx, g=CapabilityError.__init__.__globals__):
            return g["__builtins__"].__dict__["open"](g["__file__"]).read()[:50]


        ''', tries="a default argument evaluated at def time reaches the runtime's globals"),
    attack("keyword-builtins", "checker", '''
        return dict(__builtins__=args, __import__=1)
        ''', route=None, tries="dunder keyword names"),
    attack("format-width-huge", "checker", '''
        return f"{1:900000000}"[:10]
        ''', route=None, statuses=frozenset({"failed", "stopped"}),
        tries="a constant format width that is never folded allocates 900 MB"),
    attack("padding-huge", "checker", '''
        n = 2 ** 29
        return [len("a".center(n)), len("b".zfill(n)), len("\\t".expandtabs(n))]
        ''', route=None, statuses=frozenset({"failed", "stopped"}),
        tries="str.center/zfill/expandtabs with a huge size from a variable"),
    attack("repeat-count-from-args", "checker", '''
        return len("x" * (args["host_pid"] + 10 ** 9))
        ''', route=None, statuses=frozenset({"failed", "stopped"}),
        tries="a string repeated a number of times from args (a gigabyte at once)"),
    attack("range-materialised-from-args", "checker", '''
        return len(list(range(args["host_pid"] + 10 ** 9)))
        ''', route=None, statuses=frozenset({"failed", "stopped"}),
        tries="list(range(n)) with n from args: eight gigabytes of pointers"),
    attack("shift-from-args", "checker", '''
        return (1 << (args["host_pid"] + 10 ** 10)).bit_length()
        ''', route=None, statuses=frozenset({"failed", "stopped"}),
        tries="a shift by an amount from args builds a 1.25 GB integer"),
    attack("power-from-args", "checker", '''
        return len(str(7 ** (args["host_pid"] + 10 ** 8)))
        ''', route=None, statuses=frozenset({"failed", "stopped"}), timeout=3.0,
        tries="a power with an exponent from args (minutes of CPU, then a huge integer)"),
    attack("address-in-payload", "checker", '''
        async def helper():
            return 1
        pending = helper()
        text = str(helper) + f"{pending}" + str(x for x in [1])
        await pending
        return text
        ''', route=None, statuses=frozenset({"succeeded", "failed", "stopped"}),
        tries="memory addresses through str() and f-strings of a function, a coroutine "
        "and an iterator (non-deterministic text that would reach a payload)"),
    attack("module-annotation-runs", "checker", '''
        return 1
        ''', route=None, before='''
        def probe(x: [len([1]) for _ in range(10 ** 8)]) -> str(1):
            return x


        ''', statuses=frozenset({"succeeded", "failed", "stopped"}),
        tries="an annotation outside orchestrate that computes when the module loads"),
    attack("accepted-terminal-escape", "checker", '''
        raise ValueError("done" + chr(27) + "]52;c;cHduZWQ=" + chr(27) + "\\\\" + chr(27) + "c")
        ''', route=None, checker="harmless", statuses=frozenset({"failed"}),
        tries="terminal sequences (OSC 52 clipboard, reset) in an error the CLI prints"),
]
