"""Which fixes a run applies (steps 1-4): the profile's generic fixes and the named opt-ins, in order
(fixplan decides, as on the host), those of the other HPU mode skipped, requirements and env guards
checked; a refusal names the fix and how to mend it."""

from . import fixplan
from .fixplan import MODES, hpu_mode
from .output import PackError, describe_var
from .pack import opt_in_names


def select_fixes(profile_name, profile, fixes, named):
    """The profile's fixes in this pack that are not opt-in, plus the named opt-ins, in order."""
    order = profile["order"]
    unknown = [n for n in named if n not in order]
    if unknown:
        raise PackError(f"unknown fix {', '.join(unknown)} for profile {profile_name}; known: {', '.join(order)}")
    absent = [n for n in named if n not in fixes]
    if absent:
        raise PackError(
            f"{', '.join(absent)}: in profile {profile_name}'s order but not in this pack "
            "(its fix is not written yet, or the recipe left it out): drop it from the command line"
        )
    selected = [n for n in fixplan.select(order, opt_in_names(profile, fixes), named) if n in fixes]
    return selected, [n for n in order if n not in fixes]


def split_by_mode(selected, named, fixes, environ):
    """(kept, skipped): a profile fix made for another mode is skipped, a named one refused."""
    mode = hpu_mode(environ)
    lazy = describe_var("PT_HPU_LAZY_MODE", environ)
    kept, skipped, refused = [], {}, []
    for name in selected:
        modes = fixes[name].get("modes", list(MODES))
        if mode in modes:
            kept.append(name)
        elif name in named:
            refused.append(
                f"{name} runs only in {'/'.join(modes)} mode, but this build is {mode} mode ({lazy}): "
                f"leave {name} out, or build in {'/'.join(modes)} mode"
            )
        else:
            skipped[name] = f"runs only in {'/'.join(modes)} mode; this build is {mode} mode ({lazy})"
    if refused:
        raise PackError("\n".join(refused))
    return kept, skipped


def requires_of(fixes):
    return {name: fix.get("requires", []) for name, fix in fixes.items()}


def check_requirements(profile_name, order, kept, skipped, fixes):
    """Every requirement of a kept fix must be kept too, and come earlier in the order."""
    problems = fixplan.requirement_problems(profile_name, order, kept, skipped, requires_of(fixes))
    if problems:
        raise PackError("\n".join(message for _, message in problems))


def check_env(kept, fixes, environ):
    """The union of the kept fixes' required env; refuses when os.environ does not hold it."""
    required, problems = {}, []
    for name in kept:
        for var, want in sorted(fixes[name].get("env", {}).items()):
            required[var] = want
            if environ.get(var) != want:
                problems.append(
                    f"{name} needs {var}={want}, found {describe_var(var, environ)}: "
                    f"set {var}={want} for the build (and every run), or leave {name} out"
                )
    if problems:
        raise PackError("\n".join(problems))
    return required


def plan_selection(pack, profile_name, profile, named, environ):
    """Steps 1-4: which fixes to apply, which to skip and why, and the env they need."""
    fixes = pack["fixes"]
    selected, not_in_pack = select_fixes(profile_name, profile, fixes, named)
    cycle = fixplan.find_cycle(selected, requires_of(fixes))
    if cycle:
        raise PackError(fixplan.cycle_message(cycle))
    kept, skipped = split_by_mode(selected, set(named), fixes, environ)
    check_requirements(profile_name, profile["order"], kept, skipped, fixes)
    env = check_env(kept, fixes, environ)
    return {
        "fixes": kept,
        "skipped": skipped,
        "not_in_pack": not_in_pack,
        "env": env,
        "mode": hpu_mode(environ),
    }

