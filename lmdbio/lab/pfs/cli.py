"""The ``lmdbio pfs`` subcommand: mount, unmount, inspect the emulated parallel file system."""

from __future__ import annotations

import json
import os

from .model import PROFILES, load_profile

__all__ = ["add_pfs_parser"]


def _cmd_mount(args) -> int:
    from .mount import check_fuse, start

    if args.foreground:
        check_fuse()
        from .fs import serve

        profile = load_profile(args.profile, args.time_scale)
        src, mnt = os.path.realpath(args.src), os.path.realpath(args.mnt)
        if not os.path.isdir(src):
            raise ValueError(f"source {src} is not a directory")
        serve(src, mnt, profile, args.nodes, exit_with_parent=args.exit_with_parent)
        return 0
    m = start(args.src, args.mnt, profile=args.profile, nodes=args.nodes, time_scale=args.time_scale,
              detach=True)
    st = m.stats()
    p = st["profile"]
    print(f"{m.mnt}: {m.nodes} node view(s) of {m.src} through '{p['name']}' "
          f"(time_scale {p['time_scale']}, readahead {st['kernel']['read_ahead_kb']} KiB, "
          f"max_read {st['kernel']['max_read'] // 1024} KiB); daemon pid {m.pid}; "
          f"unmount with: lmdbio pfs umount {m.mnt}")
    return 0


def _cmd_umount(args) -> int:
    from .mount import umount

    if not umount(args.mnt):
        print(f"{os.path.realpath(args.mnt)} was not mounted (state cleaned)")
    return 0


def _cmd_stats(args) -> int:
    from .mount import stats

    st = stats(args.mnt)
    print(json.dumps(st["counters"] if args.counters else st, indent=1))
    return 0


def _cmd_profiles(args) -> int:
    out = {name: load_profile(name).as_dict() for name in PROFILES}
    print(json.dumps(out, indent=1))
    return 0


def _positive_int(text: str) -> int:
    n = int(text)
    if n < 1:
        raise ValueError(f"must be >= 1, got {n}")
    return n


def add_pfs_parser(subparsers) -> None:
    """Register ``lmdbio pfs {mount,umount,stats,profiles}``."""
    import argparse

    p = subparsers.add_parser("pfs", help="emulated parallel file system (FUSE): mount, umount, stats")
    sub = p.add_subparsers(dest="pfs_command", metavar="ACTION", required=True)

    q = sub.add_parser("mount", help="serve SRC as MNT/node0..node{K-1} through a storage profile")
    q.add_argument("src", help="directory to serve read-only (e.g. the datasets directory)")
    q.add_argument("mnt", help="empty directory to mount on")
    q.add_argument("--profile", choices=PROFILES, default="gpfs-2017",
                   help="storage profile (default gpfs-2017); see 'lmdbio pfs profiles'")
    q.add_argument("--nodes", type=_positive_int, default=1, help="node views (default 1)")
    q.add_argument("--time-scale", type=float, default=None,
                   help="stretch every time by this factor (default: the profile's)")
    q.add_argument("--foreground", action="store_true", help="serve in this process until unmounted")
    q.add_argument("--exit-with-parent", action="store_true", help=argparse.SUPPRESS)
    q.set_defaults(func=_cmd_mount)

    q = sub.add_parser("umount", help="unmount MNT and stop its daemon (also after a crash)")
    q.add_argument("mnt")
    q.set_defaults(func=_cmd_umount)

    q = sub.add_parser("stats", help="print the mount's JSON stats (profile, kernel settings, counters)")
    q.add_argument("mnt")
    q.add_argument("--counters", action="store_true", help="only the storage model's counters")
    q.set_defaults(func=_cmd_stats)

    q = sub.add_parser("profiles", help="print the storage profiles with their sources as JSON")
    q.set_defaults(func=_cmd_profiles)
