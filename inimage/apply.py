"""The fix pack's command line: apply a profile's fixes to the vllm / vllm-gaudi sources installed in
this image, check them, revert them, or list a profile.

It runs inside the image at build time and at every start (--check), with the image's own Python, so
this whole package uses the standard library only. The image runs it by module name from the folder
that holds the package (fixplan.apply_argv: `env -C IMAGE_LIB python3 -B -m inimage.apply ...`): -m
puts the working folder first on sys.path, so that folder is this package's, never the base's working
directory. It reads pack.json (generated on the host from fixes/*/fix.yaml and fixes/profiles/*.yaml; by default
fixplan.PACK) and works all or nothing. Which fixes a selection gets, their requirements and the HPU
mode are decided by fixplan, the module the cookbook imports on the host too.

Usage:
  python3 -m inimage.apply --profile v0.26.0 [OPT_IN ...] [--site DIR] [--record PATH] [--pack PATH]
                           [--dry-run] [--quiet]
  python3 -m inimage.apply --check  [--record PATH] [--site DIR] [--pack PATH]
  python3 -m inimage.apply --revert [--record PATH] [--site DIR] [--pack PATH] [--dry-run]
  python3 -m inimage.apply --list   [--profile NAME] [--pack PATH]

--profile applies the profile's fixes that are in this pack and not opt-in, plus the opt-ins
named. It refuses (changing nothing) unless every requirement, env guard (e.g.
VLLM_COMPACT_GDN=1), dependency range (e.g. xgrammar>=0.2.4) and mode holds (PT_HPU_LAZY_MODE=1
means lazy, otherwise compile), the installed versions and commits are the profile's, and every
target file is the pristine release file. It then applies every patch to copies in a staging
directory (git apply, or patch where git is absent), replaces the changed files and writes the
record (default /opt/cookbook/fix-record.json). Running it again with the same selection does nothing.

--check verifies the image against its record: every patched file unchanged, the required env
set, and the HPU mode the fixes were applied for. It is fast enough for container start-up.
--revert reverse-applies the recorded fixes, restoring the pristine files, and removes the record.
--list shows a profile's fixes: profile or opt-in, in this pack or not.
--site DIR looks for the packages in DIR instead of on sys.path (tests, unusual layouts); a fix's
dependencies are looked for in DIR, then on the path of the Python running this.

Each concern is a module: pack (pack.json), selection (steps 1-4), versions (dependency ranges),
installed (step 5: packages, commits, pristine files), patches (step 7, in staging), files (the atomic
commit), record, commands, output.

Exit status: 0 success, 1 refused (nothing changed), 2 usage error.
"""

# Only what --check needs is imported at start-up; apply and revert import the rest where they need
# it, so that the check run at every container start stays well under 100 ms.
import argparse
import sys

from .commands import cmd_apply, cmd_check, cmd_list, cmd_revert
from .fixplan import PACK, RECORD
from .output import Log, PackError, emit


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        emit(sys.stderr, f"usage error: {message}")
        sys.exit(2)


def parse_args(argv):
    parser = Parser(
        prog="python3 -m inimage.apply",
        description="Apply, check, revert or list the cookbook's fix pack.",
        epilog="See the docstring of inimage/apply.py for what each step checks.",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="verify the image against its fix record")
    action.add_argument("--revert", action="store_true", help="restore the pristine files, remove the record")
    action.add_argument("--list", action="store_true", help="list a profile's fixes")
    parser.add_argument("--profile", help="the profile to apply (or list)")
    parser.add_argument("opt_in", nargs="*", metavar="OPT_IN", help="opt-in fixes to apply too")
    parser.add_argument("--site", help="find the packages in DIR instead of on sys.path")
    parser.add_argument("--record", default=RECORD, help=f"the fix record (default {RECORD})")
    parser.add_argument("--pack", help=f"the pack (default {PACK})")
    parser.add_argument("--dry-run", action="store_true", help="check and stage everything, change nothing")
    parser.add_argument("--quiet", action="store_true", help="print only notes, errors and the result")
    args = parser.parse_intermixed_args(argv)

    applying = not (args.check or args.revert or args.list)
    if applying and not args.profile:
        parser.error("say --profile NAME to apply (or --check, --revert, --list)")
    if args.opt_in and not applying:
        parser.error("opt-in fixes are named only when applying (--profile NAME OPT_IN ...)")
    if args.profile and (args.check or args.revert):
        parser.error("--check and --revert take the profile from the record, not --profile")
    if args.dry_run and (args.check or args.list):
        parser.error("--dry-run goes with applying or --revert")
    return args


def main(argv=None):
    args = parse_args(argv)
    log = Log(args.quiet)
    command = cmd_check if args.check else cmd_revert if args.revert else cmd_list if args.list else cmd_apply
    try:
        return command(args, log)
    except PackError as exc:
        log.error(str(exc))
        return 1
    except OSError as exc:
        log.error(f"{exc}; nothing was changed")
        return 1


if __name__ == "__main__":
    sys.exit(main())
