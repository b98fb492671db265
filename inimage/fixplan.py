"""What the fix pack means, decided in one place: which fixes a selection gets and in what order,
whether their requirements hold, the HPU mode, the digest every record uses, and where the
cookbook lives inside an image.

Standard library only, like the whole package: the applier (inimage.apply) uses it inside the image
and the cookbook imports this same module on the host, so a recipe's fixes are never decided twice.
"""

import hashlib

# Where the cookbook's files are inside an image.
IMAGE_HOME = "/opt/cookbook"
IMAGE_FIXES = IMAGE_HOME + "/fixes"  # the recipe's pack: pack.json and its patches
IMAGE_LIB = IMAGE_HOME + "/lib"  # this package, whole, and the cookbook modules the entrypoint runs
PACK = IMAGE_FIXES + "/pack.json"
RECORD = IMAGE_HOME + "/fix-record.json"
MANIFEST = IMAGE_HOME + "/manifest.json"
ENTRYPOINT = IMAGE_HOME + "/entrypoint.py"
# The applier, run by module name. `python -m` puts the working folder first on sys.path: run from
# IMAGE_LIB, the package is found there and nothing in the base's working directory (a vllm
# checkout, say) shadows the installed packages it inspects. -B: no bytecode written into the image.
APPLY_MODULE = "inimage.apply"

MODES = ("compile", "lazy")
LAZY_VAR = "PT_HPU_LAZY_MODE"


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def sha256_file(path):
    with open(path, "rb") as f:
        return sha256_bytes(f.read())


def apply_argv(*args, env=None):
    """The applier's command line in an image, with `env` {name: value} set for it alone (env(1) runs it
    from IMAGE_LIB: see APPLY_MODULE). The build, the entrypoint, the image checks and the pages use it."""
    assignments = [f"{k}={v}" for k, v in sorted((env or {}).items())]
    return ["env", "-C", IMAGE_LIB, *assignments, "python3", "-B", "-m", APPLY_MODULE, *args]


def hpu_mode(environ):
    """`lazy` when PT_HPU_LAZY_MODE=1, else `compile` (the Gaudi software's own reading of it)."""
    return "lazy" if environ.get(LAZY_VAR) == "1" else "compile"


def select(order, opt_in, named):
    """The profile's generic fixes plus the named opt-ins, in pack order."""
    chosen = set(named)
    return [name for name in order if name not in opt_in or name in chosen]


def find_cycle(names, requires):
    """A requires-cycle reachable from names, as [a, b, ..., a], or None. requires: {fix: [fix]}."""
    state, path = {}, []

    def visit(name):
        if name not in requires or state.get(name) == "done":
            return None
        if state.get(name) == "visiting":
            return path[path.index(name) :] + [name]
        state[name] = "visiting"
        path.append(name)
        for required in requires[name]:
            cycle = visit(required)
            if cycle:
                return cycle
        path.pop()
        state[name] = "done"
        return None

    for name in names:
        cycle = visit(name)
        if cycle:
            return cycle
    return None


def cycle_message(cycle):
    return f"requires cycle: {' -> '.join(cycle)}: fix the fixes' requires and regenerate the pack"


def requirement_problems(profile_name, order, kept, skipped, requires):
    """[(fix, message)]: every requirement of a kept fix must be kept too, and come earlier in the
    order. requires: {fix: [fix]} for every fix that can be applied (the pack's, on the host the
    selected ones); skipped: {fix: why} for fixes left out for the mode."""
    position = {name: i for i, name in enumerate(order)}
    problems = []
    for name in kept:
        for required in requires.get(name, []):
            if required in kept and position[required] < position[name]:
                continue
            if required not in position:
                why = f"which is not in profile {profile_name}'s order"
            elif required not in requires:
                why = "which is not in this pack"
            elif required in skipped:
                why = f"which is skipped: it {skipped[required]}"
            elif required not in kept:
                why = f"which is opt-in and not named: name it too (--profile {profile_name} {required} {name})"
            else:
                why = "which comes later in the order: fix the profile's order and regenerate the pack"
            problems.append((name, f"{name} requires {required}, {why}"))
    return problems
