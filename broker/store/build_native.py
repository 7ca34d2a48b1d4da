"""Builds broker/store/index_native (the message index's per-key work in C, ``index_native.c``) in place with the
compiler and flags this Python was built with; ``make`` runs it. Without a compiler the index keeps its
pure-Python path (``index_keys.native`` is None), so a failed build is reported and exits 1, never half-written.

``python -m broker.store.build_native``
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "index_native.c"


def target() -> Path:
    return HERE / ("index_native" + sysconfig.get_config_var("EXT_SUFFIX"))


def build() -> Path:
    cfg = sysconfig.get_config_vars()
    cc = shlex.split(cfg.get("CC") or "cc")
    flags = ["-O2", "-fPIC", "-shared", "-Wall", "-Werror", f"-I{sysconfig.get_paths()['include']}"]
    out = target()
    with tempfile.TemporaryDirectory(dir=HERE) as tmp:
        built = Path(tmp) / out.name
        subprocess.run([*cc, *flags, str(SOURCE), "-o", str(built)], check=True)
        built.replace(out)  # atomic: an import never sees a half-written file
    return out


def main() -> None:
    try:
        out = build()
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"building {SOURCE.name} failed ({exc}); the message index uses its pure-Python path", file=sys.stderr)
        sys.exit(1)
    print(f"built {out}")


if __name__ == "__main__":
    main()
