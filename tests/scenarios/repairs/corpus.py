"""The repair-shape corpus: v1 fails partway, v2 is the repair a model would write.

Every shape runs on ONE run id: v1 (fails after committing some calls), then v2
(the repair), and where it tells something a v3. Each step states what it must
cost and how it must end, counted from the provider log (one line per real
provider execution: the ground truth for "paid"):

* ``paid``: provider executions this step added (rejected attempts included);
* ``status`` / ``error``: the revision's outcome and its error type;
* ``calls``: the report's call counts that matter for the shape (a subset);
* ``gate``: the gate's counterexample kinds; ``relocations``: how many it made;
* ``orphans``: committed identities the step did not reach;
* ``warned``: semantic-repeat warnings (paid repeats the policy allowed, by name);
* ``takes``: paid executions the script declared as further takes (``take=N``);
* ``races_replayed``: committed race decisions the step replayed.

Properties checked generically on every step (``runner.py``): no payload paid in
an earlier revision is paid again unless the step declared a take or the ledger
policy warned about it (no silent duplicate); no call is ever handed a result
committed for another capability, call expression or payload (no wrong reuse); no
slot serves two calls of one revision; no semantic-repeat warning without a repeat
actually paid.

``xfail`` names a shape on which the core does something wrong: its steps state
what the documented contract says, and the test is expected to fail, strictly,
until the core is fixed.

The local provider rejects the size "999x999" (and an empty prompt): a paid
attempt that fails, which is how most v1 scripts fail partway.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from typing import Any

BAD = "999x999"


def _s(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


@dataclass(frozen=True)
class Step:
    script: str
    status: str
    paid: int
    error: str | None = None
    calls: dict[str, int] = field(default_factory=dict)
    gate: tuple[str, ...] = ()
    relocations: int | None = None
    orphans: int | None = None
    warned: int = 0
    takes: int = 0
    races_replayed: int | None = None  # committed race decisions this step replayed
    args: Any = None  # None: the shape's args
    ledger_policy: str | None = None
    orphan_policy: str | None = None
    approved_takes: tuple[str, ...] = ()  # a person approved further takes of these

    def envelope_fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {}
        if self.ledger_policy:
            fields["ledger_policy"] = self.ledger_policy
        if self.orphan_policy:
            fields["orphan_policy"] = self.orphan_policy
        if self.approved_takes:
            fields["approved_takes"] = list(self.approved_takes)
        return fields


@dataclass(frozen=True)
class Shape:
    name: str
    family: str
    why: str  # what a model did, what must happen, and why that is safe
    steps: tuple[Step, ...]
    args: Any = field(default_factory=dict)
    settings: dict[str, str] = field(default_factory=dict)  # Settings overrides
    celery: bool = False  # also run through the Celery stack
    xfail: str | None = None  # the exact wrong behaviour, when the core has it
    latency: dict[str, float] = field(default_factory=dict)  # provider delay by prompt
    rerun_paid: int = 0  # what rerunning the last step costs (rejected calls it retries)

    def delay(self, capability: str, payload: dict[str, Any]) -> float:
        return self.latency.get(str(payload.get("prompt")), 0.0)

    def args_for(self, step: Step) -> Any:
        return self.args if step.args is None else step.args


# ---- shared v1 scripts -----------------------------------------------------------------------

SEQ3_V1 = _s(f'''
    async def orchestrate(ctx, args):
        hero = await ctx.run("image.generate", {{"prompt": "hero on a cliff"}})
        villain = await ctx.run("image.generate", {{"prompt": "villain in a tower"}})
        crowd = await ctx.run("image.generate", {{"prompt": "crowd", "size": "{BAD}"}})
        return [hero["artifact"]["id"], villain["artifact"]["id"], crowd["artifact"]["id"]]
''')

FANOUT4_V1 = _s(f'''
    async def orchestrate(ctx, args):
        shots = args["shots"][:4]

        async def gen(i, shot):
            size = "{BAD}" if i == 3 else "1024x1024"
            return await ctx.run("image.generate", {{"prompt": shot, "size": size}})

        images = await ctx.parallel([gen(i, s) for i, s in enumerate(shots)])
        return [img["artifact"]["id"] for img in images[:4]]
''')
SHOTS = {"shots": ["dawn harbour", "noon market", "dusk alley", "night roofs"]}

TWO_STEP_V1 = _s(f'''
    async def orchestrate(ctx, args):
        prompt = "hero on a cliff"
        size = "1024x1024"
        hero = await ctx.run("image.generate", {{"prompt": prompt, "size": size}})
        poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
        return [hero["artifact"]["id"], poster["artifact"]["id"]]
''')

HELPER_PAIR_V1 = _s(f'''
    async def orchestrate(ctx, args):
        async def gen(prompt):
            return await ctx.run("image.generate", {{"prompt": prompt}})

        first = await gen("a red door")
        second = await gen("a blue door")
        cover = await ctx.run("image.generate", {{"prompt": "cover", "size": "{BAD}"}})
        return [first["artifact"]["id"], second["artifact"]["id"], cover["artifact"]["id"]]
''')

RACE_V1 = _s(f'''
    async def orchestrate(ctx, args):
        async def attempt(size):
            return await ctx.run("image.generate", {{"prompt": "key art", "size": size}})

        art = await ctx.race([attempt(s) for s in ["{BAD}", "1024x1024", "1x1"]])
        poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
        return [art["artifact"]["id"], poster["artifact"]["id"]]
''')


def _race_v2(sizes: list[str]) -> str:
    listed = ", ".join(f'"{s}"' for s in sizes)
    return _s(f'''
        async def orchestrate(ctx, args):
            async def attempt(size):
                return await ctx.run("image.generate", {{"prompt": "key art", "size": size}})

            art = await ctx.race([attempt(s) for s in [{listed}]])
            poster = await ctx.run("image.generate", {{"prompt": "poster"}})
            return [art["artifact"]["id"], art["size"], poster["artifact"]["id"]]
    ''')


LOOP3_TEXT_V1 = _s('''
    async def orchestrate(ctx, args):
        captions = []
        for i in range(3):
            captions.append(await ctx.run("text.generate", {"prompt": f"caption {i}"}))
        raise RuntimeError("the editor wants more captions")
''')


def _loop_text(n: int) -> str:
    return _s(f'''
        async def orchestrate(ctx, args):
            captions = []
            for i in range({n}):
                captions.append(await ctx.run("text.generate", {{"prompt": f"caption {{i}}"}}))
            return [c["text"] for c in captions]
    ''')


CONST_LOOP_V1 = _s('''
    async def orchestrate(ctx, args):
        takes = []
        for i in range(3):
            takes.append(await ctx.run("image.generate", {"prompt": "the same retake"}))
        raise RuntimeError("review failed after three takes")
''')
CONST_LOOP_V2 = _s('''
    async def orchestrate(ctx, args):
        takes = []
        for i in range(6):
            takes.append(await ctx.run("image.generate", {"prompt": "the same retake"}))
        return len(takes)
''')

# ---- the corpus ------------------------------------------------------------------------------

SHAPES: list[Shape] = []


def shape(*args: Any, **kwargs: Any) -> Shape:
    made = Shape(*args, **kwargs)
    assert all(s.name != made.name for s in SHAPES), made.name
    SHAPES.append(made)
    return made


# -- parallelise --

shape("seq_to_parallel", "parallelise", (
    "Three sequential calls; the third is rejected. The model wraps all three in "
    "ctx.parallel and fixes the third. Sites keep their names (the calls are direct "
    "calls of orchestrate in the same order) but the fanout path changes: the committed "
    "two replay through rule 2 (same call expression and payload), the fixed one is paid."),
    (Step(SEQ3_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero, villain, crowd = await ctx.parallel([
                ctx.run("image.generate", {"prompt": "hero on a cliff"}),
                ctx.run("image.generate", {"prompt": "villain in a tower"}),
                ctx.run("image.generate", {"prompt": "crowd", "size": "1024x1024"}),
            ])
            return [hero["artifact"]["id"], villain["artifact"]["id"], crowd["artifact"]["id"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1})),
    celery=True)

shape("parallel_to_seq", "parallelise", (
    "The reverse: a ctx.parallel of three calls (one rejected; parallel lets the others "
    "finish and commit) rewritten as three sequential awaits. Paths shrink from (i,) to "
    "(); the committed two replay by call expression and payload."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            hero, villain, crowd = await ctx.parallel([
                ctx.run("image.generate", {{"prompt": "hero on a cliff"}}),
                ctx.run("image.generate", {{"prompt": "villain in a tower"}}),
                ctx.run("image.generate", {{"prompt": "crowd", "size": "{BAD}"}}),
            ])
            return [hero["artifact"]["id"], villain["artifact"]["id"]]
     '''), "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
            villain = await ctx.run("image.generate", {"prompt": "villain in a tower"})
            crowd = await ctx.run("image.generate", {"prompt": "crowd", "size": "1024x1024"})
            return [hero["artifact"]["id"], villain["artifact"]["id"], crowd["artifact"]["id"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1})))

shape("fanout_split_2x2", "parallelise", (
    "A 4-way fanout (last shot rejected) split into 2x2 nested ctx.parallel through one "
    "helper called from a comprehension. The helper chain is new (one relocation), the "
    "paths go from (i,) to (i//2, i%2); every committed shot replays by payload."),
    (Step(FANOUT4_V1, "failed", 4, "CapabilityError", {"succeeded": 3, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            shots = args["shots"][:4]

            async def gen(i, shot):
                size = "1024x1024"
                return await ctx.run("image.generate", {"prompt": shot, "size": size})

            async def pair(batch):
                return await ctx.parallel([gen(i, s) for i, s in enumerate(batch[:2])])

            halves = await ctx.parallel([pair(b) for b in [shots[0:2], shots[2:4]]])
            return [img["artifact"]["id"] for half in halves[:2] for img in half[:2]]
     '''), "succeeded", 1, calls={"replayed": 3, "executed": 1}, relocations=1)),
    args=SHOTS)

shape("fanout_split_2x2_two_callers", "parallelise", (
    "The same split written with the helper called twice (pair(shots[0:2]), "
    "pair(shots[2:4])): the frozen site now has two candidates with its call expression. "
    "The gate cannot tell which one stands for it and stops (ambiguous) before any "
    "sandbox: safe, though a payload-level match would have replayed."),
    (Step(FANOUT4_V1, "failed", 4, "CapabilityError", {"succeeded": 3, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            shots = args["shots"][:4]

            async def gen(i, shot):
                size = "1024x1024"
                return await ctx.run("image.generate", {"prompt": shot, "size": size})

            async def pair(batch):
                return await ctx.parallel([gen(i, s) for i, s in enumerate(batch[:2])])

            halves = await ctx.parallel([pair(shots[0:2]), pair(shots[2:4])])
            return [img["artifact"]["id"] for half in halves[:2] for img in half[:2]]
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("ambiguous",))),
    args=SHOTS)

shape("parallel_insert_front_helpers", "parallelise", (
    "A ctx.parallel of three different helpers (the last rejected); the model inserts a "
    "fourth helper at the front and fixes the last. Each helper call is its own site; "
    "the committed two relocate by chain (helper arguments + call expression) and "
    "replay at their shifted paths; the new front branch and the fixed one are paid."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            async def hero():
                return await ctx.run("image.generate", {{"prompt": "hero"}})

            async def villain():
                return await ctx.run("image.generate", {{"prompt": "villain"}})

            async def crowd():
                return await ctx.run("image.generate", {{"prompt": "crowd", "size": "{BAD}"}})

            cast = await ctx.parallel([hero(), villain(), crowd()])
            return [c["artifact"]["id"] for c in cast[:3]]
     '''), "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def establishing():
                return await ctx.run("image.generate", {"prompt": "establishing shot"})

            async def hero():
                return await ctx.run("image.generate", {"prompt": "hero"})

            async def villain():
                return await ctx.run("image.generate", {"prompt": "villain"})

            async def crowd():
                return await ctx.run("image.generate", {"prompt": "crowd"})

            cast = await ctx.parallel([establishing(), hero(), villain(), crowd()])
            return [c["artifact"]["id"] for c in cast[:4]]
     '''), "succeeded", 2, calls={"replayed": 2, "executed": 2}, relocations=2)))

COMPREHENSION_V1 = _s('''
    async def orchestrate(ctx, args):
        async def gen(prompt):
            return await ctx.run("image.generate", {"prompt": prompt})

        doors = await ctx.parallel([gen(p) for p in args["prompts"][:8]])
        raise RuntimeError("the art director wants a green door first")
''')
DOORS = {"prompts": ["a red door", "a blue door", "a grey door"]}

shape("comprehension_insert_front", "parallelise", (
    "A comprehension-driven fanout gets a new element at the front: every committed "
    "payload shifts to the next path, so the call at path (0,) now carries a new payload "
    "where a different one is committed. The wave is decided as a whole: the three "
    "shifted doors relocate first, so the committed red door moved rather than changed, "
    "and the green door at (0,) is new work stored aside (1 paid, 3 replayed). v3 (the "
    "model appends instead) replays all four, the green door from where it was stored."),
    (Step(COMPREHENSION_V1, "failed", 3, "RuntimeError", {"succeeded": 3}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            doors = await ctx.parallel([gen(p) for p in ["a green door", *args["prompts"][:8]]])
            return len(doors)
     '''), "succeeded", 1, calls={"replayed": 3, "executed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            doors = await ctx.parallel([gen(p) for p in [*args["prompts"][:8], "a green door"]])
            return len(doors)
     '''), "succeeded", 0, calls={"replayed": 4})),
    args=DOORS, celery=True)

shape("comprehension_remove_element", "parallelise", (
    "An element removed from the middle of a comprehension fanout: the later element "
    "shifts into the removed one's path and replays by payload (rule 2 is tried before "
    "the slot in the way counts as a divergence); the removed one is an orphan."),
    (Step(COMPREHENSION_V1, "failed", 3, "RuntimeError", {"succeeded": 3}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            doors = await ctx.parallel([gen(p) for p in ["a red door", "a grey door"]])
            return len(doors)
     '''), "succeeded", 0, calls={"replayed": 2, "executed": 0}, orphans=1)),
    args=DOORS)

shape("parallel_remove_literal_branch", "parallelise", (
    "A branch removed from a literal ctx.parallel list: its helper call was a frozen "
    "site of its own, and no call of the candidate has its chain any more. The gate "
    "stops (removed) before any sandbox: removing committed calls is the paper's "
    "counterexample."),
    (Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            doors = await ctx.parallel([gen("a red door"), gen("a blue door"), gen("a grey door")])
            raise RuntimeError("too many doors")
     '''), "failed", 3, "RuntimeError", {"succeeded": 3}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            doors = await ctx.parallel([gen("a red door"), gen("a grey door")])
            return len(doors)
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("removed",))))

shape("parallel_reorder_branches", "parallelise", (
    "Literal ctx.parallel branches reordered (and the rejected cover fixed): the helper "
    "calls relocate by their arguments, the branches replay at their new paths."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {{"prompt": prompt}})

            doors = await ctx.parallel([gen("a red door"), gen("a blue door")])
            cover = await ctx.run("image.generate", {{"prompt": "cover", "size": "{BAD}"}})
            return len(doors)
     '''), "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            doors = await ctx.parallel([gen("a blue door"), gen("a red door")])
            cover = await ctx.run("image.generate", {"prompt": "cover", "size": "1024x1024"})
            return [d["prompt"] for d in doors[:2]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, relocations=2)))

shape("comprehension_reorder", "parallelise", (
    "The fanout's list reversed: every payload moves to another path and replays there "
    "by payload (each is the only unused slot with its call expression and digest)."),
    (Step(COMPREHENSION_V1, "failed", 3, "RuntimeError", {"succeeded": 3}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            doors = await ctx.parallel([gen(p) for p in ["a grey door", "a blue door",
                                                         "a red door"]])
            return [d["prompt"] for d in doors[:3]]
     '''), "succeeded", 0, calls={"replayed": 3, "executed": 0})),
    args=DOORS)

# -- dag and pipeline --

DAG_V1 = _s(f'''
    async def orchestrate(ctx, args):
        async def caption(deps):
            return await ctx.run("text.generate", {{"prompt": "caption the harbour"}})

        async def plan(deps):
            return await ctx.run("storyboard.plan", {{"brief": "harbour", "shots": 2}})

        async def draw(deps):
            return await ctx.run("image.generate", {{"prompt": deps["plan"]["shots"][0],
                                                    "size": "{BAD}"}})

        graph = await ctx.dag({{"caption": (caption, []), "plan": (plan, []),
                               "draw": (draw, ["plan"])}})
        return graph["draw"]["artifact"]["id"]
''')

shape("dag_insert_node", "dag", (
    "A node inserted at the front of a ctx.dag (and the rejected draw fixed): every old "
    "node moves to the next branch index; each node is its own function, so its calls "
    "replay by payload at the shifted path. The new node and the fixed draw are paid."),
    (Step(DAG_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def mood(deps):
                return await ctx.run("text.generate", {"prompt": "mood of the harbour"})

            async def caption(deps):
                return await ctx.run("text.generate", {"prompt": "caption the harbour"})

            async def plan(deps):
                return await ctx.run("storyboard.plan", {"brief": "harbour", "shots": 2})

            async def draw(deps):
                return await ctx.run("image.generate", {"prompt": deps["plan"]["shots"][0],
                                                        "size": "1024x1024"})

            graph = await ctx.dag({"mood": (mood, []), "caption": (caption, []),
                                   "plan": (plan, []), "draw": (draw, ["plan"])})
            return graph["draw"]["artifact"]["id"]
     '''), "succeeded", 2, calls={"replayed": 2, "executed": 2})))

shape("dag_reorder_keys", "dag", (
    "The dag's dict keys reordered (draw fixed): node paths change with the key order; "
    "caption and plan replay at their new indices."),
    (Step(DAG_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def caption(deps):
                return await ctx.run("text.generate", {"prompt": "caption the harbour"})

            async def plan(deps):
                return await ctx.run("storyboard.plan", {"brief": "harbour", "shots": 2})

            async def draw(deps):
                return await ctx.run("image.generate", {"prompt": deps["plan"]["shots"][0],
                                                        "size": "1024x1024"})

            graph = await ctx.dag({"draw": (draw, ["plan"]), "plan": (plan, []),
                                   "caption": (caption, [])})
            return graph["draw"]["artifact"]["id"]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1})),
    celery=True)

PIPE_V1 = _s(f'''
    async def orchestrate(ctx, args):
        async def plan(_):
            return await ctx.run("storyboard.plan", {{"brief": "harbour", "shots": 2}})

        async def draw(board):
            return await ctx.run("image.generate", {{"prompt": board["shots"][0],
                                                    "size": "{BAD}"}})

        image = await ctx.pipeline([plan, draw], None)
        return image["artifact"]["id"]
''')

shape("pipeline_stage_before", "dag", (
    "A stage inserted before the committed one (a warm-up that passes its input on): "
    "the plan stage moves from branch 0 to branch 1 and replays by payload; the new "
    "stage and the fixed draw are paid."),
    (Step(PIPE_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def warm_up(value):
                await ctx.run("text.generate", {"prompt": "warm up the harbour story"})
                return value

            async def plan(_):
                return await ctx.run("storyboard.plan", {"brief": "harbour", "shots": 2})

            async def draw(board):
                return await ctx.run("image.generate", {"prompt": board["shots"][0],
                                                        "size": "1024x1024"})

            image = await ctx.pipeline([warm_up, plan, draw], None)
            return image["artifact"]["id"]
     '''), "succeeded", 2, calls={"replayed": 1, "executed": 2})))

shape("pipeline_stage_after", "dag", (
    "A stage appended after the committed ones: the committed stages keep their paths "
    "and replay exactly; only the new review stage is paid."),
    (Step(_s('''
        async def orchestrate(ctx, args):
            async def plan(_):
                return await ctx.run("storyboard.plan", {"brief": "harbour", "shots": 2})

            async def draw(board):
                return await ctx.run("image.generate", {"prompt": board["shots"][0]})

            image = await ctx.pipeline([plan, draw], None)
            raise RuntimeError("nobody reviewed the image")
     '''), "failed", 2, "RuntimeError", {"succeeded": 2}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def plan(_):
                return await ctx.run("storyboard.plan", {"brief": "harbour", "shots": 2})

            async def draw(board):
                return await ctx.run("image.generate", {"prompt": board["shots"][0]})

            async def review(image):
                return await ctx.run("review.visual", {"image": image["artifact"]})

            verdict = await ctx.pipeline([plan, draw, review], None)
            return verdict["verdict"]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1})))

# -- insert a branch --


def _if_inserted(taken: bool) -> Shape:
    return shape(f"if_inserted_{'taken' if taken else 'not_taken'}", "insert", (
        "An if block with a new call inserted before the committed call (the poster "
        f"fixed); the branch is {'taken' if taken else 'not taken'}. A block only numbers "
        "the calls inside it, so the committed call keeps its site and replays exactly."),
        (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
         Step(_s('''
            async def orchestrate(ctx, args):
                prompt = "hero on a cliff"
                size = "1024x1024"
                if args["mood"]:
                    mood = await ctx.run("text.generate", {"prompt": "mood board"})
                hero = await ctx.run("image.generate", {"prompt": prompt, "size": size})
                poster = await ctx.run("image.generate", {"prompt": "poster"})
                return [hero["artifact"]["id"], poster["artifact"]["id"]]
         '''), "succeeded", 2 if taken else 1,
            calls={"replayed": 1, "executed": 2 if taken else 1})),
        args={"mood": taken})


_if_inserted(True)
_if_inserted(False)

shape("dead_code_with_copy", "insert", (
    "The committed call kept as dead code under a false flag, with a fresh copy of the "
    "same expression after the fixed poster. Two calls now carry the frozen call "
    "expression and neither stands where it was: the gate stops (ambiguous) rather than "
    "guess. Safe; the model must delete one of them."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            prompt = "hero on a cliff"
            size = "1024x1024"
            if args.get("legacy"):
                hero = await ctx.run("image.generate", {"prompt": prompt, "size": size})
            poster = await ctx.run("image.generate", {"prompt": "poster"})
            hero = await ctx.run("image.generate", {"prompt": prompt, "size": size})
            return [hero["artifact"]["id"], poster["artifact"]["id"]]
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("ambiguous",))))

shape("fallback_path", "insert", (
    "The rejected call wrapped in try/except CapabilityError with a fallback call. The "
    "rejected payload was never committed, so trying it again is a new (paid, again "
    "rejected) attempt and the fallback is paid too: 2 paid, the hero replays. Nothing "
    "committed is paid twice, but the rejected attempt is paid again on every later "
    "revision (a rerun costs 1): failures are not committed, so nothing remembers them."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s(f'''
        async def orchestrate(ctx, args):
            prompt = "hero on a cliff"
            size = "1024x1024"
            hero = await ctx.run("image.generate", {{"prompt": prompt, "size": size}})
            try:
                poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
            except CapabilityError:
                poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "512x512"}})
            return [hero["artifact"]["id"], poster["artifact"]["id"]]
     '''), "succeeded", 2, calls={"replayed": 1, "executed": 2, "failed": 1})),
    rerun_paid=1)

# -- reorder --

shape("swap_two_committed", "reorder", (
    "Two committed calls (different expressions) swapped: each relocates to the one "
    "candidate with its expression and replays there; the fixed cover is paid."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            title = await ctx.run("text.generate", {{"prompt": "title"}})
            blurb = await ctx.run("text.generate", {{"prompt": "blurb"}})
            cover = await ctx.run("image.generate", {{"prompt": "cover", "size": "{BAD}"}})
            return [title["text"], blurb["text"]]
     '''), "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            blurb = await ctx.run("text.generate", {"prompt": "blurb"})
            title = await ctx.run("text.generate", {"prompt": "title"})
            cover = await ctx.run("image.generate", {"prompt": "cover"})
            return [title["text"], blurb["text"], cover["artifact"]["id"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, relocations=2)))

shape("swap_two_callers_of_helper", "reorder", (
    "Two calls of one helper swapped: the helper's call has one expression, the helper "
    "calls differ by argument; each caller relocates by its chain and replays."),
    (Step(HELPER_PAIR_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            second = await gen("a blue door")
            first = await gen("a red door")
            cover = await ctx.run("image.generate", {"prompt": "cover"})
            return [first["prompt"], second["prompt"], cover["artifact"]["id"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, relocations=2)),
    celery=True)

ORDER_SCRIPT = _s('''
    async def orchestrate(ctx, args):
        doors = []
        for name in args["order"][:2]:
            doors.append(await ctx.run("image.generate", {"prompt": name}))
        cover = await ctx.run("image.generate", {"prompt": "cover", "size": args["size"]})
        return [d["prompt"] for d in doors[:2]]
''')

shape("args_flip_order", "reorder", (
    "The same script run again with args that flip which payload comes first in a loop "
    "(and a supported size): each occurrence finds the other occurrence's slot by "
    "payload and replays it; only the cover is paid."),
    (Step(ORDER_SCRIPT, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1},
          args={"order": ["a red door", "a blue door"], "size": BAD}),
     Step(ORDER_SCRIPT, "succeeded", 1, calls={"replayed": 2, "executed": 1},
          args={"order": ["a blue door", "a red door"], "size": "1024x1024"})))

# -- wrap --

shape("wrap_in_try", "wrap", (
    "The committed call wrapped in try/except: it moves into a new block (new site) and "
    "is relocated there by its unchanged expression; it replays."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            prompt = "hero on a cliff"
            size = "1024x1024"
            try:
                hero = await ctx.run("image.generate", {"prompt": prompt, "size": size})
            except CapabilityError:
                hero = None
            poster = await ctx.run("image.generate", {"prompt": "poster"})
            return [poster["artifact"]["id"]]
     '''), "succeeded", 1, calls={"replayed": 1, "executed": 1}, relocations=1)))

shape("wrap_in_if", "wrap", (
    "The committed call moved into an if block: relocated by expression, replays."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            prompt = "hero on a cliff"
            size = "1024x1024"
            hero = None
            if args.get("with_hero", True):
                hero = await ctx.run("image.generate", {"prompt": prompt, "size": size})
            poster = await ctx.run("image.generate", {"prompt": "poster"})
            return [poster["artifact"]["id"]]
     '''), "succeeded", 1, calls={"replayed": 1, "executed": 1}, relocations=1)))

INTO_HELPER_V2 = _s('''
    async def orchestrate(ctx, args):
        async def render(prompt, size):
            return await ctx.run("image.generate", {"prompt": prompt, "size": size})

        hero = await render("hero on a cliff", "1024x1024")
        poster = await ctx.run("image.generate", {"prompt": "poster"})
        return [hero["artifact"]["id"], poster["artifact"]["id"]]
''')

shape("move_into_helper", "wrap", (
    "The paper's a425 edit: the committed call moved, expression unchanged, into a "
    "helper. The gate relocates the frozen site to the helper's site (unique match on "
    "both sides); the committed call replays: 0 new paid calls for committed work."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(INTO_HELPER_V2, "succeeded", 1, calls={"replayed": 1, "executed": 1},
          relocations=1)),
    celery=True)

shape("move_into_helper_strict", "wrap", (
    "The same edit under relocation=stop (the paper's strict gate): the frozen site is "
    "gone, the gate stops with `removed` before any sandbox."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(INTO_HELPER_V2, "stopped", 0, "GateRejected", {"executed": 0},
          gate=("removed",))),
    settings={"relocation": "stop"})

shape("move_into_helper_two_callers", "wrap", (
    "The committed call moved into a helper that is then called from two places (the "
    "poster goes through it too): two candidates carry the frozen expression, so the "
    "gate stops (ambiguous) before any sandbox."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def render(prompt, size):
                return await ctx.run("image.generate", {"prompt": prompt, "size": size})

            hero = await render("hero on a cliff", "1024x1024")
            poster = await render("poster", "1024x1024")
            return [hero["artifact"]["id"], poster["artifact"]["id"]]
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("ambiguous",))))

shape("renamed_helper", "wrap", (
    "The fanout's helper renamed (gen -> render) while fixing the rejected size: the "
    "chain fingerprint ignores the helper's name, so the frozen site relocates to the "
    "renamed helper's site and the three committed shots replay."),
    (Step(FANOUT4_V1, "failed", 4, "CapabilityError", {"succeeded": 3, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            shots = args["shots"][:4]

            async def render(i, shot):
                size = "1024x1024"
                return await ctx.run("image.generate", {"prompt": shot, "size": size})

            images = await ctx.parallel([render(i, s) for i, s in enumerate(shots)])
            return [img["artifact"]["id"] for img in images[:4]]
     '''), "succeeded", 1, calls={"replayed": 3, "executed": 1}, relocations=1)),
    args=SHOTS)

NESTED_V1 = _s(f'''
    async def orchestrate(ctx, args):
        if args["mode"] == "photo":
            async def gen(prompt):
                return await ctx.run("image.generate", {{"prompt": prompt}})
        else:
            async def gen(prompt):
                return await ctx.run("image.generate", {{"prompt": prompt, "style": "sketch"}})
        hero = await gen("hero")
        poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
        return [hero["artifact"]["id"], poster["artifact"]["id"]]
''')

shape("nested_defs_untaken_edited", "wrap", (
    "Same-named helpers defined in the two branches of an if; only the untaken one is "
    "edited. Each definition has its own sites (named after its block), the taken one's "
    "committed call is unchanged and replays."),
    (Step(NESTED_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(NESTED_V1.replace('"style": "sketch"', '"style": "ink"').replace(
         f'"size": "{BAD}"', '"size": "1024x1024"'),
          "succeeded", 1, calls={"replayed": 1, "executed": 1})),
    args={"mode": "photo"})

shape("nested_defs_taken_edited", "wrap", (
    "The contrast: the taken branch's helper is edited. Its committed call expression "
    "changed: the gate stops (call_changed); nothing runs."),
    (Step(NESTED_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(NESTED_V1.replace('{"prompt": prompt})', '{"prompt": prompt, "style": "photo"})')
          .replace(f'"size": "{BAD}"', '"size": "1024x1024"'),
          "stopped", 0, "GateRejected", {"executed": 0}, gate=("call_changed",))),
    args={"mode": "photo"})

# -- loops --

shape("retry_loop_payload_moves", "loops", (
    "A retry loop over sizes: in v1 the first size is rejected and the second commits "
    "at occurrence 1, then the poster is rejected. The model reorders the sizes so the "
    "good one comes first: its payload is now at occurrence 0 and replays from "
    "occurrence 1 by payload; the loop breaks; only the fixed poster is paid."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            hero = None
            for size in ["{BAD}", "1024x1024"]:
                try:
                    hero = await ctx.run("image.generate", {{"prompt": "hero", "size": size}})
                    break
                except CapabilityError:
                    continue
            poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
            return [hero["artifact"]["id"], poster["artifact"]["id"]]
     '''), "failed", 3, "CapabilityError", {"succeeded": 1, "failed": 2}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = None
            for size in ["1024x1024", "512x512"]:
                try:
                    hero = await ctx.run("image.generate", {"prompt": "hero", "size": size})
                    break
                except CapabilityError:
                    continue
            poster = await ctx.run("image.generate", {"prompt": "poster", "size": "512x512"})
            return [hero["artifact"]["id"], poster["artifact"]["id"]]
     '''), "succeeded", 1, calls={"replayed": 1, "executed": 1})))

shape("loop_grows", "loops", (
    "A loop's bound raised from 3 to 5: the old occurrences replay, the two new ones "
    "execute."),
    (Step(LOOP3_TEXT_V1, "failed", 3, "RuntimeError", {"succeeded": 3}),
     Step(_loop_text(5), "succeeded", 2, calls={"replayed": 3, "executed": 2})),
    celery=True)

shape("loop_shrinks", "loops", (
    "A loop's bound lowered from 3 to 1: one replays, two committed identities are never "
    "reached and are reported as orphans (policy warn: the revision succeeds)."),
    (Step(LOOP3_TEXT_V1, "failed", 3, "RuntimeError", {"succeeded": 3}),
     Step(_loop_text(1), "succeeded", 0, calls={"replayed": 1, "executed": 0}, orphans=2)))

shape("loop_shrinks_orphan_stop", "loops", (
    "The same under orphan_policy=stop: the revision fails with OrphanStop; nothing is "
    "paid."),
    (Step(LOOP3_TEXT_V1, "failed", 3, "RuntimeError", {"succeeded": 3}),
     Step(_loop_text(1), "failed", 0, "OrphanStop", {"replayed": 1, "executed": 0},
          orphans=2, orphan_policy="stop")))

shape("comprehension_gains_filter", "loops", (
    "A fanout over a list with an empty prompt (rejected); the model adds a filter. The "
    "elements after the filtered one shift down one path and replay by payload: the "
    "repair costs nothing."),
    (Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            doors = await ctx.parallel([gen(p) for p in ["a red door", "", "a grey door",
                                                         "a teal door"]])
            return len(doors)
     '''), "failed", 4, "CapabilityError", {"succeeded": 3, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            doors = await ctx.parallel([gen(p) for p in ["a red door", "", "a grey door",
                                                         "a teal door"] if p])
            return [d["prompt"] for d in doors[:3]]
     '''), "succeeded", 0, calls={"replayed": 3, "executed": 0})),
    celery=True)

shape("constant_loop_widened_auto", "loops", (
    "A loop with a constant payload: under the default ledger policy its second pass is a "
    "semantic repeat inside its own revision (one ledger per run, the running revision "
    "included), denied before dispatch; widened from 3 to 6, the one committed take "
    "replays and the next is denied again."),
    (Step(CONST_LOOP_V1, "stopped", 1, "SemanticRepeatDenied", {"succeeded": 1,
                                                                "denied": 1}),
     Step(CONST_LOOP_V2, "stopped", 0, "SemanticRepeatDenied",
          {"replayed": 1, "denied": 1, "executed": 0})),
    celery=True)

shape("constant_loop_widened_warn", "loops", (
    "The same under ledger_policy=warn: every repeat is paid and named in a warning, the "
    "two inside the first revision as much as the three new occurrences of the repair."),
    (Step(CONST_LOOP_V1, "failed", 3, "RuntimeError", {"succeeded": 3}, warned=2,
          ledger_policy="warn"),
     Step(CONST_LOOP_V2, "succeeded", 3, calls={"replayed": 3, "executed": 3}, warned=3,
          ledger_policy="warn")))

TAKE_LOOP_V2 = _s('''
    async def orchestrate(ctx, args):
        takes = []
        for i in range(3):
            takes.append(await ctx.run("image.generate", {"prompt": "retake"}, take=i + 1))
        return len(takes)
''')

shape("take_in_loop", "loops", (
    "A loop that declares each iteration a further take (take=i + 1) widened from 2 to "
    "3: the committed takes replay; the third take is a further take of a paid payload "
    "that the repair added, refused until a person approves it in the envelope "
    "(approved_takes), then paid on purpose."),
    (Step(_s('''
        async def orchestrate(ctx, args):
            takes = []
            for i in range(2):
                takes.append(await ctx.run("image.generate", {"prompt": "retake"}, take=i + 1))
            raise RuntimeError("two takes were not enough")
     '''), "failed", 2, "RuntimeError", {"succeeded": 2}, takes=1),
     Step(TAKE_LOOP_V2, "stopped", 0, "TakeNotApproved",
          {"replayed": 2, "executed": 0, "denied": 1}),
     Step(TAKE_LOOP_V2, "succeeded", 1, calls={"replayed": 2, "executed": 1}, takes=1,
          approved_takes=("image.generate",))),
    )

# -- payload --

shape("payload_edited_in_place", "payload", (
    "The committed call's literal payload edited in place: its call expression changed, "
    "the gate stops (call_changed) before any sandbox."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(TWO_STEP_V1.replace('"prompt": prompt,', '"prompt": prompt + ", at dusk",')
          .replace(f'"size": "{BAD}"', '"size": "512x512"'),
          "stopped", 0, "GateRejected", {"executed": 0}, gate=("call_changed",))))

shape("payload_data_dependent", "payload", (
    "A variable that feeds the committed payload changed (size 1024 -> 512): the call "
    "expression is the same, so the gate accepts; at dispatch the digest differs from the "
    "committed one: ReplayDivergence, 0 new paid calls (the poster in the same revision "
    "never runs)."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(TWO_STEP_V1.replace('size = "1024x1024"', 'size = "512x512"')
          .replace(f'"size": "{BAD}"', '"size": "512x512"'),
          "stopped", 0, "ReplayDivergence", {"executed": 0})),
    celery=True)

DEFAULTS_V1 = _s('''
    async def orchestrate(ctx, args):
        hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
        raise RuntimeError("the layout step is missing")
''')
DEFAULTS_V2 = _s('''
    async def orchestrate(ctx, args):
        hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
        layout = await ctx.run("text.generate", {"prompt": "layout for the hero"})
        full = await ctx.run("image.generate", {"prompt": "hero on a cliff",
                                                "size": "1024x1024", "model": "local-image-1"})
        return [hero["artifact"]["id"], full["artifact"]["id"], layout["text"]]
''')

shape("defaults_spelled_out_new_site", "payload", (
    "A new call site writes the committed payload with its schema defaults spelled out. "
    "The digest is of the normalized payload, so it is the same paid payload: a semantic "
    "repeat of a side-effecting call, denied under auto before dispatch. Never paid twice."),
    (Step(DEFAULTS_V1, "failed", 1, "RuntimeError", {"succeeded": 1}),
     Step(DEFAULTS_V2, "stopped", 1, "SemanticRepeatDenied",
          {"replayed": 1, "executed": 1, "denied": 1})),
    celery=True)

shape("defaults_spelled_out_warn", "payload", (
    "The same under ledger_policy=warn: the repeat is paid once, by name, in a warning."),
    (Step(DEFAULTS_V1, "failed", 1, "RuntimeError", {"succeeded": 1}),
     Step(DEFAULTS_V2, "succeeded", 2, calls={"replayed": 1, "executed": 2}, warned=1,
          ledger_policy="warn")))

TAKE_TWO_V2 = _s('''
    async def orchestrate(ctx, args):
        hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
        again = await ctx.run("image.generate", {"prompt": "hero on a cliff"}, take=2)
        return [hero["artifact"]["id"], again["artifact"]["id"]]
''')

shape("take_two", "payload", (
    "A repair adds take=2 for a payload the run already paid (what a model does when a "
    "refusal mentions takes): refused before dispatch unless the envelope approves "
    "further takes of image.generate; approved, paid once more on purpose; a rerun "
    "replays both."),
    (Step(DEFAULTS_V1, "failed", 1, "RuntimeError", {"succeeded": 1}),
     Step(TAKE_TWO_V2, "stopped", 0, "TakeNotApproved", {"replayed": 1, "executed": 0}),
     Step(TAKE_TWO_V2, "succeeded", 1, calls={"replayed": 1, "executed": 1}, takes=1,
          approved_takes=("image.generate",)),
     Step(TAKE_TWO_V2, "succeeded", 0, calls={"replayed": 2, "executed": 0})),
    )

shape("capability_swapped", "payload", (
    "The committed call's capability changed (image -> text): capability_changed at the "
    "gate."),
    (Step(DEFAULTS_V1, "failed", 1, "RuntimeError", {"succeeded": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("text.generate", {"prompt": "hero on a cliff"})
            return hero["text"]
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("capability_changed",))))

shape("append_after_failure", "payload", (
    "The baseline: the committed prefix untouched, the failing tail fixed."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(TWO_STEP_V1.replace(f'"size": "{BAD}"', '"size": "512x512"'),
          "succeeded", 1, calls={"replayed": 1, "executed": 1})))

# -- race --

shape("race_reorder", "race", (
    "A race over sizes (only 1024x1024 is accepted: it wins). The model reorders the "
    "branches (and fixes the poster): the race's committed winner is found by its first "
    "call and replayed on its committed path; no branch runs again."),
    (Step(RACE_V1, "failed", 4, "CapabilityError", {"succeeded": 1, "failed": 3}),
     Step(_race_v2(["1024x1024", BAD, "1x1"]), "succeeded", 1,
          calls={"replayed": 2, "executed": 1})),
    celery=True)

shape("race_branch_added", "race", (
    "A branch added at the front of the race: the committed winner still exists and "
    "replays; the new branch never runs."),
    (Step(RACE_V1, "failed", 4, "CapabilityError", {"succeeded": 1, "failed": 3}),
     Step(_race_v2(["512x512", BAD, "1024x1024", "1x1"]), "succeeded", 1,
          calls={"replayed": 2, "executed": 1})))

shape("race_winner_removed", "race", (
    "The committed winner's branch removed from the race: none of the branches makes the "
    "winner's first call any more. The race stops (ReplayDivergence) rather than run or "
    "hand over another branch's result; 0 new paid calls."),
    (Step(RACE_V1, "failed", 4, "CapabilityError", {"succeeded": 1, "failed": 3}),
     Step(_race_v2(["512x512", BAD, "1x1"]), "stopped", 0, "ReplayDivergence",
          {"executed": 0})))

# -- wrong reuse (must never replay) --

shape("same_payload_other_expression", "wrong_reuse", (
    "A second live call with the committed payload but another call expression is "
    "inserted before the committed one. It must not take the committed slot (that slot "
    "belongs to the unchanged call); it is a semantic repeat of a paid side-effecting "
    "payload: denied under auto, nothing paid."),
    (Step(DEFAULTS_V1, "failed", 1, "RuntimeError", {"succeeded": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            name = "hero"
            early = await ctx.run("image.generate", {"prompt": name + " on a cliff"})
            hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
            return [early["artifact"]["id"], hero["artifact"]["id"]]
     '''), "stopped", 0, "SemanticRepeatDenied", {"executed": 0, "denied": 1})))

shape("same_payload_other_expression_text", "wrong_reuse", (
    "The same with a read-only capability under auto: the repeat is warned and paid (the "
    "ledger policy's explicit choice for read-only calls); the committed call replays its "
    "own slot, the new expression never receives it."),
    (Step(_s('''
        async def orchestrate(ctx, args):
            title = await ctx.run("text.generate", {"prompt": "a title"})
            raise RuntimeError("no subtitle")
     '''), "failed", 1, "RuntimeError", {"succeeded": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            prefix = "a "
            subtitle = await ctx.run("text.generate", {"prompt": prefix + "title"})
            title = await ctx.run("text.generate", {"prompt": "a title"})
            return [title["text"], subtitle["text"]]
     '''), "succeeded", 1, calls={"executed": 1, "replayed": 1}, warned=1)))

shape("moved_call_payload_changed", "wrong_reuse", (
    "The committed call moved into an if block AND its payload variable changed: the "
    "gate relocates it by expression, the digest no longer matches at dispatch: "
    "ReplayDivergence, never the old image for the new prompt."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            prompt = "hero on a cliff at dusk"
            size = "1024x1024"
            hero = None
            if args.get("with_hero", True):
                hero = await ctx.run("image.generate", {"prompt": prompt, "size": size})
            poster = await ctx.run("image.generate", {"prompt": "poster"})
            return [poster["artifact"]["id"]]
     '''), "stopped", 0, "ReplayDivergence", {"executed": 0}, relocations=1)))

HELPER_ONE_V1 = _s('''
    async def orchestrate(ctx, args):
        async def gen(prompt):
            return await ctx.run("image.generate", {"prompt": prompt})

        hero = await gen("hero")
        raise RuntimeError("the villain is missing")
''')

shape("helper_two_places_one_frozen", "wrong_reuse", (
    "A helper called from one place in v1 is called from two in v2, the new caller "
    "first. The frozen site follows the caller with its arguments (gen(\"hero\")); the "
    "new caller's site is stored under a new name. The villain is paid and never gets "
    "the hero's image."),
    (Step(HELPER_ONE_V1, "failed", 1, "RuntimeError", {"succeeded": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            villain = await gen("villain")
            hero = await gen("hero")
            return [villain["prompt"], hero["prompt"]]
     '''), "succeeded", 1, calls={"executed": 1, "replayed": 1}, relocations=1)))

shape("helper_two_places_same_args", "wrong_reuse", (
    "The same, but both callers pass the same variable (rebound in between): the chain "
    "cannot tell them apart, so the frozen site stays in place, now reached by the "
    "villain call. Its payload differs from the committed one: ReplayDivergence before "
    "dispatch. Safe (a payload-level match would have replayed the hero later)."),
    (Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            p = "hero"
            hero = await gen(p)
            raise RuntimeError("the villain is missing")
     '''), "failed", 1, "RuntimeError", {"succeeded": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            p = "villain"
            villain = await gen(p)
            p = "hero"
            hero = await gen(p)
            return [villain["prompt"], hero["prompt"]]
     '''), "stopped", 0, "ReplayDivergence", {"executed": 0})))

# -- second round: where the decisions interact --

LOOP2_V1 = _s(f'''
    async def orchestrate(ctx, args):
        async def gen(prompt):
            return await ctx.run("image.generate", {{"prompt": prompt}})

        cast = []
        for p in ["hero", "villain"]:
            cast.append(await gen(p))
        poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
        return [c["artifact"]["id"] for c in cast[:2]]
''')

shape("loop_insert_front", "loops", (
    "A sequential loop gets a new element at the front: occurrence 0 now carries a new "
    "payload where another is committed. Each occurrence is decided when it is reached, "
    "so there is no look-ahead: ReplayDivergence at the first call, 0 new paid."),
    (Step(LOOP2_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            cast = []
            for p in ["sidekick", "hero", "villain"]:
                cast.append(await gen(p))
            poster = await ctx.run("image.generate", {"prompt": "poster"})
            return [c["artifact"]["id"] for c in cast[:3]]
     '''), "stopped", 0, "ReplayDivergence", {"executed": 0})))

STEAL_V2 = _s('''
    async def orchestrate(ctx, args):
        async def gen(prompt):
            return await ctx.run("image.generate", {"prompt": prompt})

        thumb = await gen("hero")
        cast = []
        for p in ["hero", "villain"]:
            cast.append(await gen(p))
        poster = await ctx.run("image.generate", {"prompt": "poster"})
        return [thumb["artifact"]["id"]] + [c["artifact"]["id"] for c in cast[:2]]
''')

shape("new_call_takes_committed_slot", "wrong_reuse", (
    "A new call of the same helper with a committed payload is inserted before the loop "
    "that committed it. The new call is the same call expression with the same payload, "
    "so rule 2 replays the committed slot to it; when the loop reaches the committed "
    "call at its own unchanged identity, that slot is used and the call is a semantic "
    "repeat of itself: denied under auto. Safe (nothing is paid twice), but the stop "
    "names the unchanged committed call, not the inserted one."),
    (Step(LOOP2_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(STEAL_V2, "stopped", 0, "SemanticRepeatDenied",
          {"executed": 0, "replayed": 1, "denied": 1})))

shape("new_call_takes_committed_slot_warn", "wrong_reuse", (
    "The same under ledger_policy=warn. Each slot serves at most one call per revision, "
    "and nothing can be paid at a committed identity: the loop's hero, whose slot the "
    "new call already took, stops the run (SemanticRepeatDenied) whatever the ledger "
    "policy, never handed that slot a second time."),
    (Step(LOOP2_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(STEAL_V2, "stopped", 0, "SemanticRepeatDenied",
          {"executed": 0, "replayed": 1, "denied": 1}, ledger_policy="warn")))

shape("loop_payload_duplicated_text", "wrong_reuse", (
    "A text loop over [x, y] becomes [y, y]: occurrence 0 replays y's slot by payload, "
    "occurrence 1 (y's own identity) finds it used: nothing can be paid at a committed "
    "identity and a result is never handed to two calls, so the run stops there "
    "(a second copy must be declared with take=2)."),
    (Step(_s('''
        async def orchestrate(ctx, args):
            lines = []
            for p in ["a title", "a subtitle"]:
                lines.append(await ctx.run("text.generate", {"prompt": p}))
            raise RuntimeError("the subtitle should be used twice")
     '''), "failed", 2, "RuntimeError", {"succeeded": 2}),
     Step(_s('''
        async def orchestrate(ctx, args):
            lines = []
            for p in ["a subtitle", "a subtitle"]:
                lines.append(await ctx.run("text.generate", {"prompt": p}))
            return [line["text"] for line in lines[:2]]
     '''), "stopped", 0, "SemanticRepeatDenied", {"executed": 0, "replayed": 1, "denied": 1},
          orphans=1)))

shape("constant_text_loop_into_parallel", "loops", (
    "Three identical read-only calls in a loop moved into a ctx.parallel branch (the "
    "path changes from () to (0,)). Rule 2 replays a moved call only when exactly one "
    "unused slot matches; here three identical ones do, so each occurrence is a "
    "read-only semantic repeat: warned by name under auto and paid again (3 paid "
    "repeats, 3 orphans). Not silent, and the policy's documented choice, but three "
    "committed results that could have replayed are bought again; the image version "
    "of this edit stops with SemanticRepeatDenied. v1's own second and third pass are "
    "repeats in its revision: warned too."),
    (Step(_s('''
        async def orchestrate(ctx, args):
            ideas = []
            for i in range(3):
                ideas.append(await ctx.run("text.generate", {"prompt": "a tagline idea"}))
            raise RuntimeError("no image yet")
     '''), "failed", 3, "RuntimeError", {"succeeded": 3}, warned=2),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def brainstorm():
                ideas = []
                for i in range(3):
                    ideas.append(await ctx.run("text.generate", {"prompt": "a tagline idea"}))
                return ideas

            async def art():
                return await ctx.run("image.generate", {"prompt": "key art"})

            ideas, image = await ctx.parallel([brainstorm(), art()])
            return [len(ideas), image["artifact"]["id"]]
     '''), "succeeded", 4, calls={"executed": 4, "replayed": 0}, relocations=1,
          warned=3, orphans=3)))

shape("race_literal_reorder", "race", (
    "A race written as a literal list of helper calls, reordered: the branch helper "
    "calls relocate by their arguments and the committed winner is found by its first "
    "call's site; it replays, no branch is paid again."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            async def attempt(size):
                return await ctx.run("image.generate", {{"prompt": "key art", "size": size}})

            art = await ctx.race([attempt("{BAD}"), attempt("1024x1024")])
            raise RuntimeError("no poster yet")
     '''), "failed", 2, "RuntimeError", {"succeeded": 1, "failed": 1}),
     Step(_s(f'''
        async def orchestrate(ctx, args):
            async def attempt(size):
                return await ctx.run("image.generate", {{"prompt": "key art", "size": size}})

            art = await ctx.race([attempt("1024x1024"), attempt("{BAD}")])
            poster = await ctx.run("image.generate", {{"prompt": "poster"}})
            return [art["size"], poster["artifact"]["id"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1})))

shape("wrap_in_try_strict", "wrap", (
    "The try/except wrap under relocation=stop: the strict gate stops it. The kind is "
    "call_changed, not removed: the site name orchestrate/#0 now belongs to the poster "
    "call (the hero went into a block of its own), so the gate reports the call found "
    "at the frozen name. Safe either way: nothing runs."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            prompt = "hero on a cliff"
            size = "1024x1024"
            try:
                hero = await ctx.run("image.generate", {"prompt": prompt, "size": size})
            except CapabilityError:
                hero = None
            poster = await ctx.run("image.generate", {"prompt": "poster"})
            return [poster["artifact"]["id"]]
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("call_changed",))),
    settings={"relocation": "stop"})

RACE_TEXT_V1 = _s('''
    async def orchestrate(ctx, args):
        async def draft(style):
            return await ctx.run("text.generate", {"prompt": "tagline, " + style})

        best = await ctx.race([draft(s) for s in ["bold", "calm"]])
        raise RuntimeError("no key art yet")
''')

shape("race_moved_into_helper", "race", (
    "The race (calm won; bold was slower) moved, unchanged, into a helper: the race "
    "site and its branch site relocate together, the race's identity keeps its path, and "
    "the committed winner replays."),
    (Step(RACE_TEXT_V1, "failed", 2, "RuntimeError", {"succeeded": 2}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def draft(style):
                return await ctx.run("text.generate", {"prompt": "tagline, " + style})

            async def pick():
                return await ctx.race([draft(s) for s in ["bold", "calm"]])

            best = await pick()
            art = await ctx.run("image.generate", {"prompt": "key art"})
            return [best["text"], art["artifact"]["id"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, relocations=2,
          races_replayed=1)),
    latency={"tagline, bold": 0.5})

shape("race_moved_into_parallel", "race", (
    "The same race moved into a ctx.parallel branch (so its fanout path changes from () "
    "to (0,)) next to a new key-art branch. The committed race decision (calm) must be "
    "replayed, as for a reordered race: ctx.race must replay the same winner, never "
    "another branch's result."),
    (Step(RACE_TEXT_V1, "failed", 2, "RuntimeError", {"succeeded": 2}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def draft(style):
                return await ctx.run("text.generate", {"prompt": "tagline, " + style})

            async def pick():
                return await ctx.race([draft(s) for s in ["bold", "calm"]])

            async def art():
                return await ctx.run("image.generate", {"prompt": "key art"})

            best, image = await ctx.parallel([pick(), art()])
            return [best["text"], image["artifact"]["id"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, orphans=0,
          races_replayed=1)),
    latency={"tagline, bold": 0.5})

shape("race_reorder_orphan_stop", "race", (
    "A text race (all branches succeed; calm is fastest and wins) reordered under "
    "orphan_policy=stop. The losing branch's first call was committed in v1 and is "
    "never reached again: the committed race decided it. Replaying the race must not "
    "make the revision fail."),
    (Step(RACE_TEXT_V1, "failed", 2, "RuntimeError", {"succeeded": 2}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def draft(style):
                return await ctx.run("text.generate", {"prompt": "tagline, " + style})

            best = await ctx.race([draft(s) for s in ["calm", "bold"]])
            art = await ctx.run("image.generate", {"prompt": "key art"})
            return [best["text"], art["artifact"]["id"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, races_replayed=1,
          orphan_policy="stop")),
    latency={"tagline, bold": 0.5})

shape("fallback_wrapper_helper", "insert", (
    "The fallback written as a reusable wrapper: with_fallback(gen(\"poster\"), ...) "
    "awaits the helper's coroutine inside another helper and falls back to a supported "
    "size. The hero replays; the rejected poster is tried again (paid, rejected) and the "
    "fallback is paid."),
    (Step(TWO_STEP_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s(f'''
        async def orchestrate(ctx, args):
            prompt = "hero on a cliff"
            size = "1024x1024"
            hero = await ctx.run("image.generate", {{"prompt": prompt, "size": size}})

            async def poster_at(size):
                return await ctx.run("image.generate", {{"prompt": "poster", "size": size}})

            async def with_fallback(call, size):
                try:
                    return await call
                except CapabilityError:
                    return await ctx.run("image.generate", {{"prompt": "poster", "size": size}})

            poster = await with_fallback(poster_at("{BAD}"), "512x512")
            return [hero["artifact"]["id"], poster["artifact"]["id"]]
     '''), "succeeded", 2, calls={"replayed": 1, "executed": 2, "failed": 1})),
    rerun_paid=1)  # the rejected poster is never committed: tried (and paid) on every run

shape("pipeline_into_helper", "dag", (
    "The pipeline moved into a helper that first logs a kickoff call: the stage "
    "functions are referenced in orchestrate and run by ctx.pipeline inside the helper. "
    "The plan stage's committed call replays (its expression is unchanged), the kickoff "
    "and the fixed draw are paid."),
    (Step(PIPE_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def plan(_):
                return await ctx.run("storyboard.plan", {"brief": "harbour", "shots": 2})

            async def draw(board):
                return await ctx.run("image.generate", {"prompt": board["shots"][0],
                                                        "size": "1024x1024"})

            async def produce(stages):
                await ctx.run("text.generate", {"prompt": "kickoff"})
                return await ctx.pipeline(stages, None)

            image = await produce([plan, draw])
            return image["artifact"]["id"]
     '''), "succeeded", 2, calls={"replayed": 1, "executed": 2})),
    )

# -- third round: refactors a model makes while repairing --

TWO_FANOUTS_V1 = _s(f'''
    async def orchestrate(ctx, args):
        async def gen(prompt, size):
            return await ctx.run("image.generate", {{"prompt": prompt, "size": size}})

        doors = await ctx.parallel([gen(p, "1024x1024") for p in ["a red door", "a blue door"]])
        walls = await ctx.parallel([gen(p, s) for p, s in [("a brick wall", "1024x1024"),
                                                           ("a stone wall", "{BAD}")]])
        return len(doors) + len(walls)
''')

shape("merge_two_fanouts", "parallelise", (
    "Two fanouts through one helper merged into one comprehension. The second fanout's "
    "helper call was a frozen site of its own and the merged candidate has one site "
    "for that expression, already standing for the first: the gate stops (removed). "
    "Safe, though every committed payload is still there."),
    (Step(TWO_FANOUTS_V1, "failed", 4, "CapabilityError", {"succeeded": 3, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt, size):
                return await ctx.run("image.generate", {"prompt": prompt, "size": size})

            jobs = [("a red door", "1024x1024"), ("a blue door", "1024x1024"),
                    ("a brick wall", "1024x1024"), ("a stone wall", "1024x1024")]
            images = await ctx.parallel([gen(p, s) for p, s in jobs])
            return len(images)
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("removed",))))

shape("split_one_fanout", "parallelise", (
    "One fanout split into two comprehensions through the same helper: the first keeps "
    "the frozen site, the second is a new site whose calls find the committed slots by "
    "payload (each unique) and replay; only the fixed shot is paid."),
    (Step(FANOUT4_V1, "failed", 4, "CapabilityError", {"succeeded": 3, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            shots = args["shots"][:4]

            async def gen(i, shot):
                size = "1024x1024"
                return await ctx.run("image.generate", {"prompt": shot, "size": size})

            early = await ctx.parallel([gen(i, s) for i, s in enumerate(shots[:2])])
            late = await ctx.parallel([gen(i, s) for i, s in enumerate(shots[2:4])])
            return len(early) + len(late)
     '''), "succeeded", 1, calls={"replayed": 3, "executed": 1})),
    args=SHOTS)

shape("body_into_main", "wrap", (
    "The whole body moved into an async helper main() called once from orchestrate, "
    "the failing call fixed: every frozen site is relocated (each expression is unique) "
    "and replays."),
    (Step(SEQ3_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def main():
                hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
                villain = await ctx.run("image.generate", {"prompt": "villain in a tower"})
                crowd = await ctx.run("image.generate", {"prompt": "crowd", "size": "512x512"})
                return [hero["artifact"]["id"], villain["artifact"]["id"],
                        crowd["artifact"]["id"]]

            return await main()
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, relocations=2)))

shape("body_into_main_helper_twice", "wrap", (
    "The same refactor when the body calls one helper twice: the two frozen sites share "
    "a call expression and the chain now has main() in front, so neither matches "
    "uniquely: the gate stops (ambiguous) before any sandbox. Safe, but a common "
    "refactor buys nothing back."),
    (Step(HELPER_PAIR_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            async def main():
                first = await gen("a red door")
                second = await gen("a blue door")
                cover = await ctx.run("image.generate", {"prompt": "cover"})
                return [first["prompt"], second["prompt"], cover["artifact"]["id"]]

            return await main()
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("ambiguous", "ambiguous"))))

shape("storyboard_fanout_fixed", "parallelise", (
    "A data-dependent fanout: a storyboard plan feeds a fanout of images, the last shot "
    "asks for an unsupported size. The fix keeps the plan call and the image expression; "
    "the plan and three shots replay, the fourth is paid."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            board = await ctx.run("storyboard.plan", {{"brief": "a harbour at dawn", "shots": 4}})
            sizes = ["1024x1024", "1024x1024", "1024x1024", "{BAD}"]

            async def shoot(i, shot):
                return await ctx.run("image.generate", {{"prompt": shot, "size": sizes[i]}})

            images = await ctx.parallel([shoot(i, s) for i, s in enumerate(board["shots"][:4])])
            return [img["artifact"]["id"] for img in images[:4]]
     '''), "failed", 5, "CapabilityError", {"succeeded": 4, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            board = await ctx.run("storyboard.plan", {"brief": "a harbour at dawn", "shots": 4})
            sizes = ["1024x1024", "1024x1024", "1024x1024", "1536x1024"]

            async def shoot(i, shot):
                return await ctx.run("image.generate", {"prompt": shot, "size": sizes[i]})

            images = await ctx.parallel([shoot(i, s) for i, s in enumerate(board["shots"][:4])])
            return [img["artifact"]["id"] for img in images[:4]]
     '''), "succeeded", 1, calls={"replayed": 4, "executed": 1})))

shape("constant_image_loop_into_parallel", "loops", (
    "The image version of constant_text_loop_into_parallel: a loop of identical paid "
    "takes (the second pass is a repeat in its own revision, denied) moved into a "
    "ctx.parallel branch. The one committed take relocates into the branch, the caption "
    "beside it is new work, and the branch's second pass is denied again: never paid "
    "twice."),
    (Step(CONST_LOOP_V1, "stopped", 1, "SemanticRepeatDenied", {"succeeded": 1,
                                                                "denied": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def retakes():
                takes = []
                for i in range(3):
                    takes.append(await ctx.run("image.generate", {"prompt": "the same retake"}))
                return takes

            async def caption():
                return await ctx.run("text.generate", {"prompt": "caption the retakes"})

            takes, text = await ctx.parallel([retakes(), caption()])
            return [len(takes), text["text"]]
     '''), "stopped", 1, "SemanticRepeatDenied", {"executed": 1, "denied": 1},
          relocations=1)))

# Registers the third- and fourth-round shapes.
from . import corpus_round3, corpus_round4  # noqa: E402,F401
