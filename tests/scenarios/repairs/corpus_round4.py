"""Round four of the repair-shape corpus: a call that lands where a moved call was committed.

A repair that inserts, drops or rebatches elements moves committed calls to other
identities; a new call then lands on an identity whose committed result the revision
has already handed to the moved call. That committed call was not edited, it moved: the
new call is new work, stored aside of its identity (``Identity.moved_aside``), and a
later revision replays it by relocation. Where the new call comes *before* the call
that moves (sequential calls: nothing is known of what comes next), the slot in the way
still stands and the run stops as a divergence: these shapes say so too.
Registered into ``corpus.SHAPES`` when ``corpus`` imports this module.
"""

from __future__ import annotations

from .corpus import Step, _s, shape

LOOP_V1 = _s('''
    async def orchestrate(ctx, args):
        shots = []
        for prompt in args["prompts"][:8]:
            shots.append(await ctx.run("image.generate", {"prompt": prompt}))
        raise RuntimeError("the client wants another set")
''')
BIRDS = {"prompts": ["a heron", "a crane", "a stork"]}

shape("loop_drop_first_then_new_in_its_place", "landing", (
    "A loop's first element is dropped and a new one takes the second place: the crane "
    "moves to occurrence 0 (relocates), the new kite lands on occurrence 1 where the crane "
    "was committed: new work stored aside, not a divergence; the heron is an orphan."),
    (Step(LOOP_V1, "failed", 3, "RuntimeError", {"succeeded": 3}, args=BIRDS),
     Step(_s('''
        async def orchestrate(ctx, args):
            shots = []
            for prompt in args["prompts"][:8]:
                shots.append(await ctx.run("image.generate", {"prompt": prompt}))
            return len(shots)
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, orphans=1,
          args={"prompts": ["a crane", "a kite", "a stork"]}),
     Step(_s('''
        async def orchestrate(ctx, args):
            shots = []
            for prompt in args["prompts"][:8]:
                shots.append(await ctx.run("image.generate", {"prompt": prompt}))
            return len(shots)
     '''), "succeeded", 0, calls={"replayed": 3}, args={"prompts": ["a crane", "a kite",
                                                                   "a stork"]})),
    args=BIRDS, celery=True)

shape("loop_insert_front_stops_before_anything", "landing", (
    "A new element at the front of a sequential loop: the call at occurrence 0 carries "
    "a new payload where the heron is committed, and nothing yet says the heron moves "
    "(it comes later): ReplayDivergence, 0 paid. The model then puts the new one last."),
    (Step(LOOP_V1, "failed", 3, "RuntimeError", {"succeeded": 3}, args=BIRDS),
     Step(_s('''
        async def orchestrate(ctx, args):
            shots = []
            for prompt in ["a kite", *args["prompts"][:8]]:
                shots.append(await ctx.run("image.generate", {"prompt": prompt}))
            return len(shots)
     '''), "stopped", 0, "ReplayDivergence", {"executed": 0}),
     Step(_s('''
        async def orchestrate(ctx, args):
            shots = []
            for prompt in [*args["prompts"][:8], "a kite"]:
                shots.append(await ctx.run("image.generate", {"prompt": prompt}))
            return len(shots)
     '''), "succeeded", 1, calls={"replayed": 3, "executed": 1})),
    args=BIRDS)

FANOUT_V1 = _s('''
    async def orchestrate(ctx, args):
        async def gen(prompt):
            return await ctx.run("image.generate", {"prompt": prompt})

        shots = await ctx.parallel([gen(p) for p in args["prompts"][:8]])
        raise RuntimeError("the client wants another set")
''')
FANOUT = _s('''
    async def orchestrate(ctx, args):
        async def gen(prompt):
            return await ctx.run("image.generate", {"prompt": prompt})

        shots = await ctx.parallel([gen(p) for p in args["prompts"][:8]])
        return len(shots)
''')

shape("fanout_insert_middle", "landing", (
    "A fanout gets a new element in the middle: the crane and the stork move one path "
    "on, the kite lands on the crane's committed path; the wave relocates first, so the "
    "kite is new work whatever its place in the wave (1 paid, 3 replayed)."),
    (Step(FANOUT_V1, "failed", 3, "RuntimeError", {"succeeded": 3}),
     Step(FANOUT, "succeeded", 1, calls={"replayed": 3, "executed": 1},
          args={"prompts": ["a heron", "a kite", "a crane", "a stork"]}),
     Step(FANOUT, "succeeded", 0, calls={"replayed": 4},
          args={"prompts": ["a heron", "a kite", "a crane", "a stork"]})),
    args=BIRDS, celery=True)

shape("fanout_replace_and_reverse", "landing", (
    "The heron is replaced by a kite and the list reversed: the stork moves to path "
    "(0,), where the heron was; the kite lands on (2,), where the stork was committed: "
    "new work, stored aside. The heron is an orphan (1 paid, 2 replayed)."),
    (Step(FANOUT_V1, "failed", 3, "RuntimeError", {"succeeded": 3}),
     Step(FANOUT, "succeeded", 1, calls={"replayed": 2, "executed": 1}, orphans=1,
          args={"prompts": ["a stork", "a crane", "a kite"]})),
    args=BIRDS)

BATCHED_V1 = _s('''
    async def orchestrate(ctx, args):
        async def gen(prompt):
            return await ctx.run("image.generate", {"prompt": prompt})

        async def batch(chunk):
            return await ctx.parallel([gen(p) for p in chunk[:8]])

        size = args["batch"]
        prompts = args["prompts"][:8]
        await ctx.parallel([batch(prompts[i * size:(i + 1) * size]) for i in range(4)])
        if len(prompts) > 4:
            return len(prompts)
        raise RuntimeError("four are not enough")
''')
SIX = ["a heron", "a crane", "a stork", "an ibis", "a kite", "a swift"]

shape("fanout_rebatched", "landing", (
    "Batches of two become batches of three: the paths of the committed four shift "
    "((1, 0) holds the stork, which moves to (0, 2)); the ibis moves to (1, 0) and the "
    "kite lands on (1, 1), where the ibis was committed: new work. 2 paid, 4 replayed."),
    (Step(BATCHED_V1, "failed", 4, "RuntimeError", {"succeeded": 4},
          args={"batch": 2, "prompts": SIX[:4]}),
     Step(BATCHED_V1, "succeeded", 2, calls={"replayed": 4, "executed": 2},
          args={"batch": 3, "prompts": SIX}),
     Step(BATCHED_V1, "succeeded", 0, calls={"replayed": 6},
          args={"batch": 2, "prompts": SIX})),
    args={"batch": 2, "prompts": SIX[:4]}, celery=True)
