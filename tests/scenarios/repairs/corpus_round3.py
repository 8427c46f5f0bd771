"""Round three of the repair-shape corpus: the repairs a model writes after a partial run.

Registered into ``corpus.SHAPES`` when ``corpus`` imports this module (at its end),
so the tests, the Celery subset and ``bench/repair_shapes.py`` see them. Every shape
states the contract of ARCHITECTURE.md section 4 as of main 083ebc7 (one ledger per run,
the running revision included; relocation by a unique unused slot with the same call
expression and payload; further takes in a repair need an approval; text fields compared
NFC and whitespace-normalized); a shape whose ``xfail`` is set names what the core does
instead.

Families: twins (two calls with one call expression), loops, dag (plans, shots and
reviews in loops), early_return, fallback, chain (six revisions on one run),
reintroduce (a committed call that comes back), race, respell, takes.
"""

from __future__ import annotations

from typing import Any

from .corpus import BAD, SEQ3_V1, Shape, Step, _s, shape

MINE: list[Shape] = []


def _mine(*args: Any, **kwargs: Any) -> Shape:
    """Register a shape in the corpus and remember it as one of this round's."""
    made = shape(*args, **kwargs)
    MINE.append(made)
    return made


# ---- twins: two calls with one call expression and different payloads ------------------------

TWINS_V1 = _s(f'''
    async def orchestrate(ctx, args):
        async def gen(prompt):
            return await ctx.run("image.generate", {{"prompt": prompt}})

        p = "left wing"
        left = await gen(p)
        p = "right wing"
        right = await gen(p)
        cover = await ctx.run("image.generate", {{"prompt": "cover", "size": "{BAD}"}})
        return [left["prompt"], right["prompt"], cover["prompt"]]
''')

_mine("twins_swapped", "twins", (
    "Two calls of one helper with one argument expression (gen(p), p rebound), so both "
    "sites have the same call expression and chain; the model swaps which wing comes "
    "first and fixes the cover. Each twin now reaches the other's identity with the "
    "other's payload: not a divergence, because exactly one unused committed slot has its "
    "capability, call expression and payload, so each relocates there and replays. Safe: "
    "the result handed over was committed for that very request."),
    (Step(TWINS_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            p = "right wing"
            right = await gen(p)
            p = "left wing"
            left = await gen(p)
            cover = await ctx.run("image.generate", {"prompt": "cover"})
            return [left["prompt"], right["prompt"], cover["prompt"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1})),
    celery=True)

_mine("twins_one_removed", "twins", (
    "The model drops the first twin (it decided the left wing is not needed) and fixes the "
    "cover. The second twin's site is gone by name and its candidate stands where the "
    "first was, already bound to the first: removing a committed call is refused at the "
    "gate (removed) before any sandbox; nothing is paid."),
    (Step(TWINS_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            p = "right wing"
            right = await gen(p)
            cover = await ctx.run("image.generate", {"prompt": "cover"})
            return [right["prompt"], cover["prompt"]]
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("removed",))))

_mine("twins_both_same_payload", "twins", (
    "The model 'simplifies' by sending the left wing through both twins. The first twin "
    "replays at its own identity; the second reaches its committed identity (the right "
    "wing) with another payload, and the only slot with its payload is already used: a "
    "divergence, the run stops before any new effect (the cover is never paid)."),
    (Step(TWINS_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            p = "left wing"
            left = await gen(p)
            right = await gen(p)
            cover = await ctx.run("image.generate", {"prompt": "cover"})
            return [left["prompt"], right["prompt"], cover["prompt"]]
     '''), "stopped", 0, "ReplayDivergence", {"executed": 0, "replayed": 1})))

_mine("twins_third_added", "twins", (
    "A third twin (gen(p) with p = 'tail') is appended after the two committed ones, and "
    "the cover fixed: the two committed twins replay in place, the new twin is a new site "
    "and is paid with the cover."),
    (Step(TWINS_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            p = "left wing"
            left = await gen(p)
            p = "right wing"
            right = await gen(p)
            p = "tail"
            tail = await gen(p)
            cover = await ctx.run("image.generate", {"prompt": "cover"})
            return [left["prompt"], right["prompt"], tail["prompt"], cover["prompt"]]
     '''), "succeeded", 2, calls={"replayed": 2, "executed": 2})))

_mine("twins_direct_swapped", "twins", (
    "Twins without a helper: two direct ctx.run calls with one payload expression "
    "({\"prompt\": p}, p rebound between them). Swapped, each finds the other's slot by "
    "payload and replays it; the cover is the only new work."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            p = "north gate"
            north = await ctx.run("image.generate", {{"prompt": p}})
            p = "south gate"
            south = await ctx.run("image.generate", {{"prompt": p}})
            cover = await ctx.run("image.generate", {{"prompt": "map", "size": "{BAD}"}})
            return [north["prompt"], south["prompt"]]
     '''), "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            p = "south gate"
            south = await ctx.run("image.generate", {"prompt": p})
            p = "north gate"
            north = await ctx.run("image.generate", {"prompt": p})
            cover = await ctx.run("image.generate", {"prompt": "map"})
            return [north["prompt"], south["prompt"], cover["prompt"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1})))

# ---- loops ----------------------------------------------------------------------------------

PANELS_V1 = _s(f'''
    async def orchestrate(ctx, args):
        panels = []
        for i in range(4):
            size = "{BAD}" if i == 2 else "1024x1024"
            panels.append(await ctx.run("image.generate", {{"prompt": f"panel {{i}}",
                                                            "size": size}}))
        return [p["artifact"]["id"] for p in panels[:4]]
''')
PANELS_V2 = PANELS_V1.replace(f'"{BAD}" if i == 2 else ', "")

_mine("loop_index_prompt_one_fails", "loops", (
    "A loop with index-dependent prompts; index 2 asks for an unsupported size, so the "
    "loop stops there (index 3 never runs). The model fixes the size expression (not the "
    "call): indices 0 and 1 replay at their occurrences, 2 and 3 are paid."),
    (Step(PANELS_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(PANELS_V2, "succeeded", 2, calls={"replayed": 2, "executed": 2})))

_mine("loop_index_failure_caught", "loops", (
    "The same loop with the failure caught per index (try/except CapabilityError: "
    "continue), then a check that raises when a panel is missing: v1 commits 0, 1 and 3. "
    "The fix pays only index 2 (a free failure in v1, so asking again is no repeat); the "
    "others replay at their occurrences."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            panels = []
            for i in range(4):
                size = "{BAD}" if i == 2 else "1024x1024"
                try:
                    panels.append(await ctx.run("image.generate", {{"prompt": f"panel {{i}}",
                                                                    "size": size}}))
                except CapabilityError:
                    continue
            if len(panels) < 4:
                raise RuntimeError("a panel is missing")
            return len(panels)
     '''), "failed", 4, "RuntimeError", {"succeeded": 3, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            panels = []
            for i in range(4):
                size = "1024x1024"
                try:
                    panels.append(await ctx.run("image.generate", {"prompt": f"panel {i}",
                                                                   "size": size}))
                except CapabilityError:
                    continue
            if len(panels) < 4:
                raise RuntimeError("a panel is missing")
            return len(panels)
     '''), "succeeded", 1, calls={"replayed": 3, "executed": 1})))

LOOP_DIRECT_V1 = _s(f'''
    async def orchestrate(ctx, args):
        birds = []
        for p in ["a heron", "a crane", "a stork"]:
            birds.append(await ctx.run("image.generate", {{"prompt": p}}))
        cover = await ctx.run("image.generate", {{"prompt": "birds", "size": "{BAD}"}})
        return len(birds)
''')

_mine("loop_into_parallel", "loops", (
    "A sequential loop of direct calls turned into ctx.parallel over a helper that keeps "
    "the payload expression ({\"prompt\": p}) word for word: the frozen loop site "
    "relocates to the helper's site (one of each), every bird moves from occurrence k to "
    "path (k,) and replays by payload; only the fixed cover is paid."),
    (Step(LOOP_DIRECT_V1, "failed", 4, "CapabilityError", {"succeeded": 3, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(p):
                return await ctx.run("image.generate", {"prompt": p})

            birds = await ctx.parallel([gen(p) for p in ["a heron", "a crane", "a stork"]])
            cover = await ctx.run("image.generate", {"prompt": "birds"})
            return len(birds)
     '''), "succeeded", 1, calls={"replayed": 3, "executed": 1}, relocations=1)))

_mine("loop_into_parallel_renamed_variable", "loops", (
    "The same parallelisation with the helper's parameter renamed (p -> prompt): the "
    "payload expression changed, so no candidate has the committed call expression; the "
    "gate stops before any sandbox rather than pay the three birds again."),
    (Step(LOOP_DIRECT_V1, "failed", 4, "CapabilityError", {"succeeded": 3, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            birds = await ctx.parallel([gen(p) for p in ["a heron", "a crane", "a stork"]])
            cover = await ctx.run("image.generate", {"prompt": "birds"})
            return len(birds)
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("removed",))))

_mine("retry_loop_fixed_payload", "loops", (
    "A retry loop `for attempt in range(3): try ... except CapabilityError` around a "
    "fixed payload the provider rejects: v1 asks three times (each a free failure: it "
    "paid nothing, so asking again is no repeat), then gives up. The repair fixes the "
    "size inside the loop: the hero replays, the first attempt succeeds and breaks."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {{"prompt": "hero"}})
            logo = None
            for attempt in range(3):
                try:
                    logo = await ctx.run("image.generate", {{"prompt": "logo", "size": "{BAD}"}})
                    break
                except CapabilityError:
                    continue
            if logo is None:
                raise RuntimeError("no logo after three attempts")
            return [hero["prompt"], logo["prompt"]]
     '''), "failed", 4, "RuntimeError", {"succeeded": 1, "failed": 3}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {"prompt": "hero"})
            logo = None
            for attempt in range(3):
                try:
                    logo = await ctx.run("image.generate", {"prompt": "logo", "size": "512x512"})
                    break
                except CapabilityError:
                    continue
            if logo is None:
                raise RuntimeError("no logo after three attempts")
            return [hero["prompt"], logo["prompt"]]
     '''), "succeeded", 1, calls={"replayed": 1, "executed": 1})))

RETRY_SIZES_V1 = _s(f'''
    SIZES = ["{BAD}", "1x1", "512x512"]


    async def orchestrate(ctx, args):
        logo = None
        for attempt in range(3):
            try:
                logo = await ctx.run("image.generate", {{"prompt": "logo",
                                                        "size": SIZES[attempt]}})
                break
            except CapabilityError:
                continue
        poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
        return [logo["size"], poster["size"]]
''')

_mine("retry_loop_changing_payload", "loops", (
    "A retry loop that changes the payload on each attempt (a list of sizes; the third "
    "is accepted at occurrence 2), then the poster is rejected. The repair fixes the "
    "poster only: the loop's two rejected attempts were never committed, so they are "
    "asked again (paid, rejected again: free failures), the accepted size replays at its "
    "occurrence, the poster is paid. Nothing committed is paid twice; a rerun pays the "
    "two rejections again."),
    (Step(RETRY_SIZES_V1, "failed", 4, "CapabilityError", {"succeeded": 1, "failed": 3}),
     Step(RETRY_SIZES_V1.replace(f'"poster", "size": "{BAD}"', '"poster", "size": "512x512"'),
          "succeeded", 3, calls={"replayed": 1, "executed": 3, "failed": 2})),
    rerun_paid=2)

NO_BREAK = _s('''
    async def orchestrate(ctx, args):
        logo = None
        for attempt in range(3):
            try:
                logo = await ctx.run("CAP", {"prompt": "a fox logo"})
            except CapabilityError:
                continue
        return logo
''')
WITH_BREAK = NO_BREAK.replace('"a fox logo"})\n', '"a fox logo"})\n            break\n')

_mine("retry_loop_missing_break", "loops", (
    "A retry loop written without `break`: the first attempt succeeds and the loop asks "
    "for the same image again. The second pass is a semantic repeat inside the first "
    "revision (one ledger per run), denied before dispatch: never paid twice. The repair "
    "adds the break: the committed attempt replays, nothing is paid, the two passes that "
    "never ran leave no orphan."),
    (Step(NO_BREAK.replace("CAP", "image.generate"), "stopped", 1, "SemanticRepeatDenied",
          {"succeeded": 1, "denied": 1}),
     Step(WITH_BREAK.replace("CAP", "image.generate"), "succeeded", 0,
          calls={"replayed": 1, "executed": 0}, orphans=0)))

_mine("retry_loop_missing_break_text", "loops", (
    "The read-only version: the text loop without `break` pays three times in v1, the two "
    "repeats warned by name (auto warns for read-only capabilities). The repair adds the "
    "break: the first pass replays; the two repeats committed at occurrences 1 and 2 are "
    "orphans (warned, not paid)."),
    (Step(NO_BREAK.replace("CAP", "text.generate").replace("return logo",
                                                           'raise RuntimeError("no layout")'),
          "failed", 3, "RuntimeError", {"succeeded": 3}, warned=2),
     Step(WITH_BREAK.replace("CAP", "text.generate"), "succeeded", 0,
          calls={"replayed": 1, "executed": 0}, orphans=2)))

_mine("parallel_duplicate_prompt_deduped", "loops", (
    "A fanout whose list holds one prompt twice: both branches ask for one request in one "
    "wave, so the second is a semantic repeat of the first (one ledger per run, this "
    "revision included) and the wave is refused whole before dispatch. The model dedupes "
    "the list and reuses the result: the hero replays, the two distinct foxes are paid."),
    (Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            hero = await ctx.run("image.generate", {"prompt": "hero"})
            foxes = await ctx.parallel([gen(p) for p in ["a red fox", "a red fox", "a blue fox"]])
            return [hero["prompt"]] + [f["prompt"] for f in foxes[:3]]
     '''), "stopped", 1, "SemanticRepeatDenied", {"succeeded": 1, "denied": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(prompt):
                return await ctx.run("image.generate", {"prompt": prompt})

            hero = await ctx.run("image.generate", {"prompt": "hero"})
            foxes = await ctx.parallel([gen(p) for p in ["a red fox", "a blue fox"]])
            return [hero["prompt"], foxes[0]["prompt"], foxes[0]["prompt"], foxes[1]["prompt"]]
     '''), "succeeded", 2, calls={"replayed": 1, "executed": 2})))

LOOP4_TEXT_V1 = _s('''
    async def orchestrate(ctx, args):
        lines = []
        for i in range(4):
            lines.append(await ctx.run("text.generate", {"prompt": f"line {i}"}))
        raise RuntimeError("the editor wants a poster too")
''')


def _lines(n: int, poster: bool) -> str:
    tail = ('    poster = await ctx.run("image.generate", {"prompt": "poster"})\n'
            if poster else "")
    return _s(f'''
        async def orchestrate(ctx, args):
            lines = []
            for i in range({n}):
                lines.append(await ctx.run("text.generate", {{"prompt": f"line {{i}}"}}))
        ''') + tail + "    return len(lines)\n"


_mine("loop_shrunk_then_restored", "reintroduce", (
    "v2 shrinks a loop from 4 to 2 (two orphans, warned) and adds a poster; v3 restores "
    "the bound: the two orphaned occurrences are reached again and replay from v1's "
    "record, they are not paid again."),
    (Step(LOOP4_TEXT_V1, "failed", 4, "RuntimeError", {"succeeded": 4}),
     Step(_lines(2, True), "succeeded", 1, calls={"replayed": 2, "executed": 1}, orphans=2),
     Step(_lines(4, True), "succeeded", 0, calls={"replayed": 5, "executed": 0}, orphans=0)))

# ---- dag: plans, shots and reviews in loops -------------------------------------------------

SCENE_GRAPH = _s('''
    SIZES = {"harbour": "1024x1024", "market": "1024x1024", "alley": "ALLEY"}


    async def orchestrate(ctx, args):
        async def scene_graph(scene):
            async def plan(deps):
                return await ctx.run("storyboard.plan", {"brief": scene, "shots": 1})

            async def draw(deps):
                return await ctx.run("image.generate", {"prompt": deps["plan"]["shots"][0],
                                                        "size": SIZES[scene]})

            async def review(deps):
                return await ctx.run("review.visual", {"image": deps["draw"]["artifact"]})

            return await ctx.dag({"plan": (plan, []), "draw": (draw, ["plan"]),
                                  "review": (review, ["draw"])})

        graphs = []
        for scene in ["harbour", "market", "alley"]:
            graphs.append(await scene_graph(scene))
        return [g["review"]["verdict"] for g in graphs[:3]]
''')

_mine("dag_per_scene_loop", "dag", (
    "A plan -> draw -> review dag run once per scene in a loop; the third scene's draw "
    "asks for an unsupported size (a constant table), so its dag fails after its plan "
    "committed. The model fixes the table: the three plans, two draws and two reviews "
    "replay at their (node path, occurrence = scene), the alley's draw and review are paid."),
    (Step(SCENE_GRAPH.replace("ALLEY", BAD), "failed", 8, "CapabilityError",
          {"succeeded": 7, "failed": 1}),
     Step(SCENE_GRAPH.replace("ALLEY", "1536x1024"), "succeeded", 2,
          calls={"replayed": 7, "executed": 2})))

BOARD_V1 = _s('''
    async def orchestrate(ctx, args):
        board = await ctx.run("storyboard.plan", {"brief": "a lighthouse in a storm", "shots": 3})
        verdicts = []
        for shot in board["shots"][:3]:
            image = await ctx.run("image.generate", {"prompt": shot})
            review = await ctx.run("review.visual", {"image": image["artifact"],
                                                     "criteria": "storm visible"})
            verdicts.append(review["verdict"])
        raise RuntimeError("no cover text")
''')

_mine("storyboard_shots_reviewed_then_cover", "dag", (
    "storyboard.plan, then one image and one review per shot in a loop; v1 fails after "
    "all of them (the cover text is missing). The repair appends the cover text: seven "
    "committed calls replay at their occurrences, one is paid."),
    (Step(BOARD_V1, "failed", 7, "RuntimeError", {"succeeded": 7}),
     Step(BOARD_V1.replace('raise RuntimeError("no cover text")',
                           'cover = await ctx.run("text.generate", {"prompt": "cover text"})\n'
                           '    return [verdicts, cover["text"]]'),
          "succeeded", 1, calls={"replayed": 7, "executed": 1})))

_mine("storyboard_shots_into_parallel", "dag", (
    "The per-shot loop (image then review) moved into a helper run by ctx.parallel, the "
    "payload expressions kept: both frozen loop sites relocate to the helper's two sites "
    "and every shot's image and review replay by payload at its new path; the cover text "
    "is the new work."),
    (Step(BOARD_V1, "failed", 7, "RuntimeError", {"succeeded": 7}),
     Step(_s('''
        async def orchestrate(ctx, args):
            board = await ctx.run("storyboard.plan", {"brief": "a lighthouse in a storm",
                                                      "shots": 3})

            async def shoot(shot):
                image = await ctx.run("image.generate", {"prompt": shot})
                review = await ctx.run("review.visual", {"image": image["artifact"],
                                                         "criteria": "storm visible"})
                return review["verdict"]

            verdicts = await ctx.parallel([shoot(s) for s in board["shots"][:3]])
            cover = await ctx.run("text.generate", {"prompt": "cover text"})
            return [verdicts, cover["text"]]
     '''), "succeeded", 1, calls={"replayed": 7, "executed": 1}, relocations=2)))

_mine("storyboard_more_shots_diverges", "dag", (
    "The model asks the committed plan for more shots through a variable (n = 3 -> 4): "
    "the plan call expression is unchanged, so the gate accepts, but its committed "
    "identity is reached with another payload: ReplayDivergence before anything new, "
    "never three old shots reused under a four-shot plan."),
    (Step(BOARD_V1.replace('"shots": 3}', '"shots": n}').replace(
        "    board =", "    n = 3\n    board ="), "failed", 7, "RuntimeError", {"succeeded": 7}),
     Step(BOARD_V1.replace('"shots": 3}', '"shots": n}').replace(
         "    board =", "    n = 4\n    board =").replace("[:3]", "[:4]"),
          "stopped", 0, "ReplayDivergence", {"executed": 0})))

PIPE_LOOP = _s('''
    async def orchestrate(ctx, args):
        async def plan(job):
            board = await ctx.run("storyboard.plan", {"brief": job["brief"], "shots": 1})
            return {"shot": board["shots"][0], "size": job["size"]}

        async def draw(step):
            return await ctx.run("image.generate", {"prompt": step["shot"], "size": step["size"]})

        async def review(image):
            return await ctx.run("review.visual", {"image": image["artifact"]})

        out = []
        for job in [{"brief": "dawn", "size": "1024x1024"}, {"brief": "dusk", "size": "DUSK"}]:
            out.append(await ctx.pipeline([plan, draw, review], job))
        return [v["verdict"] for v in out[:2]]
''')

_mine("pipeline_in_loop", "dag", (
    "A plan -> draw -> review pipeline per job in a loop; the second job's size is "
    "rejected. The model fixes the job's size: the first job's three stages and the "
    "second job's plan replay, the second draw and its review are paid."),
    (Step(PIPE_LOOP.replace("DUSK", BAD), "failed", 5, "CapabilityError",
          {"succeeded": 4, "failed": 1}),
     Step(PIPE_LOOP.replace("DUSK", "1024x1536"), "succeeded", 2,
          calls={"replayed": 4, "executed": 2})))

# ---- early returns added in the repair ------------------------------------------------------

_mine("early_return_before_failing_call", "early_return", (
    "The model gives up on the crowd and returns early before it (behind a flag that is "
    "off): the hero and villain replay, the rejected crowd (never committed) is not "
    "reached, nothing is paid and nothing is orphaned."),
    (Step(SEQ3_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s(f'''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {{"prompt": "hero on a cliff"}})
            villain = await ctx.run("image.generate", {{"prompt": "villain in a tower"}})
            if not args.get("crowd"):
                return [hero["artifact"]["id"], villain["artifact"]["id"]]
            crowd = await ctx.run("image.generate", {{"prompt": "crowd", "size": "{BAD}"}})
            return [hero["artifact"]["id"], villain["artifact"]["id"], crowd["artifact"]["id"]]
     '''), "succeeded", 0, calls={"replayed": 2, "executed": 0}, orphans=0)))

EARLY_AFTER_HERO = _s(f'''
    async def orchestrate(ctx, args):
        hero = await ctx.run("image.generate", {{"prompt": "hero on a cliff"}})
        if args.get("hero_only", True):
            return [hero["artifact"]["id"]]
        villain = await ctx.run("image.generate", {{"prompt": "villain in a tower"}})
        crowd = await ctx.run("image.generate", {{"prompt": "crowd", "size": "{BAD}"}})
        return [hero["artifact"]["id"], villain["artifact"]["id"], crowd["artifact"]["id"]]
''')

_mine("early_return_orphans_committed", "early_return", (
    "An early return right after the hero: the committed villain is never reached. It is "
    "reported as an orphan (policy warn: the revision succeeds), nothing is paid."),
    (Step(SEQ3_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(EARLY_AFTER_HERO, "succeeded", 0, calls={"replayed": 1, "executed": 0}, orphans=1)))

_mine("early_return_orphan_stop", "early_return", (
    "The same early return under orphan_policy=stop: the revision fails with OrphanStop "
    "naming the villain; nothing is paid."),
    (Step(SEQ3_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(EARLY_AFTER_HERO, "failed", 0, "OrphanStop", {"replayed": 1, "executed": 0},
          orphans=1, orphan_policy="stop")))

_mine("early_return_in_loop", "early_return", (
    "In the index loop whose index 2 fails, the model returns what it has when it reaches "
    "index 2: indices 0 and 1 replay, nothing is paid, the failed index was never "
    "committed so nothing is orphaned."),
    (Step(PANELS_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(PANELS_V1.replace("        size =", "        if i == 2:\n"
                                             "            return len(panels)\n        size ="),
          "succeeded", 0, calls={"replayed": 2, "executed": 0}, orphans=0)))

# ---- promoted fallbacks ---------------------------------------------------------------------

FALLBACK_V1 = _s(f'''
    async def orchestrate(ctx, args):
        hero = await ctx.run("image.generate", {{"prompt": "hero"}})
        try:
            poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
        except CapabilityError:
            poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "512x512"}})
        banner = await ctx.run("image.generate", {{"prompt": "banner", "size": "{BAD}"}})
        return [hero["size"], poster["size"], banner["size"]]
''')

_mine("fallback_promoted", "fallback", (
    "v1 tried the poster at an unsupported size and fell back to 512x512 (committed), then "
    "the banner failed. The model makes the fallback the main path (the try/except goes, "
    "the fallback call expression stays word for word) and fixes the banner: the fallback "
    "relocates out of the except block and replays, the banner is paid; the rejected "
    "first try is simply no longer asked."),
    (Step(FALLBACK_V1, "failed", 4, "CapabilityError", {"succeeded": 2, "failed": 2}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {"prompt": "hero"})
            poster = await ctx.run("image.generate", {"prompt": "poster", "size": "512x512"})
            banner = await ctx.run("image.generate", {"prompt": "banner", "size": "512x512"})
            return [hero["size"], poster["size"], banner["size"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, relocations=1)),
    celery=True)

_mine("fallback_promoted_helper", "fallback", (
    "The fallback through a helper (poster_at(BAD) in the try, poster_at('512x512') in "
    "the except). Promoted to the main path, the helper call with the same argument "
    "relocates by chain and the committed fallback replays; the banner is paid."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            async def poster_at(size):
                return await ctx.run("image.generate", {{"prompt": "poster", "size": size}})

            try:
                poster = await poster_at("{BAD}")
            except CapabilityError:
                poster = await poster_at("512x512")
            banner = await ctx.run("image.generate", {{"prompt": "banner", "size": "{BAD}"}})
            return [poster["size"], banner["size"]]
     '''), "failed", 3, "CapabilityError", {"succeeded": 1, "failed": 2}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def poster_at(size):
                return await ctx.run("image.generate", {"prompt": "poster", "size": size})

            poster = await poster_at("512x512")
            banner = await ctx.run("image.generate", {"prompt": "banner", "size": "512x512"})
            return [poster["size"], banner["size"]]
     '''), "succeeded", 1, calls={"replayed": 1, "executed": 1}, relocations=1)))

_mine("fallback_promoted_keeps_try", "fallback", (
    "The model keeps a try/except but swaps the roles: the committed fallback is now "
    "tried first (it succeeds: replayed) and the original rejected size becomes the "
    "never-reached fallback; the banner is fixed and paid."),
    (Step(FALLBACK_V1, "failed", 4, "CapabilityError", {"succeeded": 2, "failed": 2}),
     Step(_s(f'''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {{"prompt": "hero"}})
            try:
                poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "512x512"}})
            except CapabilityError:
                poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
            banner = await ctx.run("image.generate", {{"prompt": "banner", "size": "512x512"}})
            return [hero["size"], poster["size"], banner["size"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, relocations=1)))

# ---- six-revision chains --------------------------------------------------------------------


def _seq_fixed(fixed: int) -> str:
    """The hero, then five items; items 1..fixed have a supported size."""
    lines = ['    hero = await ctx.run("image.generate", {"prompt": "hero"})']
    for i in range(1, 6):
        size = "512x512" if i <= fixed else BAD
        lines.append(f'    item{i} = await ctx.run("image.generate", '
                     f'{{"prompt": "item {i}", "size": "{size}"}})')
    return ("async def orchestrate(ctx, args):\n" + "\n".join(lines)
            + '\n    return "done"\n')


_mine("six_revisions_sequential", "chain", (
    "Five items after a hero, each asking for an unsupported size; the model fixes one "
    "more per revision (v1..v6). Each revision replays everything committed and pays the "
    "item it fixed and the next one's rejection: 2 per step, 1 for the last, and no "
    "committed item is ever paid again."),
    (*(Step(_seq_fixed(k), "failed", 2, "CapabilityError",
            {"replayed": k, "succeeded": 1, "failed": 1}) for k in range(5)),
     Step(_seq_fixed(5), "succeeded", 1, calls={"replayed": 5, "executed": 1})))

FANOUT6 = _s('''
    SIZES = SIZES_HERE


    async def orchestrate(ctx, args):
        async def gen(i):
            return await ctx.run("image.generate", {"prompt": f"tile {i}", "size": SIZES[i]})

        tiles = await ctx.parallel([gen(i) for i in range(6)])
        return len(tiles)
''')


def _fanout_fixed(fixed: int) -> str:
    sizes = ["256x256" if i <= fixed else BAD for i in range(6)]
    return FANOUT6.replace("SIZES_HERE", repr(sizes).replace("'", '"'))


_mine("six_revisions_fanout", "chain", (
    "A 6-way fanout where tiles 1..5 are rejected; every revision fixes one more tile in "
    "a constant table. ctx.parallel lets every branch finish, so each revision pays the "
    "tile it fixed plus the rejections still left (free failures), and replays every "
    "committed tile by its path."),
    (*(Step(_fanout_fixed(k), "failed", 6 - k, "CapabilityError",
            {"replayed": k, "succeeded": 1, "failed": 5 - k}) for k in range(5)),
     Step(_fanout_fixed(5), "succeeded", 1, calls={"replayed": 5, "executed": 1})))

CHAIN_V1 = _s(f'''
    async def orchestrate(ctx, args):
        size = "1024x1024"
        hero = await ctx.run("image.generate", {{"prompt": "hero", "size": size}})
        poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
        return [hero["size"], poster["size"]]
''')
CHAIN_V2 = _s('''
    async def orchestrate(ctx, args):
        size = "1024x1024"
        hero = await ctx.run("image.generate", {"prompt": "hero", "size": size})
        poster = await ctx.run("image.generate", {"prompt": "poster", "size": "512x512"})
        caption = await ctx.run("text.generate", {"prompt": "  "})
        return [hero["size"], poster["size"], caption["text"]]
''')
CHAIN_V3 = _s(f'''
    async def orchestrate(ctx, args):
        async def render(prompt, size):
            return await ctx.run("image.generate", {{"prompt": prompt, "size": size}})

        size = "1024x1024"
        hero = await ctx.run("image.generate", {{"prompt": "hero", "size": size}})
        poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "512x512"}})
        caption = await ctx.run("text.generate", {{"prompt": "a caption for the hero"}})
        panels = []
        for i in range(2):
            panels.append(await render(f"panel {{i}}", "{BAD}" if i == 1 else "256x256"))
        return [hero["size"], poster["size"], caption["text"], len(panels)]
''')
CHAIN_V4 = _s('''
    async def orchestrate(ctx, args):
        async def render(prompt, size):
            return await ctx.run("image.generate", {"prompt": prompt, "size": size})

        size = "1024x1024"
        hero = await ctx.run("image.generate", {"prompt": "hero", "size": size})
        poster = await ctx.run("image.generate", {"prompt": "poster", "size": "512x512"})
        caption = await ctx.run("text.generate", {"prompt": "a caption for the hero"})
        panels = []
        for i in range(2):
            panels.append(await render(f"panel {i}", "256x256"))
        verdict = await ctx.run("review.visual", {"image": hero["artifact"], "criteria": " "})
        return [hero["size"], poster["size"], caption["text"], len(panels), verdict["verdict"]]
''')
CHAIN_V5 = _s('''
    async def orchestrate(ctx, args):
        async def render(prompt, size):
            return await ctx.run("image.generate", {"prompt": prompt, "size": size})

        async def main():
            size = "1024x1024"
            hero = await ctx.run("image.generate", {"prompt": "hero", "size": size})
            poster = await ctx.run("image.generate", {"prompt": "poster", "size": "512x512"})
            caption = await ctx.run("text.generate", {"prompt": "a caption for the hero"})
            panels = []
            for i in range(2):
                panels.append(await render(f"panel {i}", "256x256"))
            verdict = await ctx.run("review.visual", {"image": hero["artifact"],
                                                      "criteria": "hero is centred"})
            board = await ctx.run("storyboard.plan", {"brief": "", "shots": 2})
            return [hero["size"], poster["size"], caption["text"], len(panels),
                    verdict["verdict"], board["shots"]]

        return await main()
''')
CHAIN_V6 = CHAIN_V5.replace('"brief": ""', '"brief": "the hero\'s journey"')

_mine("six_revisions_refactors", "chain", (
    "Six revisions that each fix one failure and refactor on the way: v2 fixes the poster "
    "(and adds an empty caption prompt, rejected), v3 fixes the caption and adds a panel "
    "loop through a new helper (panel 1 rejected), v4 fixes the panel and adds a review "
    "with blank criteria (rejected), v5 moves the whole body into main() (every frozen "
    "site relocates) and adds a plan with an empty brief (rejected), v6 fixes the brief. "
    "Every step pays exactly its new work and its rejection; nothing committed is paid "
    "twice across the chain."),
    (Step(CHAIN_V1, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(CHAIN_V2, "failed", 2, "CapabilityError", {"replayed": 1, "succeeded": 1,
                                                     "failed": 1}),
     Step(CHAIN_V3, "failed", 3, "CapabilityError", {"replayed": 2, "succeeded": 2,
                                                     "failed": 1}),
     Step(CHAIN_V4, "failed", 2, "CapabilityError", {"replayed": 4, "succeeded": 1,
                                                     "failed": 1}),
     Step(CHAIN_V5, "failed", 2, "CapabilityError", {"replayed": 5, "succeeded": 1,
                                                     "failed": 1}),
     Step(CHAIN_V6, "succeeded", 1, calls={"replayed": 6, "executed": 1})))

# ---- reintroduced calls ---------------------------------------------------------------------

_mine("reintroduced_after_gate_refusal", "reintroduce", (
    "v2 deletes the committed villain (and fixes the crowd): the gate refuses the removal "
    "before any sandbox. v3 puts the villain back word for word: it replays from v1's "
    "record, only the crowd is paid."),
    (Step(SEQ3_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
            crowd = await ctx.run("image.generate", {"prompt": "crowd", "size": "512x512"})
            return [hero["artifact"]["id"], crowd["artifact"]["id"]]
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("call_changed",)),
     Step(SEQ3_V1.replace(f'"size": "{BAD}"', '"size": "512x512"'), "succeeded", 1,
          calls={"replayed": 2, "executed": 1})))

_mine("reintroduced_after_orphan", "reintroduce", (
    "v2 puts the villain behind a flag that is off (an orphan, warned) and fixes the "
    "crowd; v3 runs with the flag on: the villain is reached again at its relocated site "
    "and replays from v1's record. Reached again is never paid again."),
    (Step(SEQ3_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
            villain = None
            if args.get("villain"):
                villain = await ctx.run("image.generate", {"prompt": "villain in a tower"})
            crowd = await ctx.run("image.generate", {"prompt": "crowd", "size": "512x512"})
            return [hero["artifact"]["id"], crowd["artifact"]["id"], villain is None]
     '''), "succeeded", 1, calls={"replayed": 1, "executed": 1}, orphans=1, relocations=1),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
            villain = None
            if args.get("villain"):
                villain = await ctx.run("image.generate", {"prompt": "villain in a tower"})
            crowd = await ctx.run("image.generate", {"prompt": "crowd", "size": "512x512"})
            return [hero["artifact"]["id"], crowd["artifact"]["id"], villain is None]
     '''), "succeeded", 0, calls={"replayed": 3, "executed": 0}, orphans=0,
          args={"villain": True})),
    celery=True)

_mine("reintroduced_in_helper", "reintroduce", (
    "v2 returns early before the villain (an orphan), v3 moves the villain into a helper "
    "and reaches it again: the frozen site relocates into the helper and the villain "
    "replays; only the fixed crowd is paid across v2 and v3."),
    (Step(SEQ3_V1, "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
            if args.get("stop_early", True):
                return [hero["artifact"]["id"]]
            villain = await ctx.run("image.generate", {"prompt": "villain in a tower"})
            crowd = await ctx.run("image.generate", {"prompt": "crowd", "size": "512x512"})
            return [hero["artifact"]["id"], villain["artifact"]["id"], crowd["artifact"]["id"]]
     '''), "succeeded", 0, calls={"replayed": 1, "executed": 0}, orphans=1),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def cast():
                return await ctx.run("image.generate", {"prompt": "villain in a tower"})

            hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
            villain = await cast()
            crowd = await ctx.run("image.generate", {"prompt": "crowd", "size": "512x512"})
            return [hero["artifact"]["id"], villain["artifact"]["id"], crowd["artifact"]["id"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, orphans=0, relocations=1)))

# ---- races ----------------------------------------------------------------------------------

RACE_LOOP = _s('''
    async def orchestrate(ctx, args):
        async def attempt(item, size):
            return await ctx.run("image.generate", {"prompt": item, "size": size})

        art = []
        for item in ["logo", "badge"]:
            art.append(await ctx.race([attempt(item, s) for s in ["BADSIZE", "512x512"]]))
        poster = await ctx.run("image.generate", {"prompt": "poster", "size": "POSTER"})
        return [a["size"] for a in art[:2]] + [poster["size"]]
''').replace("BADSIZE", BAD)

_mine("race_in_loop", "race", (
    "A race over sizes inside a loop of two items (the unsupported size loses each "
    "race); the poster after the loop fails. Fixed, each race occurrence replays its "
    "committed winner, no branch runs again, only the poster is paid."),
    (Step(RACE_LOOP.replace("POSTER", BAD), "failed", 5, "CapabilityError",
          {"succeeded": 2, "failed": 3}),
     Step(RACE_LOOP.replace("POSTER", "512x512"), "succeeded", 1,
          calls={"replayed": 4, "executed": 1}, races_replayed=2)))

RACE_STYLE = _s('''
    async def orchestrate(ctx, args):
        async def draft(style):
            return await ctx.run("text.generate", {"prompt": "tagline, " + style})

        best = await ctx.race([draft(s) for s in STYLES])
        art = await ctx.run("image.generate", {"prompt": "key art", "size": "ART"})
        return [best["text"], art["size"]]
''')

_mine("race_branches_respelled", "race", (
    "The race's style list retyped with stray spaces ('bold ' , ' calm'): the prompts "
    "are whitespace-normalized, so the branches make the same requests and the committed "
    "winner (calm, the faster) replays; the fixed key art is paid, no draft is paid "
    "again."),
    (Step(RACE_STYLE.replace("STYLES", '["bold", "calm"]').replace("ART", BAD), "failed", 3,
          "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(RACE_STYLE.replace("STYLES", '["bold  ", "  calm"]').replace("ART", "1024x1024"),
          "succeeded", 1, calls={"replayed": 2, "executed": 1}, races_replayed=1)),
    latency={"tagline, bold": 0.5})

_mine("race_winner_reviewed", "race", (
    "The race's winner is sent to review.visual in the repair (a new call that depends on "
    "the replayed result): the committed winner replays, the review and the fixed poster "
    "are paid; the losing branch is never paid again."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            async def attempt(size):
                return await ctx.run("image.generate", {{"prompt": "key art", "size": size}})

            art = await ctx.race([attempt(s) for s in ["{BAD}", "1024x1024"]])
            poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
            return art["size"]
     '''), "failed", 3, "CapabilityError", {"succeeded": 1, "failed": 2}),
     Step(_s(f'''
        async def orchestrate(ctx, args):
            async def attempt(size):
                return await ctx.run("image.generate", {{"prompt": "key art", "size": size}})

            art = await ctx.race([attempt(s) for s in ["{BAD}", "1024x1024"]])
            review = await ctx.run("review.visual", {{"image": art["artifact"]}})
            poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "512x512"}})
            return [art["size"], review["verdict"], poster["size"]]
     '''), "succeeded", 2, calls={"replayed": 2, "executed": 2}, races_replayed=1)))

# ---- prompts respelled: whitespace and Unicode forms ----------------------------------------

RESPELL_V1 = _s(f'''
    async def orchestrate(ctx, args):
        prompt = PROMPT
        fox = await ctx.run("image.generate", {{"prompt": prompt}})
        map_ = await ctx.run("image.generate", {{"prompt": "a map", "size": "{BAD}"}})
        return [fox["artifact"]["id"], map_["artifact"]["id"]]
''')


def _respelled(prompt: str, size: str) -> str:
    return RESPELL_V1.replace("PROMPT", prompt).replace(f'"size": "{BAD}"', f'"size": "{size}"')


_mine("prompt_whitespace_respelled", "respell", (
    "The model retypes the committed prompt variable with a double space and a trailing "
    "space ('a  red fox '): the prompt is whitespace-normalized, so the committed call "
    "gets the same request: it replays, only the map is paid."),
    (Step(_respelled('"a red fox"', BAD), "failed", 2, "CapabilityError",
          {"succeeded": 1, "failed": 1}),
     Step(_respelled('"a  red fox "', "512x512"), "succeeded", 1,
          calls={"replayed": 1, "executed": 1})),
    celery=True)

_mine("prompt_nfd_respelled", "respell", (
    "The committed prompt retyped in decomposed Unicode (NFD 'cafe\\u0301 terrace' for "
    "NFC 'caf\\u00e9 terrace'): strings are NFC-normalized before the digest, so it "
    "replays; only the map is paid."),
    (Step(_respelled('"caf\\u00e9 terrace"', BAD), "failed", 2, "CapabilityError",
          {"succeeded": 1, "failed": 1}),
     Step(_respelled('"cafe\\u0301 terrace"', "512x512"), "succeeded", 1,
          calls={"replayed": 1, "executed": 1})))

_mine("prompt_respelled_new_site", "respell", (
    "A new call (another expression, a thumbnail) sends the committed prompt respelled "
    "with tabs and a trailing newline. Normalized it is the paid request: a semantic "
    "repeat of a side-effecting call, denied before dispatch under auto; never a second "
    "payment for the same picture."),
    (Step(_respelled('"a red fox"', BAD), "failed", 2, "CapabilityError",
          {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            prompt = "a red fox"
            fox = await ctx.run("image.generate", {"prompt": prompt})
            thumb = await ctx.run("image.generate", {"prompt": "a\\tred   fox\\n"})
            map_ = await ctx.run("image.generate", {"prompt": "a map", "size": "512x512"})
            return [fox["artifact"]["id"], thumb["artifact"]["id"], map_["artifact"]["id"]]
     '''), "stopped", 0, "SemanticRepeatDenied", {"replayed": 1, "executed": 0,
                                                  "denied": 1})))

_mine("prompt_respelled_in_one_loop", "respell", (
    "One revision asks a loop over ['a red fox', 'a red  fox'] (the model thought they "
    "differ): the second pass is the first's request, a semantic repeat inside the "
    "revision, denied before dispatch. The repair drops the duplicate: the first "
    "replays and the new work (a map) is paid."),
    (Step(_s('''
        async def orchestrate(ctx, args):
            foxes = []
            for p in ["a red fox", "a red  fox"]:
                foxes.append(await ctx.run("image.generate", {"prompt": p}))
            return len(foxes)
     '''), "stopped", 1, "SemanticRepeatDenied", {"succeeded": 1, "denied": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            foxes = []
            for p in ["a red fox"]:
                foxes.append(await ctx.run("image.generate", {"prompt": p}))
            map_ = await ctx.run("image.generate", {"prompt": "a map"})
            return [len(foxes), map_["prompt"]]
     '''), "succeeded", 1, calls={"replayed": 1, "executed": 1})))

_mine("style_respelled_text_field", "respell", (
    "The style field (a free-text field, like the prompt) retyped with a line break in "
    "it: 'ink\\n  wash' and 'ink wash' are not the same text once normalized (a line "
    "break is kept), so the committed call diverges and the run stops: whitespace "
    "normalization never merges two different lines into one request."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            style = "ink wash"
            crane = await ctx.run("image.generate", {{"prompt": "a crane", "style": style}})
            map_ = await ctx.run("image.generate", {{"prompt": "a map", "size": "{BAD}"}})
            return crane["prompt"]
     '''), "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            style = "ink\\n  wash"
            crane = await ctx.run("image.generate", {"prompt": "a crane", "style": style})
            map_ = await ctx.run("image.generate", {"prompt": "a map", "size": "512x512"})
            return crane["prompt"]
     '''), "stopped", 0, "ReplayDivergence", {"executed": 0})))

# ---- takes ----------------------------------------------------------------------------------

TAKES_V1 = _s('''
    async def orchestrate(ctx, args):
        hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
        again = await ctx.run("image.generate", {"prompt": "hero on a cliff"}, take=2)
        raise RuntimeError("the art director has not picked a take")
''')

_mine("take_two_in_v1_kept", "takes", (
    "The first revision declares take=2 (allowed: in the first revision any take is "
    "the author's plan), then fails. The repair keeps both calls and adds a caption: "
    "both takes replay at their identities, only the caption is paid."),
    (Step(TAKES_V1, "failed", 2, "RuntimeError", {"succeeded": 2}, takes=1),
     Step(TAKES_V1.replace('raise RuntimeError("the art director has not picked a take")',
                           'pick = await ctx.run("text.generate", {"prompt": "pick a take"})\n'
                           '    return [hero["artifact"]["id"], again["artifact"]["id"]]'),
          "succeeded", 1, calls={"replayed": 2, "executed": 1})))

TAKE3_V2 = TAKES_V1.replace(
    'raise RuntimeError("the art director has not picked a take")',
    'third = await ctx.run("image.generate", {"prompt": "hero on a cliff"}, take=3)\n'
    '    return [hero["artifact"]["id"], again["artifact"]["id"], third["artifact"]["id"]]')

_mine("take_three_after_v1_take_two", "takes", (
    "v1 paid take 1 and take 2; the repair adds take=3. Take 2 was committed by an "
    "earlier revision and no earlier revision asked for take 3: a further take is a "
    "person's decision, refused (TakeNotApproved) before dispatch; with approved_takes it "
    "is paid once, on purpose."),
    (Step(TAKES_V1, "failed", 2, "RuntimeError", {"succeeded": 2}, takes=1),
     Step(TAKE3_V2, "stopped", 0, "TakeNotApproved", {"replayed": 2, "executed": 0,
                                                      "denied": 1}),
     Step(TAKE3_V2, "succeeded", 1, calls={"replayed": 2, "executed": 1}, takes=1,
          approved_takes=("image.generate",))))

TAKE_ADDED = _s('''
    async def orchestrate(ctx, args):
        hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
        alt = await ctx.run("image.generate", {"prompt": "hero on a cliff"}, take=2)
        return [hero["artifact"]["id"], alt["artifact"]["id"]]
''')
HERO_THEN_FAIL = _s(f'''
    async def orchestrate(ctx, args):
        hero = await ctx.run("image.generate", {{"prompt": "hero on a cliff"}})
        banner = await ctx.run("image.generate", {{"prompt": "banner", "size": "{BAD}"}})
        return hero["artifact"]["id"]
''')

_mine("take_two_refused_then_reused", "takes", (
    "The model answers a failure by asking the hero again with take=2 (refused: a "
    "further take added by a repair needs an approval); v3 follows the refusal's advice "
    "and reuses the committed hero for the alternate slot: it replays, nothing is paid."),
    (Step(HERO_THEN_FAIL, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(TAKE_ADDED, "stopped", 0, "TakeNotApproved", {"replayed": 1, "executed": 0}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
            alt = hero
            return [hero["artifact"]["id"], alt["artifact"]["id"]]
     '''), "succeeded", 0, calls={"replayed": 1, "executed": 0})))

_mine("take_two_approved_for_other_capability", "takes", (
    "The envelope approves further takes of text.generate only; the repair's take=2 of an "
    "image is still refused: an approval names its capability and covers nothing else."),
    (Step(HERO_THEN_FAIL, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(TAKE_ADDED, "stopped", 0, "TakeNotApproved", {"replayed": 1, "executed": 0},
          approved_takes=("text.generate",)),
     Step(TAKE_ADDED, "succeeded", 1, calls={"replayed": 1, "executed": 1}, takes=1,
          approved_takes=("image.generate",))))

_mine("take_two_in_v1_then_plain_copy", "takes", (
    "v1 declared take 1 and take 2; the repair adds a third copy without take=. It is "
    "neither take: the same request at a new identity, a semantic repeat of a paid "
    "side-effecting call, denied before dispatch (a take is declared, never inferred)."),
    (Step(TAKES_V1, "failed", 2, "RuntimeError", {"succeeded": 2}, takes=1),
     Step(TAKES_V1.replace(
         'raise RuntimeError("the art director has not picked a take")',
         'third = await ctx.run("image.generate", {"prompt": "hero  on a cliff"})\n'
         '    return [hero["artifact"]["id"], third["artifact"]["id"]]'),
          "stopped", 0, "SemanticRepeatDenied", {"replayed": 2, "executed": 0,
                                                 "denied": 1})))

_mine("take_two_first_revision_loop_kept", "takes", (
    "A first revision that asks take=1 and take=2 inside a loop over two styles (four "
    "paid, two of them declared further takes), then fails. The repair wraps the loop in "
    "a helper and adds a caption: the loop's site relocates, all four takes replay by "
    "payload and take, only the caption is paid."),
    (Step(_s('''
        async def orchestrate(ctx, args):
            shots = []
            for s in ["ink", "oil"]:
                shots.append(await ctx.run("image.generate", {"prompt": "a crane", "style": s}))
                shots.append(await ctx.run("image.generate", {"prompt": "a crane", "style": s},
                                           take=2))
            raise RuntimeError("no caption")
     '''), "failed", 4, "RuntimeError", {"succeeded": 4}, takes=2),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def both(s):
                one = await ctx.run("image.generate", {"prompt": "a crane", "style": s})
                two = await ctx.run("image.generate", {"prompt": "a crane", "style": s},
                                    take=2)
                return [one, two]

            shots = []
            for s in ["ink", "oil"]:
                shots.extend(await both(s))
            caption = await ctx.run("text.generate", {"prompt": "a caption for the cranes"})
            return [len(shots), caption["text"]]
     '''), "succeeded", 1, calls={"replayed": 4, "executed": 1}, relocations=2)))

_mine("take_two_for_new_payload_in_repair", "takes", (
    "The repair adds new work and a second take of it in the same revision: the lower "
    "take was not committed by an earlier revision, so this is the repair's own plan, "
    "not a further take of paid work: both are paid, the second as a declared take."),
    (Step(HERO_THEN_FAIL, "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
            banner = await ctx.run("image.generate", {"prompt": "banner"})
            banner2 = await ctx.run("image.generate", {"prompt": "banner"}, take=2)
            return [hero["prompt"], banner["prompt"], banner2["prompt"]]
     '''), "succeeded", 2, calls={"replayed": 1, "executed": 2}, takes=1)))

_mine("take_two_declared_in_v1_never_reached", "takes", (
    "v1 declared take=2 of the hero but failed (the poster) before reaching it. The "
    "repair only fixes the poster; take 2 is now asked for the first time, in a repair, "
    "for a payload whose take 1 an earlier revision committed: by the contract it is a "
    "further take no earlier revision asked for, refused until approved; approved, it "
    "is paid once."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {{"prompt": "hero on a cliff"}})
            poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
            alt = await ctx.run("image.generate", {{"prompt": "hero on a cliff"}}, take=2)
            return [hero["prompt"], poster["prompt"], alt["prompt"]]
     '''), "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
            poster = await ctx.run("image.generate", {"prompt": "poster", "size": "512x512"})
            alt = await ctx.run("image.generate", {"prompt": "hero on a cliff"}, take=2)
            return [hero["prompt"], poster["prompt"], alt["prompt"]]
     '''), "stopped", 1, "TakeNotApproved", {"replayed": 1, "succeeded": 1, "denied": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
            poster = await ctx.run("image.generate", {"prompt": "poster", "size": "512x512"})
            alt = await ctx.run("image.generate", {"prompt": "hero on a cliff"}, take=2)
            return [hero["prompt"], poster["prompt"], alt["prompt"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, takes=1,
          approved_takes=("image.generate",))))

_mine("take_two_in_one_wave", "takes", (
    "Take 1 and take 2 of one payload asked in one ctx.parallel wave in the first "
    "revision: two requests (the take is part of the request), both paid, the second "
    "as a declared take. The repair keeps the wave and fixes the poster: both replay."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            pair = await ctx.parallel([
                ctx.run("image.generate", {{"prompt": "a lantern"}}),
                ctx.run("image.generate", {{"prompt": "a lantern"}}, take=2),
            ])
            poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
            return [p["prompt"] for p in pair[:2]]
     '''), "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}, takes=1),
     Step(_s('''
        async def orchestrate(ctx, args):
            pair = await ctx.parallel([
                ctx.run("image.generate", {"prompt": "a lantern"}),
                ctx.run("image.generate", {"prompt": "a lantern"}, take=2),
            ])
            poster = await ctx.run("image.generate", {"prompt": "poster", "size": "512x512"})
            return [p["prompt"] for p in pair[:2]] + [poster["prompt"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1})))

_mine("retry_loop_wrapped_around_committed", "loops", (
    "The model wraps the already-committed hero in a retry loop (for attempt in "
    "range(3): try ... break except CapabilityError) while fixing the poster: the hero "
    "moves into a for+try block, relocates by its unchanged expression and replays at "
    "occurrence 0; the loop breaks; only the poster is paid."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {{"prompt": "hero on a cliff"}})
            poster = await ctx.run("image.generate", {{"prompt": "poster", "size": "{BAD}"}})
            return [hero["prompt"], poster["prompt"]]
     '''), "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = None
            for attempt in range(3):
                try:
                    hero = await ctx.run("image.generate", {"prompt": "hero on a cliff"})
                    break
                except CapabilityError:
                    continue
            poster = await ctx.run("image.generate", {"prompt": "poster", "size": "512x512"})
            return [hero["prompt"], poster["prompt"]]
     '''), "succeeded", 1, calls={"replayed": 1, "executed": 1}, relocations=1, orphans=0)))

_mine("race_wrapped_in_try", "race", (
    "The committed race wrapped in try/except CapabilityError (the model guards against "
    "every branch failing) while fixing the poster: the race site moves into a block and "
    "relocates; its committed winner replays, no branch is paid again."),
    (Step(RACE_STYLE.replace("STYLES", '["bold", "calm"]').replace("ART", BAD), "failed", 3,
          "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def draft(style):
                return await ctx.run("text.generate", {"prompt": "tagline, " + style})

            best = None
            try:
                best = await ctx.race([draft(s) for s in ["bold", "calm"]])
            except CapabilityError:
                best = {"text": "no tagline"}
            art = await ctx.run("image.generate", {"prompt": "key art", "size": "1024x1024"})
            return [best["text"], art["size"]]
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1}, races_replayed=1)),
    latency={"tagline, bold": 0.5})

_mine("dag_node_dropped_def_kept", "dag", (
    "A committed dag node (the caption) dropped from the graph while its function stays "
    "defined. A site is a chain of calls from orchestrate, and nothing calls the caption "
    "function any more: its frozen site is gone, and the gate refuses the removal "
    "(removed) before any sandbox; nothing is paid. (Dropping a committed call is the "
    "paper's counterexample, whether the text of the call stays or not.)"),
    (Step(_s(f'''
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
     '''), "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def caption(deps):
                return await ctx.run("text.generate", {"prompt": "caption the harbour"})

            async def plan(deps):
                return await ctx.run("storyboard.plan", {"brief": "harbour", "shots": 2})

            async def draw(deps):
                return await ctx.run("image.generate", {"prompt": deps["plan"]["shots"][0],
                                                        "size": "1024x1024"})

            graph = await ctx.dag({"plan": (plan, []), "draw": (draw, ["plan"])})
            return graph["draw"]["artifact"]["id"]
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("removed",))))

_mine("prompt_literal_respelled", "respell", (
    "The committed call's prompt literal itself retyped with a double space "
    "({\"prompt\": \"a red  fox\"}): the call expression is a literal edit, so the gate "
    "refuses it (call_changed) before any sandbox: nothing is paid, though the request "
    "is the same once normalized."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            fox = await ctx.run("image.generate", {{"prompt": "a red fox"}})
            map_ = await ctx.run("image.generate", {{"prompt": "a map", "size": "{BAD}"}})
            return fox["prompt"]
     '''), "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            fox = await ctx.run("image.generate", {"prompt": "a red  fox"})
            map_ = await ctx.run("image.generate", {"prompt": "a map", "size": "512x512"})
            return fox["prompt"]
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("call_changed",))))

_mine("brief_respelled_in_plan", "respell", (
    "The storyboard brief (a free-text field) retyped through its variable with a tab "
    "and trailing spaces: the plan replays, so every shot prompt derived from it is the "
    "same and the committed shot replays too; only the fixed second shot is paid."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            brief = "a harbour at dawn"
            board = await ctx.run("storyboard.plan", {{"brief": brief, "shots": 2}})
            sizes = ["1024x1024", "{BAD}"]
            shots = []
            for i in range(2):
                shots.append(await ctx.run("image.generate", {{"prompt": board["shots"][i],
                                                               "size": sizes[i]}}))
            return len(shots)
     '''), "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            brief = "a harbour\\tat dawn   "
            board = await ctx.run("storyboard.plan", {"brief": brief, "shots": 2})
            sizes = ["1024x1024", "512x512"]
            shots = []
            for i in range(2):
                shots.append(await ctx.run("image.generate", {"prompt": board["shots"][i],
                                                              "size": sizes[i]}))
            return len(shots)
     '''), "succeeded", 1, calls={"replayed": 2, "executed": 1})))

RACE_PAIR = _s('''
    async def orchestrate(ctx, args):
        async def attempt(item, size):
            return await ctx.run("image.generate", {"prompt": item, "size": size})

        async def pick(item):
            return await ctx.race([attempt(item, s) for s in ["BADSIZE", "512x512"]])

        arts = await ctx.parallel([pick(i) for i in ITEMS])
        poster = await ctx.run("image.generate", {"prompt": "poster", "size": "POSTER"})
        return [a["prompt"] for a in arts[:2]] + [poster["size"]]
''').replace("BADSIZE", BAD)

_mine("race_pair_swapped_in_parallel", "race", (
    "Two races through one helper, run by ctx.parallel over [logo, badge]; the model "
    "swaps the list while fixing the poster. Each race now stands at the other's fanout "
    "path. A race must replay the same winner: the committed decision whose winner's "
    "first call (call expression and payload) is among this race's branches is the "
    "unique match, exactly as for a moved call; never a divergence for committed work, "
    "never another item's image."),
    (Step(RACE_PAIR.replace("ITEMS", '["logo", "badge"]').replace("POSTER", BAD), "failed",
          5, "CapabilityError", {"succeeded": 2, "failed": 3}),
     Step(RACE_PAIR.replace("ITEMS", '["badge", "logo"]').replace("POSTER", "512x512"),
          "succeeded", 1, calls={"replayed": 4, "executed": 1}, races_replayed=2)))

_mine("race_in_loop_reordered", "race", (
    "The race-per-item loop with its item list reversed: each race occurrence now meets "
    "the other occurrence's committed decision. As for a moved call, the one unused "
    "committed race whose winner this race's branches make is its decision: both "
    "winners replay, only the poster is paid."),
    (Step(RACE_LOOP.replace("POSTER", BAD), "failed", 5, "CapabilityError",
          {"succeeded": 2, "failed": 3}),
     Step(RACE_LOOP.replace("POSTER", "512x512").replace('["logo", "badge"]',
                                                         '["badge", "logo"]'),
          "succeeded", 1, calls={"replayed": 4, "executed": 1}, races_replayed=2)))

_mine("early_return_in_parallel_branch", "early_return", (
    "Inside one ctx.parallel branch the model returns early (a guard on the branch's "
    "input) before the branch's second, committed call: that identity is an orphan "
    "(warned), the other branch replays, the fixed cover is paid."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            async def scene(name, detail):
                wide = await ctx.run("image.generate", {{"prompt": name + " wide"}})
                close = await ctx.run("image.generate", {{"prompt": name + " " + detail}})
                return [wide["prompt"], close["prompt"]]

            scenes = await ctx.parallel([scene("harbour", "ropes"), scene("market", "fruit")])
            cover = await ctx.run("image.generate", {{"prompt": "cover", "size": "{BAD}"}})
            return scenes
     '''), "failed", 5, "CapabilityError", {"succeeded": 4, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def scene(name, detail):
                wide = await ctx.run("image.generate", {"prompt": name + " wide"})
                if detail == "fruit":
                    return [wide["prompt"]]
                close = await ctx.run("image.generate", {"prompt": name + " " + detail})
                return [wide["prompt"], close["prompt"]]

            scenes = await ctx.parallel([scene("harbour", "ropes"), scene("market", "fruit")])
            cover = await ctx.run("image.generate", {"prompt": "cover", "size": "512x512"})
            return scenes
     '''), "succeeded", 1, calls={"replayed": 3, "executed": 1}, orphans=1)))

_mine("system_field_respelled", "respell", (
    "The text call's system field (a free-text field) retyped with a doubled space and a "
    "trailing newline through its variable: the same request once normalized, so the "
    "committed text replays; only the fixed image is paid."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            system = "You write short, warm taglines."
            line = await ctx.run("text.generate", {{"prompt": "a tagline", "system": system}})
            art = await ctx.run("image.generate", {{"prompt": "key art", "size": "{BAD}"}})
            return line["text"]
     '''), "failed", 2, "CapabilityError", {"succeeded": 1, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            system = "You write short,  warm taglines.\\n"
            line = await ctx.run("text.generate", {"prompt": "a tagline", "system": system})
            art = await ctx.run("image.generate", {"prompt": "key art", "size": "512x512"})
            return [line["text"], art["size"]]
     '''), "succeeded", 1, calls={"replayed": 1, "executed": 1})))

_mine("twins_into_helper", "twins", (
    "The direct twins ({\"prompt\": p}, p rebound) moved into one helper gen(p) called "
    "twice, the payload expression kept: two frozen sites with one call expression meet "
    "two candidate chains with one call expression, so no match is unique; the gate "
    "stops (ambiguous) before any sandbox rather than guess which twin is which."),
    (Step(_s(f'''
        async def orchestrate(ctx, args):
            p = "north gate"
            north = await ctx.run("image.generate", {{"prompt": p}})
            p = "south gate"
            south = await ctx.run("image.generate", {{"prompt": p}})
            cover = await ctx.run("image.generate", {{"prompt": "map", "size": "{BAD}"}})
            return [north["prompt"], south["prompt"]]
     '''), "failed", 3, "CapabilityError", {"succeeded": 2, "failed": 1}),
     Step(_s('''
        async def orchestrate(ctx, args):
            async def gen(p):
                return await ctx.run("image.generate", {"prompt": p})

            north = await gen("north gate")
            south = await gen("south gate")
            cover = await ctx.run("image.generate", {"prompt": "map"})
            return [north["prompt"], south["prompt"], cover["prompt"]]
     '''), "stopped", 0, "GateRejected", {"executed": 0}, gate=("ambiguous", "ambiguous"))))

RETAKE_V1 = _s('''
    async def orchestrate(ctx, args):
        takes = []
        for i in range(3):
            takes.append(await ctx.run("image.generate", {"prompt": "a storm at sea"}))
        return len(takes)
''')
RETAKE_TAKES = _s('''
    async def orchestrate(ctx, args):
        takes = []
        for i in range(1):
            takes.append(await ctx.run("image.generate", {"prompt": "a storm at sea"}))
        for i in range(2):
            takes.append(await ctx.run("image.generate", {"prompt": "a storm at sea"},
                                       take=i + 2))
        return len(takes)
''')

_mine("constant_loop_takes_added_in_repair", "takes", (
    "v1's loop of one payload is denied at its second pass (a repeat in its own "
    "revision). The model first adds take=i + 1 to the committed call: that edits a "
    "committed call expression, refused at the gate (call_changed). It then keeps the "
    "committed call (one pass) and adds a loop of take=2 and take=3: take 1 replays; take "
    "2 is a further take of a payload an earlier revision paid, which no earlier "
    "revision asked for: refused (TakeNotApproved) until a person approves; approved, "
    "takes 2 and 3 are paid on purpose."),
    (Step(RETAKE_V1, "stopped", 1, "SemanticRepeatDenied", {"succeeded": 1, "denied": 1}),
     Step(RETAKE_V1.replace('"a storm at sea"})', '"a storm at sea"}, take=i + 1)'),
          "stopped", 0, "GateRejected", {"executed": 0}, gate=("call_changed",)),
     Step(RETAKE_TAKES, "stopped", 0, "TakeNotApproved",
          {"replayed": 1, "executed": 0, "denied": 1}),
     Step(RETAKE_TAKES, "succeeded", 2, calls={"replayed": 1, "executed": 2}, takes=2,
          approved_takes=("image.generate",))))

_mine("constant_loop_prompts_made_distinct", "loops", (
    "The other answer to a denied constant loop: make each pass's prompt distinct. "
    "Written as {\"prompt\": prompt} with prompt = f'a storm at sea, take {i}', it edits "
    "the committed call expression: the gate refuses it (call_changed), nothing runs. "
    "v3 keeps the committed call for pass 0 (moved into an if block: it relocates and "
    "replays) and sends the new passes through a new call: two are paid."),
    (Step(RETAKE_V1, "stopped", 1, "SemanticRepeatDenied", {"succeeded": 1, "denied": 1}),
     Step(RETAKE_V1.replace('{"prompt": "a storm at sea"}', '{"prompt": prompt}').replace(
         "        takes.append", '        prompt = f"a storm at sea, take {i}"\n'
                                '        takes.append'),
          "stopped", 0, "GateRejected", {"executed": 0}, gate=("call_changed",)),
     Step(_s('''
        async def orchestrate(ctx, args):
            takes = []
            for i in range(3):
                if i == 0:
                    takes.append(await ctx.run("image.generate", {"prompt": "a storm at sea"}))
                else:
                    takes.append(await ctx.run("image.generate",
                                               {"prompt": f"a storm at sea, take {i}"}))
            return len(takes)
     '''), "succeeded", 2, calls={"replayed": 1, "executed": 2}, relocations=1)))

_mine("fallback_fixed_in_try_body", "fallback", (
    "Instead of promoting the committed fallback, the model fixes the try body's size to "
    "the fallback's (through a new variable): the try body now asks, at a new call "
    "expression, for exactly the request the fallback paid. A semantic repeat of a paid "
    "side-effecting payload: denied before dispatch, never bought twice (the committed "
    "fallback is the call to keep)."),
    (Step(FALLBACK_V1, "failed", 4, "CapabilityError", {"succeeded": 2, "failed": 2}),
     Step(_s('''
        async def orchestrate(ctx, args):
            hero = await ctx.run("image.generate", {"prompt": "hero"})
            size = "512x512"
            try:
                poster = await ctx.run("image.generate", {"prompt": "poster", "size": size})
            except CapabilityError:
                poster = await ctx.run("image.generate", {"prompt": "poster", "size": "512x512"})
            banner = await ctx.run("image.generate", {"prompt": "banner", "size": "512x512"})
            return [hero["size"], poster["size"], banner["size"]]
     '''), "stopped", 0, "SemanticRepeatDenied", {"replayed": 1, "executed": 0,
                                                  "denied": 1})))

DOOR_FANOUT = _s('''
    async def orchestrate(ctx, args):
        async def gen(prompt):
            return await ctx.run("image.generate", {"prompt": prompt})

        doors = await ctx.parallel([gen(p) for p in ["red", "blue", "grey", "teal"][:N]])
        TAIL
''')

_mine("fanout_shrunk_then_restored", "reintroduce", (
    "v2 cuts a fanout from four doors to two (two orphans, warned) and adds a cover; v3 "
    "restores all four: the two orphaned branches are reached again at their committed "
    "paths and replay from v1's record; nothing is paid twice."),
    (Step(DOOR_FANOUT.replace("N", "4").replace(
        "TAIL", 'raise RuntimeError("the cover is missing")'), "failed", 4, "RuntimeError",
          {"succeeded": 4}),
     Step(DOOR_FANOUT.replace("N", "2").replace(
         "TAIL", 'cover = await ctx.run("image.generate", {"prompt": "cover"})\n'
                 '    return len(doors)'), "succeeded", 1,
          calls={"replayed": 2, "executed": 1}, orphans=2),
     Step(DOOR_FANOUT.replace("N", "4").replace(
         "TAIL", 'cover = await ctx.run("image.generate", {"prompt": "cover"})\n'
                 '    return len(doors)'), "succeeded", 0,
          calls={"replayed": 5, "executed": 0}, orphans=0)))
