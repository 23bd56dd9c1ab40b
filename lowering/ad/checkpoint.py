"""Checkpointed loops: the reverse sweep of `checkpoint(f, slots=c)` (part of the autodiff pass).

Expects: a reverse sweep (lowering/ad/sweep.py) whose `slots` is c (an even
count, at least 2): the gradient of a checkpointed function and of the
functions it calls (lowering/ad/reverse.py calls these for its loops).
Guarantees: every loop there keeps at most c snapshots of its carried
values in its forward sweep, and the gradient is the one the taped loop
gives (the same ops, in the same order, recomputed).

The schedule (periodic thinning, online: no trip count needed):
- Forward: the loop keeps its carried values at every s-th iteration
  (s = 1 at first) as rows of a snapshot tape of c rows. When the c rows
  are full, every other one is dropped (`dg.getitem` with step 2, then
  `dg.concat`) and s doubles. So the snapshots are always iterations 0, s,
  2s, ..., and between c/2 and c of them are kept. A `while` loop runs in
  chunks of s iterations (an scf.while over scf.for chunks), a snapshot
  taken as each chunk starts: no trip count, and one run.
- Reverse, segment by segment from the last: the segment's snapshot is
  run forward again over its (now known) length L <= s, keeping c
  snapshots the same way (stride s2 <= 2L/c); then each piece of s2
  iterations, from the last, is run forward once more with every
  iteration taped (into one tape made for the longest piece, reused by
  every piece), and reversed as an unchecked loop is.
- Cost: each iteration's body runs three more times forward than without
  checkpointing (two replays, and the recomputation every reverse step
  makes), against a tape of n rows: 2c snapshots and at most 4n/c^2 rows.
All of it is dg ops (`tape_alloc`, `tape_push`, `tape_read`, `getitem`,
`concat`, `scf.if`, `scf.for`, index arithmetic), so `.ir("grad")` shows
it and both modes run it.
"""
from __future__ import annotations

from dg.core.writer import Value

from ..irmodel import Op
from .module import copy_block
from .sweep import Sweep, arith, by_slot, compare, countdown, index, read_tape, tape_value, trip_count

CHUNKED_BODY = "dg.loop_body"  # marks the scf.if that runs a chunked loop's body (for saved_residuals' counts)


# ------------------------------------------------------------ the snapshot tape
def new_snapshots(sw: Sweep, w, values: list) -> list:
    cap = index(w, sw.slots)
    return [w.dg_op("tape_alloc", [tape_value(w, v), cap]) for v in values]


def snapshot(sw: Sweep, w, snaps: list, m: Value, s: Value, k: Value, values: list) -> tuple:
    """At iteration k: keep `values` as snapshot m when k is a multiple of the stride s, after
    dropping every other snapshot and doubling s when all slots are full. -> (snaps, m, s)."""
    if not snaps:
        return snaps, m, s
    zero, one = index(w, 0), index(w, 1)
    types = [t.type for t in snaps] + ["index", "index"]
    store = compare(w, "eq", arith(w, "remsi", k, s), zero)

    def keep(w2):
        full = compare(w2, "eq", m, index(w2, sw.slots))

        def thin(w3):
            halves = [w3.dg_op("getitem", [t], {"spec": ("s:::2",)}) for t in snaps]
            kept = [w3.dg_op("concat", [h, h], {"axis": 0}) for h in halves]
            w3.op("scf.yield", kept + [index(w3, sw.slots // 2), arith(w3, "addi", s, s)], [])

        r = w2.op("scf.if", [full], types, regions=[thin, lambda w3: w3.op("scf.yield", snaps + [m, s], [])])
        pushed = [w2.dg_op("tape_push", [t, r[-2], tape_value(w2, v)]) for t, v in zip(r[:-2], values)]
        w2.op("scf.yield", pushed + [arith(w2, "addi", r[-2], one), r[-1]], [])

    r = w.op("scf.if", [store], types, regions=[keep, lambda w2: w2.op("scf.yield", snaps + [m, s], [])])
    return r[:-2], r[-2], r[-1]


# ------------------------------------------------------------ forward sweeps
def forward_for(sw: Sweep, op: Op, env: dict, w) -> dict:
    lb, ub, st = (env[o] for o in op.operands[:3])
    inits = [env[o] for o in op.operands[3:]]
    zero, one = index(w, 0), index(w, 1)
    n = trip_count(w, lb, ub, st)
    skip = sw.mod.untaped(op)
    taped = [i for i in range(len(inits)) if i not in skip]
    snaps = new_snapshots(sw, w, [inits[i] for i in taped])
    body = op.regions[0]

    def write(w2):
        iv = w2.value("index", "iv")
        carried = [w2.value(a.type, "a") for a in body.args[1:]]
        tin = [w2.value(t.type, "snap") for t in snaps]
        m, s = w2.value("index", "m"), w2.value("index", "s")
        w2.block_header([iv] + carried + tin + [m, s])
        env[body.args[0]] = iv
        env.update(zip(body.args[1:], carried))
        k = arith(w2, "divsi", arith(w2, "subi", iv, lb), st)
        tout, m2, s2 = snapshot(sw, w2, tin, m, s, k, [carried[i] for i in taped])
        copy_block(body, env, w2, True)
        t = body.ops[-1]
        w2.loc = t.loc
        w2.op("scf.yield", [env[o] for o in t.operands] + list(tout) + [m2, s2], [])

    w.loc = op.loc
    res = w.op("scf.for", [lb, ub, st] + inits + snaps + [zero, one],
               [r.type for r in op.results] + [t.type for t in snaps] + ["index", "index"], regions=[write])
    nres = len(op.results)
    env.update(zip(op.results, res[:nres]))
    return {"snaps": by_slot(skip, nres, res[nres:-2]), "m": res[-2], "s": res[-1], "n": n}


def chunkable(op: Op) -> bool:
    """Whether a `while` loop's condition hands on its carried values' types unchanged (dg's
    loops do), so that it can run in chunks carrying them."""
    before = op.regions[0]
    return [a.type for a in before.args] == [o.type for o in before.ops[-1].operands[1:]]


def forward_while(sw: Sweep, op: Op, env: dict, w) -> dict:
    """A `while` loop of a checkpointed forward sweep, run once: as an scf.while over chunks,
    each an scf.for of s iterations (the stride) that stops doing anything once the condition
    fails. A snapshot is taken as each chunk starts (iteration k, a multiple of s), so the
    snapshots travel through the scf.while, which copies what it carries on each of its
    iterations, only once per chunk: c + (c/2) log2(n/c) times in all, not n times. The last
    chunk may start just as the loop ends; its snapshot starts an empty segment."""
    before, after = op.regions
    cond_t = before.ops[-1]
    inits = [env[o] for o in op.operands]
    skip = sw.mod.untaped(op)
    taped = [i for i in range(len(inits)) if i not in skip]
    snaps = new_snapshots(sw, w, [inits[i] for i in taped])
    zero, one = index(w, 0), index(w, 1)
    live, stopped = (w.op("arith.constant", [], ["i1"], {"value": f"{b} : i1"})[0] for b in (1, 0))
    types = [v.type for v in inits]
    outer_t = types + [t.type for t in snaps] + ["index", "index", "index", "i1"]

    def pass_on(w2):
        args = [w2.value(t, "a") for t in outer_t]
        w2.block_header(args)
        w2.op("scf.condition", [args[-1]] + args, [])

    def step(w3, carried, k):
        """One iteration, when the loop is still running: the condition, then the body if it holds."""
        e = env
        e.update(zip(before.args, carried))
        copy_block(before, e, w3, True)
        w3.loc = cond_t.loc

        def run_body(w4):
            e.update(zip(after.args, [e[o] for o in cond_t.operands[1:]]))
            copy_block(after, e, w4, True)
            t = after.ops[-1]
            w4.loc = t.loc
            w4.op("scf.yield", [e[o] for o in t.operands] + [arith(w4, "addi", k, one), live], [])

        def stop(w4):
            w4.op("scf.yield", carried + [k, stopped], [])

        r = w3.op("scf.if", [e[cond_t.operands[0]]], types + ["index", "i1"], {CHUNKED_BODY: "unit"},
                  regions=[run_body, stop])
        w3.op("scf.yield", list(r), [])

    def chunk(w2):
        args = [w2.value(t, "a") for t in outer_t]
        w2.block_header(args)
        n_c = len(types)
        carried, tin = args[:n_c], args[n_c:-4]
        m, s, k = args[-4:-1]
        tout, m2, s2 = snapshot(sw, w2, tin, m, s, k, [carried[i] for i in taped])

        def iteration(w3):
            g = w3.value("index", "g")
            xs = [w3.value(t, "a") for t in types]
            k3, running = w3.value("index", "k"), w3.value("i1", "live")
            w3.block_header([g] + xs + [k3, running])
            r = w3.op("scf.if", [running], types + ["index", "i1"],
                      regions=[lambda w4: step(w4, xs, k3), lambda w4: w4.op("scf.yield", xs + [k3, running], [])])
            w3.op("scf.yield", list(r), [])

        w2.loc = op.loc
        r = w2.op("scf.for", [zero, s2, one] + carried + [k, live], types + ["index", "i1"], regions=[iteration])
        w2.op("scf.yield", list(r[:-2]) + list(tout) + [m2, s2, r[-2], r[-1]], [])

    w.loc = op.loc
    res = w.op("scf.while", inits + snaps + [zero, one, zero, live], outer_t, regions=[pass_on, chunk])
    final = list(res[:len(types)])
    env.update(zip(before.args, final))  # the condition once more, for the loop's results
    copy_block(before, env, w, False)
    env.update(zip(op.results, [env[o] for o in cond_t.operands[1:]]))
    n = res[-2]
    return {"snaps": by_slot(skip, len(types), res[len(types):-4]), "m": res[-4], "s": res[-3],
            "total": arith(w, "addi", n, one), "last": final}


# ------------------------------------------------------------ the reverse
def replay(op: Op, env: dict):
    """`run(w, xs, g) -> next xs`: one iteration of the loop `op` (its g-th), from its carried
    values xs (the untaped slots' stand-ins put in), with no effects and nothing taped."""
    if op.name == "scf.for":
        body = op.regions[0]
        lb, st = env[op.operands[0]], env[op.operands[2]]

        def run(w, xs, g):
            e = dict(env)
            e[body.args[0]] = arith(w, "addi", lb, arith(w, "muli", g, st))
            e.update(zip(body.args[1:], xs))
            copy_block(body, e, w, False)
            return [e[o] for o in body.ops[-1].operands]
        return run
    before, after = op.regions
    cond = before.ops[-1].operands[1:]

    def run(w, xs, g):
        e = dict(env)
        e.update(zip(before.args, xs))
        copy_block(before, e, w, False)
        e.update((a, e[c]) for a, c in zip(after.args, cond))
        copy_block(after, e, w, False)
        return [e[o] for o in after.ops[-1].operands]
    return run


def replay_loop(sw: Sweep, w, op: Op, env: dict, xs: list, start: Value, length: Value, taped_in_full: bool,
                into: list | None = None):
    """The loop run again from the carried values xs (one per slot, None at the untaped ones)
    at iteration `start`, for `length` iterations: keeping snapshots (-> (snaps, m, s)) or
    every iteration's carried values and the last ones (-> tapes of length + 1 rows, written
    over the tapes `into` when given, one per taped slot); and the carried values it ends with
    (None at the untaped slots)."""
    run = replay(op, env)
    slots = list(range(len(xs)))
    taped = [i for i in slots if xs[i] is not None]
    zero, one = index(w, 0), index(w, 1)
    if taped_in_full:
        rows = arith(w, "addi", length, one)
        tapes = into if into is not None else [w.dg_op("tape_alloc", [tape_value(w, xs[i]), rows])
                                                for i in taped]
        extra, extra_init = [t.type for t in tapes], tapes
    else:
        tapes = new_snapshots(sw, w, [xs[i] for i in taped])
        extra, extra_init = [t.type for t in tapes] + ["index", "index"], tapes + [zero, one]

    def write(w2):
        g = w2.value("index", "g")
        carried = [w2.value(xs[i].type, "a") for i in taped]
        tin = [w2.value(t, "tape") for t in extra]
        w2.block_header([g] + carried + tin)
        if taped_in_full:
            tout = [w2.dg_op("tape_push", [t, g, tape_value(w2, v)]) for t, v in zip(tin, carried)]
        else:
            snaps, m2, s2 = snapshot(sw, w2, tin[:-2], tin[-2], tin[-1], g, carried)
            tout = list(snaps) + [m2, s2]
        full = dict(zip(taped, carried))
        ys = run(w2, [full[i] if i in full else sw.mod.untaped_value(op, i, env) for i in slots],
                 arith(w2, "addi", start, g))
        w2.op("scf.yield", [ys[i] for i in taped] + tout, [])

    res = w.op("scf.for", [zero, length, one] + [xs[i] for i in taped] + extra_init,
               [xs[i].type for i in taped] + extra, regions=[write])
    out, tapes_out = res[:len(taped)], res[len(taped):]
    untaped = set(slots) - set(taped)
    last = by_slot(untaped, len(xs), out)
    if taped_in_full:
        pushed = [w.dg_op("tape_push", [t, length, tape_value(w, v)]) for t, v in zip(tapes_out, out)]
        return by_slot(untaped, len(xs), pushed), last
    return (by_slot(untaped, len(xs), tapes_out[:-2]), tapes_out[-2], tapes_out[-1]), last


def reverse_segments(sw: Sweep, w, op: Op, env: dict, info: dict, d_init: list, free: list, f_init: list, loc: str,
                     step_at) -> tuple:
    """The reverse of a checkpointed loop of info["n"] iterations: segments from the last, each
    replayed with snapshots, each piece of it replayed taped and reversed by the steps
    `step_at(tapes, base)` makes. -> (carried adjoints, free adjoints), as `countdown`.

    The pieces are taped into one tape per carried value, made once here with room for the
    longest piece (a segment's stride s2 < 2s/c) and carried through both reverse loops: a
    tape made for each piece would be fresh memory each time (a piece of a long loop over a
    large state is hundreds of megabytes, which malloc maps and unmaps), and the page faults
    of touching it cost more than a forward run of the piece."""
    one = index(w, 1)
    n, s = info["n"], info["s"]
    carried_vals = (op.regions[0].args[1:] if op.name == "scf.for" else op.regions[0].args)
    inits = op.operands[3:] if op.name == "scf.for" else op.operands
    longest = arith(w, "maxsi", arith(w, "ceildivsi", arith(w, "addi", s, s),
                                                index(w, sw.slots)), one)
    cap = arith(w, "addi", longest, one)
    held = [w.dg_op("tape_alloc", [tape_value(w, env[v]), cap])
            for v, t in zip(inits, info["snaps"]) if t is not None]
    nd = len(d_init)

    def rows(w2, tapes, k):
        return [read_tape(w2, t, k, a) if t is not None else None for t, a in zip(tapes, carried_vals)]

    def segment(w2, j, d_in, inner):
        a = arith(w2, "muli", j, s)
        length = arith(w2, "minsi", s, arith(w2, "subi", n, a))
        (snaps2, m2, s2), _ = replay_loop(sw, w2, op, env, rows(w2, info["snaps"], j), a, length, False)

        def piece(w3, i, d_in2, inner2):
            a2 = arith(w3, "muli", i, s2)
            length2 = arith(w3, "minsi", s2, arith(w3, "subi", length, a2))
            base = arith(w3, "addi", a, a2)
            tapes, _ = replay_loop(sw, w3, op, env, rows(w3, snaps2, i), base, length2, True, into=d_in2[nd:])
            d_res, f_res = countdown(w3, loc, length2, index(w3, 1), d_in2[:nd], free,
                                          [inner2[v] for v in free], step_at(tapes, base))
            inner2.update(zip(free, f_res))
            return d_res + [t for t in tapes if t is not None]

        d_res, f_res = countdown(w2, loc, m2, index(w2, 1), d_in, free, [inner[v] for v in free], piece)
        inner.update(zip(free, f_res))
        return d_res

    d_res, f_res = countdown(w, loc, info["m"], one, d_init + held, free, f_init, segment)
    return d_res[:nd], f_res
