"""Reverse mode: the VJP function of a dg function, as dg IR.

Expects: a `Derivatives` module (lowering/ad/module.py) holding the function.
Guarantees: `vjp_function(mod, f, mask)` writes `f__vjp_<mask>(args,
cotangents) -> (results, gradients)` (with `_ck<c>` when its loops keep c
snapshots) and the VJP functions of what it calls, and returns its name.
Those of the recursive functions it calls take shadows too:
`g__vjp_<mask>_sh(args, cotangents, shadows) -> shadows`. A shadow is the gradient of an argument in
the mask accumulated so far (as Enzyme's duplicated arguments): the function
adds its share into it and gives it back, so that a gradient passed down
through calls and recursion is made once, by the outermost gradient, and a
row that a callee reads adds its row, not a fresh full-size gradient per
call added up the recursion. (The outermost function has none: its
gradients start from its own contributions, not from zeros added to; nor
do functions that cannot call themselves, whose calls the inliner takes
apart.) A function with shadows gives back no results: its caller has them
from its own forward sweep. So its forward sweep's copies that only made
them are dead, and `prune` removes them (each branch's reverse recomputes
what it needs), which keeps a recursion's gradient from running every
subtree's forward twice at each level. The callers hand their shadows over
(`dg.donated`): nothing reads a shadow once it is passed, so the callee may
add into it in place.

How (a forward sweep, then a reverse sweep, over one `Sweep`):
- The forward sweep copies f's body. Each `scf.for` at the level being swept
  also pushes its loop-carried values to tapes (`dg.tape_alloc`/`dg.tape_push`,
  one row per iteration). A `scf.while` runs as it is, counting its
  iterations, then again as an `scf.for` that tapes them (MLIR copies what a
  while loop carries on every iteration: a tape carried so would cost time
  and memory quadratic in the trip count). With snapshot slots, loops keep
  snapshots instead (lowering/ad/checkpoint.py).
- The reverse sweep walks the ops backwards and calls each op's `vjp` facet
  (dialects/rules.py's builder); `accumulate` sums broadcast axes away
  ("unbroadcasting") and adds up fan-out, once for all ops.
- `scf.if`: the reverse is an `scf.if` on the same condition (the branch
  taken); each branch recomputes its forward, then runs its reverse.
- Loops: the reverse is an `scf.for` counting down the iterations; each
  iteration reads its carried values back (`dg.tape_read`), recomputes the
  body forward (taping the loops nested in it), and runs the body's reverse.
  What the body yields is the next row of the tape (a `for` tapes its final
  values too), so the reverse reads it there and the ops that made it are
  not recomputed (canonicalize removes them once unused).
  Adjoints of values from outside the loop are carried through it.
  `break`/`continue`/early `return` are flags in the carried values, so
  they need nothing of their own.
- `func.call g`: the reverse calls `g__vjp_<mask>`, which recomputes g's
  forward; recursion works because the callee's gradient function is named
  before it is made.
- Only active values get adjoints: floats that depend on a differentiated
  argument. Integers, bools and `stop_gradient` results are inactive.
- Higher orders: a gradient function is dg IR like any other and is
  differentiated in turn. Its tapes are appended to, a row per iteration, so
  its loops need no tape of their own for them: the reverse sweep takes the
  tape's final value, which holds every row (`activity.slot_appends`).
Every backward op carries the location of the forward op it differentiates,
marked as a gradient's (`core.locations.backward_loc`).
"""
from __future__ import annotations

from dg.core.errors import DgError
from dg.core.locations import backward_loc, loc_of
from dg.core.writer import Value
from dg.dialects.batch_rules import elementwise
from dg.dialects.registry import OPS
from dg.dialects.rules import RuleBuilder

from ..irmodel import Block, Op
from . import checkpoint
from .activity import ALWAYS_ACTIVE, TERMINATORS, activity, callee, free_values, is_float
from .module import Derivatives, copy_block, copy_op
from .sweep import Sweep, accumulate, arith, by_slot, countdown, index, op_view, read_tape, tape_value, trip_count


def vjp_function(mod: Derivatives, sym: str, mask: tuple, slots: int = 0, shadowed: bool = False) -> str:
    """The name of `sym`'s VJP function with respect to the arguments in `mask`, its loops
    keeping `slots` snapshots (0: taped in full), taking shadows if `shadowed`; written first if
    it is not yet."""
    ck = mod.checkpointed(sym)
    if ck is not None:  # the function's gradient, its loops checkpointed
        return vjp_function(mod, ck[0], mask, ck[1] or slots, shadowed)
    key = (sym, mask, slots, shadowed)
    if key in mod.names:
        return mod.names[key]
    suffix = (f"_ck{slots}" if slots else "") + ("_sh" if shadowed else "")
    name, f = mod.derive(key, sym, "vjp", mask, "differentiate with respect to", suffix)
    w, env, args = mod.start(f)
    ret = f.body.ops[-1]
    float_results = [i for i, o in enumerate(ret.operands) if is_float(o)]
    cts = [w.value(ret.operands[i].type, "ct") for i in float_results]
    shadows = [w.value(f.args[i].type, "shadow") for i in mask] if shadowed else []
    s = Sweep(mod, activity(f.body, {f.args[i] for i in mask}, mod.messages), slots)
    info = forward_sweep(s, f.body, env, w, effects=True)
    results = [env[o] for o in ret.operands]
    adj: dict = {f.args[i]: sh for i, sh in zip(mask, shadows)}
    for i, ct in zip(float_results, cts):
        if ret.operands[i] in s.active:
            accumulate(w, adj, ret.operands[i], ct, env[ret.operands[i]])
    reverse_sweep(s, f.body, env, adj, w, info)
    w.loc = f.loc
    grads = [adj[f.args[i]] if f.args[i] in adj else w.zeros_like(env[f.args[i]]) for i in mask]
    given = [] if shadowed else results
    w.op("func.return", given + grads, [])
    donated = list(range(len(args) + len(cts), len(args) + len(cts) + len(shadows)))
    mod.write(name, args + cts + shadows, ([] if shadowed else f.result_types) + [f.args[i].type for i in mask], f.loc,
              w, donated=donated)
    if shadowed:
        mod.pruned.add(name)
    return name


# ---------------------------------------------------------------- forward sweep
def forward_sweep(s: Sweep, block: Block, env: dict, w: RuleBuilder, effects: bool) -> dict:
    """Copy the ops of `block` (its terminator excepted), its loops taped (or keeping snapshots);
    -> what each loop's reverse needs, by loop."""
    info = {}
    for op in block.ops:
        if op.name in TERMINATORS:
            continue
        w.loc = op.loc
        if op.name == "scf.for":
            info[op] = (checkpoint.forward_for if s.slots else tape_for)(s, op, env, w)
        elif op.name == "scf.while":
            info[op] = tape_while(s, op, env, w)
        else:
            copy_op(op, env, w, effects)
    return info


def undo_writes(op: Op, skip: set) -> dict:
    """The slots of a `for` loop whose body changes the carried value only by writing rows of it
    (`put_rows` of the block argument, at the body's top level, at rows shaped as a value from
    outside the loop): slot -> (that op, that value). Such a slot is taped as an undo log (the rows
    it overwrites, and where), not whole each iteration."""
    body = op.regions[0]
    made = {r: o for o in body.ops for r in o.results}
    inside = set(body.args) | set(made)

    def outside_like(v, depth=0):
        """A value from outside the loop of v's type, that v is made from element by element."""
        if v not in inside:
            return v
        o = made.get(v)
        if o is None or o.dg is None or OPS[o.dg].batch is not elementwise or depth > 8:
            return None
        for x in o.operands:
            if x.type == v.type:
                found = outside_like(x, depth + 1)
                if found is not None:
                    return found
        return None

    out = {}
    for i, y in enumerate(body.ops[-1].operands):
        w = made.get(y)
        if i not in skip and w is not None and w.dg == "put_rows" and w.operands[0] is body.args[1 + i]:
            like = outside_like(w.operands[2])
            if like is not None:
                out[i] = (w, like)
    return out


def tape_for(s: Sweep, op: Op, env: dict, w: RuleBuilder) -> dict:
    lb, ub, st = (env[o] for o in op.operands[:3])
    inits = [env[o] for o in op.operands[3:]]
    n = trip_count(w, lb, ub, st)
    rows = arith(w, "addi", n, index(w, 1))  # one row per iteration, then the final values
    skip = s.mod.untaped(op)
    undo = undo_writes(op, skip)
    taped = [i for i in range(len(inits)) if i not in skip and i not in undo]
    tapes = [w.dg_op("tape_alloc", [tape_value(w, inits[i]), rows]) for i in taped]
    body = op.regions[0]
    # An undo log per written slot: the rows each iteration overwrites, and their indices.
    logs = []
    for i, (_, like) in undo.items():
        at = w.dg_op("zeros_like", [env[like]])
        logs += [w.dg_op("tape_alloc", [w.dg_op("take", [inits[i], at], {"axis": 0}), rows]),
                 w.dg_op("tape_alloc", [at, rows])]

    def write(w2):
        iv = w2.value("index", "iv")
        carried = [w2.value(a.type, "a") for a in body.args[1:]]
        tin = [w2.value(t.type, "tape") for t in tapes]
        lin = [w2.value(t.type, "log") for t in logs]
        w2.block_header([iv] + carried + tin + lin)
        env[body.args[0]] = iv
        env.update(zip(body.args[1:], carried))
        k = arith(w2, "divsi", arith(w2, "subi", iv, lb), st)
        tout = [w2.dg_op("tape_push", [t, k, tape_value(w2, carried[i])]) for t, i in zip(tin, taped)]
        copy_block(body, env, w2, effects=True)
        lout = []
        for (i, (wr, _)), old_t, at_t in zip(undo.items(), lin[0::2], lin[1::2]):
            where = env[wr.operands[2]]
            lout += [w2.dg_op("tape_push", [old_t, k, w2.dg_op("take", [carried[i], where], {"axis": 0})]),
                     w2.dg_op("tape_push", [at_t, k, where])]
        t = body.ops[-1]
        w2.loc = t.loc
        w2.op("scf.yield", [env[o] for o in t.operands] + tout + lout, [])

    w.loc = op.loc
    res = w.op("scf.for", [lb, ub, st] + inits + tapes + logs,
               [r.type for r in op.results] + [t.type for t in tapes + logs], regions=[write])
    m = len(op.results)
    env.update(zip(op.results, res[:m]))
    pushed = [w.dg_op("tape_push", [t, n, tape_value(w, res[i])]) for t, i in zip(res[m:m + len(tapes)], taped)]
    log = res[m + len(tapes):]
    return {"tapes": by_slot(skip | set(undo), m, pushed), "n": n, "lb": lb, "st": st,
            "undo": {i: (log[2 * j], log[2 * j + 1]) for j, i in enumerate(undo)}}


def count_while(op: Op, env: dict, w: RuleBuilder) -> Value:
    """The loop copied, counting how many times its condition is evaluated (the result)."""
    before, after = op.regions
    cond_t = before.ops[-1]

    def write_before(w2):
        carried = [w2.value(a.type, "a") for a in before.args]
        k = w2.value("index", "k")
        w2.block_header(carried + [k])
        env.update(zip(before.args, carried))
        k1 = arith(w2, "addi", k, index(w2, 1))
        copy_block(before, env, w2, effects=True)
        w2.loc = cond_t.loc
        w2.op("scf.condition", [env[o] for o in cond_t.operands] + [k1], [])

    def write_after(w2):
        carried = [w2.value(a.type, "a") for a in after.args]
        k = w2.value("index", "k")
        w2.block_header(carried + [k])
        env.update(zip(after.args, carried))
        copy_block(after, env, w2, effects=True)
        t = after.ops[-1]
        w2.loc = t.loc
        w2.op("scf.yield", [env[o] for o in t.operands] + [k], [])

    w.loc = op.loc
    res = w.op("scf.while", [env[o] for o in op.operands] + [index(w, 0)],
               [r.type for r in op.results] + ["index"], regions=[write_before, write_after])
    env.update(zip(op.results, res[:-1]))
    return res[-1]


def tape_while(s: Sweep, op: Op, env: dict, w: RuleBuilder) -> dict:
    """A `while` loop of the forward sweep: run once as it is, counting its iterations n, then
    again as an scf.for of n iterations that tapes its carried values (n + 1 rows) or, in a
    checkpointed gradient, keeps their snapshots. An scf.while copies every tensor it carries
    on each iteration (MLIR's bufferization), so a tape carried by it would cost time and
    memory quadratic in n (snapshots, c states per iteration); the second run costs one
    forward."""
    if s.slots and checkpoint.chunkable(op):
        return checkpoint.forward_while(s, op, env, w)
    total = count_while(op, env, w)
    skip = s.mod.untaped(op)
    xs = [None if i in skip else env[o] for i, o in enumerate(op.operands)]
    n = arith(w, "subi", total, index(w, 1))
    kept, last = checkpoint.replay_loop(s, w, op, env, xs, index(w, 0), n, not s.slots)
    if not s.slots:
        return {"tapes": kept, "total": total}
    snaps, m, st = kept
    return {"snaps": snaps, "m": m, "s": st, "total": total, "last": last}


# ---------------------------------------------------------------- reverse sweep
def reverse_sweep(s: Sweep, block: Block, env: dict, adj: dict, w: RuleBuilder, info: dict) -> None:
    for op in reversed(block.ops):
        if op.name in TERMINATORS:
            continue
        w.loc = backward_loc(op.loc)
        if op.name == "scf.if":
            reverse_if(s, op, env, adj, w)
        elif op.name in ("scf.for", "scf.while"):
            # (else nothing flows back through the loop, and it sends no message whose adjoint must go)
            if any(r in adj for r in op.results) or messaging(s, op.regions):
                (reverse_for if op.name == "scf.for" else reverse_while)(s, op, env, adj, w, info[op])
        elif op.name == "func.call":
            reverse_call(s, op, env, adj, w)
        elif op.dg is not None:
            reverse_dg(s, op, env, adj, w)


def messaging(s: Sweep, blocks: list) -> bool:
    """Whether `blocks` send or receive messages: their reverse then runs whether or not
    adjoints reach it."""
    return s.mod.messages_in(blocks)


def free_active(s: Sweep, blocks: list) -> list:
    return [v for v in free_values(blocks) if v in s.active]


def reverse_dg(s: Sweep, op: Op, env: dict, adj: dict, w: RuleBuilder) -> None:
    douts = [adj.get(r) for r in op.results]
    if op.dg in ALWAYS_ACTIVE:  # (a message: its adjoint's message goes whatever reached it)
        douts = [d if d is not None else w.zeros_like(env[r]) for d, r in zip(douts, op.results)]
    elif all(d is None for d in douts) or not any(o in s.active for o in op.operands) \
            or not any(r in s.active for r in op.results):
        return
    opdef = OPS[op.dg]
    if opdef.vjp is None:
        raise DgError(f"dg.{op.dg} has no gradient rule", loc_of(op.location))
    if len(douts) > 1:
        douts = [d if d is not None else w.zeros_like(env[r]) for d, r in zip(douts, op.results)]
    dins = opdef.vjp(w, op_view(op, env), douts if len(douts) > 1 else douts[0])
    for o, d in zip(op.operands, dins):
        if d is not None and o in s.active:
            accumulate(w, adj, o, d, env[o])


def reverse_call(s: Sweep, op: Op, env: dict, adj: dict, w: RuleBuilder) -> None:
    mask = tuple(i for i, o in enumerate(op.operands) if o in s.active)
    douts = [adj.get(r) for r in op.results if is_float(r)]
    name = callee(op)
    if (not mask or all(d is None for d in douts)) and not s.mod.messages(name):
        return
    core = vjp_function(s.mod, name, mask, s.slots, shadowed=s.mod.recursive(name))
    shadowed = core.endswith("_sh")
    fl = [r for r in op.results if is_float(r)]
    cts = [d if d is not None else w.zeros_like(env[r]) for d, r in zip(douts, fl)]
    w.loc = backward_loc(op.loc)
    handed = []  # the operands whose adjoint goes in as a shadow (an operand passed twice: once)
    shadows = []
    for i in mask if shadowed else ():
        o = op.operands[i]
        shadows.append(adj[o] if o in adj and o not in handed else w.zeros_like(env[o]))
        handed.append(o)
    given = [] if shadowed else [r.type for r in op.results]  # (one with shadows gives back only them)
    outs = w.op("func.call", [env[o] for o in op.operands] + cts + shadows,
                given + [op.operands[i].type for i in mask], {"callee": f"@{core}"})
    taken = set()
    for i, g in zip(mask, outs[len(given):]):
        o = op.operands[i]
        if o in taken or not shadowed:
            accumulate(w, adj, o, g, env[o])
        else:  # the shadow given back holds what adj[o] held
            adj[o] = g
            taken.add(o)


def reverse_if(s: Sweep, op: Op, env: dict, adj: dict, w: RuleBuilder) -> None:
    seeds = [(r, adj[r]) for r in op.results if r in adj]
    free = free_active(s, op.regions)
    if (not seeds or not free) and not messaging(s, op.regions):
        return
    outs_t = [v.type for v in free]

    def branch(b: Block):
        def write(w2):
            inner = dict(adj)
            info = forward_sweep(s, b, env, w2, effects=False)
            t = b.ops[-1]
            for r, d in seeds:
                y = t.operands[op.results.index(r)]
                accumulate(w2, inner, y, d, env[y])
            reverse_sweep(s, b, env, inner, w2, info)
            w2.loc = backward_loc(op.loc)
            w2.op("scf.yield", [inner[v] if v in inner else w2.zeros_like(env[v]) for v in free], [])
        return write

    w.loc = backward_loc(op.loc)
    res = w.op("scf.if", [env[op.operands[0]]], outs_t, regions=[branch(b) for b in op.regions])
    for v, r in zip(free, res):
        adj[v] = r


def settle(w: RuleBuilder, adj: dict, free: list, f_res: list, inits: list, d_res: list, env: dict) -> None:
    """After a reverse loop: the free values' adjoints (which started from adj) replace adj's; then the
    initial values get their share (an initial value may also be free in the body)."""
    for v, d in zip(free, f_res):
        adj[v] = d
    for v, d in zip(inits, d_res):
        accumulate(w, adj, v, d, env[v])


def reuse_taped(s: Sweep, w: RuleBuilder, op: Op, body: Block, y: list, tapes: list, nxt: Value, env: dict,
                outer: dict) -> None:
    """Inside a reverse loop step: the values the body yields are the next iteration's carried
    values, which the tape holds (row `nxt`). The reverse reads them from there, so that the
    recomputed ops that made them (a step's matmuls, say) are left unused and are removed.
    A tape the loop appends to is its final value (`outer` maps the loop's results)."""
    made = {r for o in body.ops for r in o.results}
    for i, (v, t) in enumerate(zip(y, tapes)):
        if v in made and t is not None:
            env[v] = read_tape(w, t, nxt, v)
        elif v in made and i in s.mod.appended_slots[op]:
            env[v] = outer[op.results[i]]


def read_rows(s: Sweep, w: RuleBuilder, op: Op, args: list, tapes: list, k: Value, env: dict, inner_env: dict):
    """A loop's carried values `args` in its iteration k: row k of their tapes (an untaped
    slot: what `untaped_value` says)."""
    for i, (a, t) in enumerate(zip(args, tapes)):
        inner_env[a] = read_tape(w, t, k, a) if t is not None else s.mod.untaped_value(op, i, env)


def seed_next(s: Sweep, w: RuleBuilder, op: Op, body: Block, tapes: list, k: Value, env: dict, inner_env: dict,
              inner: dict, carried: list, d_in: list) -> None:
    """In iteration k of a loop's reverse: what `body` yields read back from row k + 1 of the
    tapes (`reuse_taped`), and the adjoints of the next iteration's carried values (`d_in`, at
    the slots `carried`) added to theirs."""
    y = body.ops[-1].operands
    reuse_taped(s, w, op, body, y, tapes, arith(w, "addi", k, index(w, 1)), inner_env, env)
    for i, d in zip(carried, d_in):
        accumulate(w, inner, y[i], d, inner_env[y[i]])


def for_step(s: Sweep, op: Op, env: dict, tapes: list, base: Value | None, carried: list, undo: dict | None = None):
    """One iteration of a `for` loop's reverse, as `countdown` writes it: the carried values
    read from row k of `tapes` (None at an untaped slot), the body recomputed and reversed.
    The iteration is base + k of the loop (k itself without a base). With `undo` (slot -> its
    undo log: the rows iteration k overwrote, and where), the step takes those slots' values
    after iteration k as state and gives back their values before it, the rows put back."""
    body = op.regions[0]
    lb, st = env[op.operands[0]], env[op.operands[2]]
    undo = undo or {}

    def step(w2, k, d_in, inner, after=()):
        inner_env = dict(env)
        g = k if base is None else arith(w2, "addi", base, k)
        inner_env[body.args[0]] = arith(w2, "addi", lb, arith(w2, "muli", g, st))
        read_rows(s, w2, op, body.args[1:], tapes, k, env, inner_env)
        before = []
        for (i, (old_t, at_t)), cur in zip(undo.items(), after):
            before.append(w2.dg_op("put_rows", [cur, w2.dg_op("tape_read", [old_t, k]), w2.dg_op("tape_read", [at_t, k])]))
            inner_env[body.args[1 + i]] = before[-1]
        info2 = forward_sweep(s, body, inner_env, w2, effects=False)
        y = body.ops[-1].operands
        for i, cur in zip(undo, after):  # (what the body yields there: the value after the step, as it is)
            inner_env[y[i]] = cur
        seed_next(s, w2, op, body, tapes, k, env, inner_env, inner, carried, d_in)
        reverse_sweep(s, body, inner_env, inner, w2, info2)
        outs = [inner[body.args[1 + i]] if body.args[1 + i] in inner else w2.zeros_like(d)
                for i, d in zip(carried, d_in)]
        return (outs, before) if undo else outs
    return step


def reverse_for(s: Sweep, op: Op, env: dict, adj: dict, w: RuleBuilder, info: dict) -> None:
    body = op.regions[0]
    carried = [i for i, a in enumerate(body.args[1:]) if a in s.active]
    free = free_active(s, [body])
    d_init = [adj[op.results[i]] if op.results[i] in adj else w.zeros_like(env[op.results[i]]) for i in carried]
    f_init = [adj[v] if v in adj else w.zeros_like(env[v]) for v in free]
    loc = backward_loc(op.loc)
    if "snaps" in info:
        d_res, f_res = checkpoint.reverse_segments(s, w, op, env, info, d_init, free, f_init, loc,
                                                   lambda tapes, base: for_step(s, op, env, tapes, base, carried))
    else:
        undo = info.get("undo", {})
        d_res, f_res = countdown(w, loc, info["n"], index(w, 1), d_init, free, f_init,
                                 for_step(s, op, env, info["tapes"], None, carried, undo),
                                 state=[env[op.results[i]] for i in undo])
    settle(w, adj, free, f_res, [op.operands[3 + i] for i in carried], d_res, env)


def while_step(s: Sweep, op: Op, env: dict, tapes: list, carried_b: list, carried_a: list):
    """One iteration of a `while` loop's reverse, as `countdown` writes it: the carried values
    read from row k of `tapes` (None at an untaped slot), the condition's region and the
    body recomputed, then both reversed."""
    before, after = op.regions
    cond = before.ops[-1].operands[1:]

    def step(w2, k, d_in, inner2):
        inner_env = dict(env)
        read_rows(s, w2, op, before.args, tapes, k, env, inner_env)
        info_b2 = forward_sweep(s, before, inner_env, w2, effects=False)
        for a, c in zip(after.args, cond):
            inner_env[a] = inner_env[c]
        info_a2 = forward_sweep(s, after, inner_env, w2, effects=False)
        seed_next(s, w2, op, after, tapes, k, env, inner_env, inner2, carried_b, d_in)
        reverse_sweep(s, after, inner_env, inner2, w2, info_a2)
        for i in carried_a:
            if after.args[i] in inner2:
                accumulate(w2, inner2, cond[i], inner2[after.args[i]], inner_env[cond[i]])
        reverse_sweep(s, before, inner_env, inner2, w2, info_b2)
        return [inner2[before.args[i]] if before.args[i] in inner2 else w2.zeros_like(d)
                for i, d in zip(carried_b, d_in)]
    return step


def reverse_while(s: Sweep, op: Op, env: dict, adj: dict, w: RuleBuilder, info: dict) -> None:
    before, after = op.regions
    cond = before.ops[-1].operands[1:]
    carried_b = [i for i, a in enumerate(before.args) if a in s.active]
    carried_a = [i for i, a in enumerate(after.args) if a in s.active]
    free = free_active(s, [before, after])
    one = index(w, 1)
    last = arith(w, "subi", info["total"], one)

    # The final evaluation of the condition (the one that ended the loop): its carried values
    # are the tape's last row, or kept apart by a checkpointed loop. An untaped slot: its
    # final value.
    env1 = dict(env)
    final = info.get("last")
    for i, (a, r) in enumerate(zip(before.args, op.results)):
        if final is not None:
            env1[a] = final[i] if final[i] is not None else env[r]
        else:
            t = info["tapes"][i]
            env1[a] = read_tape(w, t, last, a) if t is not None else env[r]
    info_b = forward_sweep(s, before, env1, w, effects=False)
    inner = {v: adj[v] for v in free if v in adj}
    for j, r in enumerate(op.results):
        if r in adj:
            accumulate(w, inner, cond[j], adj[r], env1[cond[j]])
    reverse_sweep(s, before, env1, inner, w, info_b)
    loc = backward_loc(op.loc)
    w.loc = loc
    d_init = [inner[before.args[i]] if before.args[i] in inner else w.zeros_like(env1[before.args[i]])
              for i in carried_b]
    f_init = [inner[v] if v in inner else w.zeros_like(env[v]) for v in free]
    if "snaps" in info:
        d_res, f_res = checkpoint.reverse_segments(
            s, w, op, env, dict(info, n=last), d_init, free, f_init, loc,
            lambda tapes, base: while_step(s, op, env, tapes, carried_b, carried_a))
    else:
        d_res, f_res = countdown(w, loc, last, one, d_init, free, f_init,
                                 while_step(s, op, env, info["tapes"], carried_b, carried_a))
    settle(w, adj, free, f_res, [op.operands[i] for i in carried_b], d_res, env)
