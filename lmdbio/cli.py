"""The ``lmdbio`` command: make datasets, inspect LMDB files, run benchmarks."""

from __future__ import annotations

import argparse
from importlib.metadata import entry_points
import json
import os
import sys

from .errors import LmdbioError

__all__ = ["main", "build_parser"]


def _cmd_make_dataset(args) -> int:
    from .datasets import make_dataset

    out = make_dataset(args.out, preset=args.preset, records=args.records, encoded=args.encoded,
                       commit_every=args.commit_every, seed=args.seed,
                       lmdb_format=args.lmdb_format, force=args.force,
                       progress=not args.quiet)
    print(out)
    return 0


def _cmd_info(args) -> int:
    from .info import describe

    print(json.dumps(describe(args.path), indent=2))
    return 0


def _cmd_dump(args) -> int:
    from .info import dump

    dump(args.path, sys.stdout)
    return 0


def _cmd_index(args) -> int:
    from .errors import ProvenanceError
    from .provenance import load_provenance, sidecar_path, verify_provenance, write_provenance

    if not args.verify:
        print(write_provenance(args.path))
        return 0
    try:
        load_provenance(args.path)   # a current sidecar is checked as it is, not replaced
        side = sidecar_path(args.path)
    except ProvenanceError:
        side = write_provenance(args.path)
    print(side)
    row = verify_provenance(args.path)
    print(f"verified: {row['prov_check_leaves']} leaf pages, {row['prov_check_pages']} pages read "
          f"in {row['prov_check_s']:.3f} s; stamp {row['prov_stamp']}")
    return 0


#: Entry-point group through which other packages add subcommands: each entry point is a
#: function ``add_parser(subparsers)``. The lab (``lmdbio.lab``) adds ``bench``, ``pfs`` and
#: ``model`` this way, so the library never imports it.
COMMANDS_GROUP = "lmdbio.commands"


def _add_plugin_commands(sub) -> None:
    for ep in sorted(entry_points(group=COMMANDS_GROUP), key=lambda e: e.name):
        try:
            add = ep.load()
        except ImportError as exc:   # the lab's packages are not installed
            missing = exc.name or str(exc)
            p = sub.add_parser(ep.name, help=f"needs pip install 'lmdbio[lab]' ({missing} is missing)")
            p.set_defaults(func=lambda args, n=ep.name, m=missing: _missing_lab(n, m))
            continue
        add(sub)


def _missing_lab(name: str, missing: str) -> int:
    raise LmdbioError(f"`lmdbio {name}` is part of the reproduction lab, whose packages are not "
                      f"installed ({missing} is missing): pip install 'lmdbio[lab]'")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lmdbio", description="Parallel LMDB reading for deep learning (LMDBIO reproduction).")
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("make-dataset", help="write a Caffe-style LMDB of synthetic Datums")
    p.add_argument("--preset", choices=["cifar10", "imagenet"], default="cifar10")
    p.add_argument("--records", type=int, default=1000, help="number of records (default 1000)")
    p.add_argument("--out", required=True, help="LMDB directory to create")
    p.add_argument("--encoded", action="store_true", help="store JPEG bytes instead of raw pixels")
    p.add_argument("--commit-every", type=int, default=1000,
                   help="records per write transaction (default 1000, as convert_imageset)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lmdb-format", choices=["0.9", "1.0"], default="0.9")
    p.add_argument("--force", action="store_true", help="replace an existing database")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_make_dataset)

    p = sub.add_parser("info", help="describe an LMDB file as JSON (our own parser)")
    p.add_argument("path", help="LMDB directory or data.mdb file")
    p.set_defaults(func=_cmd_info)

    p = sub.add_parser("dump", help="print records in mdb_dump's bytevalue format (our own parser)")
    p.add_argument("path", help="LMDB directory or data.mdb file")
    p.set_defaults(func=_cmd_dump)

    p = sub.add_parser("index", help="write or refresh the provenance sidecar used by PROV")
    p.add_argument("path", help="LMDB directory or data.mdb file")
    p.add_argument("--verify", action="store_true",
                   help="keep a current sidecar (else write one), check all of it against the "
                        "file and stamp it in the cache, so readers skip that check later")
    p.set_defaults(func=_cmd_index)

    _add_plugin_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``lmdbio`` console script and ``python -m lmdbio``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:
        # The reader of our stdout left (``lmdbio dump DB | head``): that is a normal end.
        # Point stdout at devnull so the interpreter's final flush does not fail again.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):   # stdout is no file (tests capture it)
            pass
        return 0
    except (LmdbioError, ValueError, OSError) as exc:
        if args.debug:
            raise
        msg = " ".join(str(exc).split()) or type(exc).__name__
        if isinstance(exc, OSError) and exc.filename is None and getattr(args, "path", None):
            # An error from a read deep inside (EIO from /proc/self/mem) names no file: name it.
            msg = (f"{args.path}: {msg}: reading it failed; give an LMDB directory or its data.mdb "
                   "on a device that reads")
        print(f"lmdbio: error: {msg}", file=sys.stderr)
        return 1
    except ImportError as exc:   # a lab command without the lab's packages
        if args.debug:
            raise
        print(f"lmdbio: error: {exc}: `lmdbio {args.command}` needs the reproduction lab's "
              "packages: pip install 'lmdbio[lab]'", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("lmdbio: error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
