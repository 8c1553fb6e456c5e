"""Download the raw files of one query-set source (resumable, checksum-verified): an alias of `editmeter data`.

    python scripts/tools/download.py gqa_hatie|hatie|editval|magicbrush [--only FILE ...]

Files land in datasets/<set>/downloads/ (git-ignored). The command that builds the query set afterwards is printed.
"""

import sys

from benchmark.commands.cli import main

if __name__ == "__main__":
    sys.exit(main(["data", *sys.argv[1:]]))
