"""The four commands: apply a profile's fixes, check the image against its record, revert them, list
a profile. Each raises PackError to refuse; nothing is changed unless everything holds."""

import os

from .files import commit, file_changes, read_bytes
from .fixplan import PACK, hpu_mode, sha256_bytes
from .installed import check_pristine, inspect_packages
from .output import PackError, bullets, describe_var
from .pack import collect_targets, get_profile, load_pack, opt_in_names
from .patches import patch_in_staging, patch_steps, verify_patches
from .record import build_record, drifted_files, read_record, record_locations, write_record
from .selection import plan_selection
from .versions import check_dists


def report_selection(plan, profile_name, log):
    log.info(f"profile {profile_name}, {plan['mode']} mode: {len(plan['fixes'])} fixes: {', '.join(plan['fixes'])}")
    for name, reason in plan["skipped"].items():
        log.info(f"skipped {name}: {reason}")
    if plan["not_in_pack"]:
        log.info(f"not in this pack: {', '.join(plan['not_in_pack'])}")


def already_applied(record, plan, profile_name, packages, record_path, log):
    """Step 6: exit 0 for the same selection on an unchanged tree; refuse anything else."""
    if record.get("profile") != profile_name or record.get("fixes") != plan["fixes"]:
        raise PackError(
            f"{record_path} records profile {record.get('profile')} with fixes "
            f"{', '.join(record.get('fixes') or []) or 'none'}, but this run selects profile {profile_name} "
            f"with {', '.join(plan['fixes']) or 'none'}: revert first (the same command with --revert "
            f"--record {record_path}), then apply"
        )
    locations = {package: info["location"] for package, info in packages.items()}
    problems = drifted_files(record, locations)
    if problems:
        raise PackError(
            f"the fixes are recorded as applied ({record_path}) but the tree changed since:\n"
            f"{bullets(problems)}\nrebuild the image from its base"
        )
    log.result(
        f"already applied: {len(plan['fixes'])} fixes, {len(record['files'])} files match the record "
        f"{record_path} (profile {profile_name}); nothing changed"
    )
    return 0


def cmd_apply(args, log):
    pack_path = args.pack or PACK
    pack, pack_sha = load_pack(pack_path)
    pack_dir = os.path.dirname(os.path.abspath(pack_path))
    fixes = pack["fixes"]
    profile = get_profile(pack, args.profile)
    plan = plan_selection(pack, args.profile, profile, args.opt_in, os.environ)
    plan["dists"] = check_dists(plan["fixes"], fixes, args.site)
    report_selection(plan, args.profile, log)

    packages, problems = inspect_packages(args.profile, profile, args.site)
    for info in packages.values():
        for note in info["notes"]:
            log.result(f"note: {note}")
    record = read_record(args.record, missing_ok=True)
    if record is not None and not problems:
        return already_applied(record, plan, args.profile, packages, args.record, log)
    targets = collect_targets(plan["fixes"], fixes, profile)
    if record is None:  # an applied tree never has pristine hashes: only the package problems count
        problems += check_pristine(targets, packages)
    if problems:
        raise PackError(
            f"the image does not match profile {args.profile} ({len(problems)} problems); "
            f"nothing was changed:\n{bullets(problems)}"
        )

    steps = patch_steps(plan["fixes"], fixes)
    touched = verify_patches(steps, fixes, pack_dir)
    locations = {package: info["location"] for package, info in packages.items()}
    originals = {key: read_bytes(os.path.join(locations[key[0]], key[1])) for key in targets}
    results = patch_in_staging(originals, steps, pack_dir, reverse=False, log=log)
    changes = file_changes(originals, results, locations)
    record = build_record(args.profile, pack_sha, plan, packages, targets, touched, originals, results)

    if args.dry_run:
        for entry in record["files"]:
            if entry["before"] != entry["after"]:
                log.result(f"dry run: would change {entry['package']}/{entry['path']} ({', '.join(entry['fixes'])})")
        log.result(f"dry run: {len(plan['fixes'])} fixes apply cleanly; nothing changed, no record written")
        return 0
    commit(changes, lambda: write_record(args.record, record), f"write the record {args.record}")
    log.result(
        f"applied {len(plan['fixes'])} fixes to {len(changes)} files (profile {args.profile}, "
        f"{plan['mode']} mode); record {args.record}"
    )
    return 0


def cmd_check(args, log):
    record = read_record(args.record, missing_ok=False)
    problems = drifted_files(record, record_locations(record, args.site))
    for var, want in sorted(record.get("env", {}).items()):
        if os.environ.get(var) != want:
            problems.append(
                f"the applied fixes need {var}={want}, found {describe_var(var, os.environ)}: "
                f"run the container with -e {var}={want}"
            )
    # Fixes were chosen for the build's mode (some are skipped in one mode); a run in the other
    # mode would serve with a fix set nobody checked.
    built_mode, mode = record.get("mode"), hpu_mode(os.environ)
    if built_mode and mode != built_mode:
        problems.append(
            f"the fixes were applied for {built_mode} mode, but PT_HPU_LAZY_MODE says {mode} mode "
            f"(found {describe_var('PT_HPU_LAZY_MODE', os.environ)}): run in the mode the image was built for"
        )
    if args.pack:
        raw = read_bytes(args.pack)
        if raw is None or sha256_bytes(raw) != record.get("pack_sha256"):
            problems.append(f"{args.pack} is not the pack these fixes were applied from")
    if problems:
        raise PackError(
            f"the image does not match its fix record {args.record} (profile {record.get('profile')}):\n"
            + bullets(problems)
        )
    log.result(
        f"ok: {len(record.get('fixes', []))} fixes, {len(record['files'])} files match the record "
        f"(profile {record.get('profile')})"
    )
    return 0


def cmd_revert(args, log):
    record = read_record(args.record, missing_ok=False)
    pack_path = args.pack or PACK
    pack, pack_sha = load_pack(pack_path)
    if pack_sha != record.get("pack_sha256"):
        raise PackError(
            f"{pack_path} is not the pack these fixes were applied from (sha256 {pack_sha}, the record "
            f"says {record.get('pack_sha256')}): revert with that pack (--pack PATH)"
        )
    fixes, names = pack["fixes"], record.get("fixes", [])
    locations = record_locations(record, args.site)
    problems = drifted_files(record, locations)
    if problems:
        raise PackError(f"cannot revert: the tree changed since the fixes were applied:\n{bullets(problems)}")

    steps = patch_steps(names, fixes, reverse=True)
    verify_patches(steps, fixes, os.path.dirname(os.path.abspath(pack_path)))
    originals = {
        (e["package"], e["path"]): read_bytes(os.path.join(locations[e["package"]], e["path"])) for e in record["files"]
    }
    results = patch_in_staging(originals, steps, os.path.dirname(os.path.abspath(pack_path)), True, log)
    wrong = [
        f"{e['package']}/{e['path']}: sha256 {sha256_bytes(results[(e['package'], e['path'])])} after "
        f"reverting, recorded before {e['before']}"
        for e in record["files"]
        if sha256_bytes(results[(e["package"], e["path"])]) != e["before"]
    ]
    if wrong:
        raise PackError(f"reverting does not give back the recorded files; nothing was changed:\n{bullets(wrong)}")
    changes = file_changes(originals, results, locations)

    if args.dry_run:
        for entry in record["files"]:
            if entry["before"] != entry["after"]:
                log.result(f"dry run: would restore {entry['package']}/{entry['path']}")
        log.result(f"dry run: would revert {len(names)} fixes and remove {args.record}; nothing changed")
        return 0
    commit(changes, lambda: os.unlink(args.record), f"remove the record {args.record}")
    log.result(
        f"reverted {len(names)} fixes: {len(changes)} files restored (profile {record.get('profile')}); "
        f"removed {args.record}"
    )
    return 0


def cmd_list(args, log):
    pack, _ = load_pack(args.pack or PACK)
    fixes = pack["fixes"]
    for profile_name in [args.profile] if args.profile else sorted(pack["profiles"]):
        profile = get_profile(pack, profile_name)
        order, opt_in = profile["order"], opt_in_names(profile, fixes)
        present = sum(name in fixes for name in order)
        log.result(
            f"profile {profile_name} (gaudi_sw {profile.get('gaudi_sw', '?')}): "
            f"{len(order)} fixes, {present} in this pack"
        )
        width = max(map(len, order), default=0)
        for name in order:
            kind = "opt-in" if name in opt_in else "profile"
            status = "in pack" if name in fixes else "not in this pack"
            title = fixes.get(name, {}).get("title", "")
            log.result(f"  {name:<{width}}  {kind:<7}  {status:<16}  {title}".rstrip())
    return 0

