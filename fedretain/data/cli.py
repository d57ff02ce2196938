"""``fedretain data get`` and ``fedretain data list``: the command line of
:mod:`fedretain.data.fetch` (the one command that downloads)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def cmd_data_get(args: argparse.Namespace) -> int:
    from fedretain.data import fetch
    from fedretain.data.datasets import fetch_source

    fetch_source(args.name)  # why there is nothing to get, for the datasets without a source
    root = Path(args.dir).expanduser() if args.dir else None
    folder = fetch.get(args.name, root, args.mirror)
    default = fetch.fetched_dir(args.name) == folder
    print(f"data_dir={folder}")
    if default:
        print(f"(found there without data_dir too: run and reproduce read {args.name} from it)")
    return 0


def cmd_data_list(args: argparse.Namespace) -> int:
    from fedretain.data import fetch
    from fedretain.data.datasets import DATASETS, default_folder

    root = Path(args.dir).expanduser() if args.dir else None
    width = max(len(n) for n in DATASETS)
    for name, info in DATASETS.items():
        folder = fetch.fetched_dir(name, root) if root else default_folder(name)
        path = Path(folder) if folder else None
        checked = root is not None and name in fetch.SOURCES  # what data get fills: its files
        there = path is not None and (fetch.present(name, path) if checked else path.is_dir())
        if not info.meta.get("needs_files", True):
            state = "no files needed"
        elif there:
            state = f"present: data_dir={folder}"
        elif name in fetch.SOURCES:
            state = f"missing: fedretain data get {name}" + (f" --dir {root}" if root else "")
        else:
            state = f"missing: {info.meta['how_to_get']}"
        print(f"{name:<{width}}  {state}")
    return 0


def add_data_commands(sub: Any) -> None:
    """The ``data`` command and its ``get`` and ``list`` actions, on the CLI's subparsers."""
    dat = sub.add_parser(
        "data",
        help="get a dataset's files from its publisher, or list what is here",
        description="The one command that downloads: runs only read files on disk.",
    )
    dsub = dat.add_subparsers(dest="action", required=True)
    dget = dsub.add_parser(
        "get",
        help="download a dataset, check its SHA-256, unpack it; prints the data_dir= to use",
        description="Download dataset NAME from its publisher (or --mirror), check every file "
        "against the SHA-256 shipped with fedretain, continue a download that broke off, "
        "unpack archives safely, into DIR/NAME. Run again, it checks and downloads nothing.",
    )
    dget.add_argument("name", metavar="NAME", help="the dataset: mnist, emnist, cifar10, ...")
    dget.add_argument(
        "--dir",
        help="the folder of datasets (default: $FEDRETAIN_DATA_HOME, else "
        "~/.local/share/fedretain/datasets, which runs read without data_dir)",
    )
    dget.add_argument(
        "--mirror",
        action="append",
        default=[],
        metavar="URL",
        help="a folder URL serving the same files, tried first (repeatable)",
    )
    dget.set_defaults(fn=cmd_data_get)
    dlist = dsub.add_parser("list", help="every dataset: present (where), or how to get it")
    dlist.add_argument("--dir", help="the folder of datasets to look in (default: as data get)")
    dlist.set_defaults(fn=cmd_data_list)
