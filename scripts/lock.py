"""Compile requirements/*.txt, the locked dependency sets, from pyproject.toml with uv (`bash scripts/lock.sh`).

One universal resolution (Python >= 3.11 on Linux, macOS and Windows) of every extra together fixes each package's
version; each install set is then compiled under those pins, with hashes, so the set the tests ran is the set that
serves. torch is never locked (scripts/install.sh installs requirements/torch.in's release or keeps the torch it
finds, e.g. a CUDA build), and neither is any package that only torch needs: those go to requirements/torch.txt,
installed only with our own torch, so a kept torch keeps its own. torch's dependencies are read from its CPU build,
so no CUDA package is ever locked.

    python scripts/lock.py              keep every pin that pyproject.toml still allows (after editing it)
    python scripts/lock.py --upgrade    the newest release of everything, and today's date in the headers
"""

from __future__ import annotations

import argparse
import datetime
import glob
import os
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "requirements"
PYTHON = "3.11"  # the lowest Python pyproject.toml allows; the resolution is universal above it
# Where torch's CPU builds are listed (a flat page of wheels); a local folder with the wheel works too.
TORCH_PAGE = "https://download.pytorch.org/whl/torch/"
# What each set is for, in the lock's header.
PURPOSE = {
    "runtime": "the server and the training/evaluation CLIs (scripts/serve.sh, the Docker image)",
    "test": "the server plus the test suite's tools (scripts/test.sh, CI)",
    "bench": "the server plus the benchmarks' peers (bench/)",
    "import": "the server plus what nmt-import needs (sentencepiece, protobuf, huggingface-hub)",
}
# `name==version ; marker`, then maybe ` \` (hashes follow) or `  # via ...`
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)(?:\s*;\s*([^#\\]*?))?\s*\\?\s*(?:#.*)?$")
REFRESHED = re.compile(r"last refreshed to the newest releases on (\d{4}-\d{2}-\d{2})")


def uv(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "uv", "--quiet", "pip", "compile", *args], check=True, cwd=ROOT)


def pins(path: Path) -> list[tuple[str, str, str]]:
    """(name, version, marker) of each `name==version ; marker` line of a requirements file."""
    out = []
    for line in path.read_text().splitlines():
        if m := PIN.match(line.strip()):
            out.append((m.group(1).lower(), m.group(2), m.group(3) or ""))
    return out


def write_pins(path: Path, entries) -> Path:
    path.write_text("".join(f"{n}=={v}" + (f" ; {m}" if m else "") + "\n" for n, v, m in sorted(set(entries))))
    return path


def via(path: Path) -> dict[str, set[str]]:
    """Each package of an `--annotation-style line` resolution and what it is there for (packages or inputs)."""
    out: dict[str, set[str]] = {}
    for line in path.read_text().splitlines():
        if (m := PIN.match(line.strip())) and "# via " in line:
            out.setdefault(m.group(1).lower(), set()).update(s.strip() for s in line.split("# via ", 1)[1].split(","))
    return out


def only_for_torch(resolution: Path) -> set[str]:
    """The packages that are there only because torch needs them, directly or through each other."""
    parents = via(resolution)
    kept = {n for n, why in parents.items() if any("(pyproject.toml)" in w or w.startswith("-r ") for w in why)}
    kept.discard("torch")
    grew = True
    while grew:
        grew = False
        for name, why in parents.items():
            if name not in kept and name != "torch" and why & kept:
                kept.add(name)
                grew = True
    return set(parents) - kept - {"torch"}


def torch_source() -> list[str]:
    """uv's flag for torch's CPU wheel: a folder on pip's find-links that holds it (offline), else PyTorch's page."""
    version = torch_release()
    for folder in os.environ.get("PIP_FIND_LINKS", "").split():
        if glob.glob(os.path.join(folder, f"torch-{version}+cpu-*.whl")):
            return ["--find-links", folder]
    return ["--find-links", TORCH_PAGE]


def torch_release() -> str:
    (line,) = [x for x in (REQUIREMENTS / "torch.in").read_text().splitlines() if x.startswith("torch==")]
    return line.removeprefix("torch==").strip()


def refreshed_on(upgrade: bool) -> str:
    if upgrade:
        return datetime.date.today().isoformat()
    old = [m.group(1) for p in REQUIREMENTS.glob("*.txt") if (m := REFRESHED.search(p.read_text()))]
    return max(old) if old else datetime.date.today().isoformat()


def tidy(text: str, build: Path) -> str:
    """uv's annotations without this run's temporary files: the shared pins, and the build requirements by name."""
    text = re.sub(r"^ *# +-c \S+\n", "", text, flags=re.MULTILINE)
    text = text.replace(f"-r {build}", "build-system.requires (pyproject.toml)")
    return re.sub(r"    # via\n(?!    #   )", "", text)


def header(name: str, purpose: str, date: str) -> str:
    return (
        f"# nmt-serve's locked `{name}` set: {purpose}.\n"
        f"# Python >= {PYTHON} on Linux, macOS and Windows; installed by scripts/install.sh with pip --require-hashes.\n"
        f"# Made by `bash scripts/lock.sh` from pyproject.toml; last refreshed to the newest releases on {date}.\n"
        "# Do not edit: change pyproject.toml and run `bash scripts/lock.sh` (`--upgrade` to take new releases).\n"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upgrade", action="store_true", help="take the newest releases, not the pins in the locks")
    args = parser.parse_args(argv)

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = sorted(project["project"].get("optional-dependencies", {}))
    date = refreshed_on(args.upgrade)
    common = ["--universal", "--python-version", PYTHON, *torch_source(), "--no-header"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        # pip builds the project with its build requirements in the environment (--no-build-isolation), so they
        # are locked like the rest.
        build = tmp / "build.in"
        build.write_text("\n".join(project["build-system"]["requires"]) + "\n")
        torch_cpu = write_pins(tmp / "torch-cpu.txt", [("torch", f"{torch_release()}+cpu", "")])
        sources = ["pyproject.toml", str(build)]

        # 1. Every extra at once: the versions all sets share. The existing locks are its preferences.
        everything = tmp / "everything.txt"
        if not args.upgrade:
            write_pins(everything, [e for p in REQUIREMENTS.glob("*.txt") for e in pins(p)])
        flags = ["--upgrade"] if args.upgrade else []
        uv(*sources, *[f"--extra={e}" for e in extras], *common, "-c", str(torch_cpu), *flags, "-o", str(everything))
        shared = ["-c", str(torch_cpu), "-c", str(write_pins(tmp / "shared.txt", pins(everything)))]

        # 2. Each set under those pins, with hashes, without torch and what only torch needs.
        for name, extra in [("runtime", None), *[(e, e) for e in extras]]:
            chosen = [f"--extra={extra}"] if extra else []
            annotated = tmp / f"{name}.annotated.txt"
            uv(*sources, *chosen, *common, *shared, "--annotation-style", "line", "-o", str(annotated))
            leave_out = [
                "--no-emit-package=torch",
                *[f"--no-emit-package={p}" for p in sorted(only_for_torch(annotated))],
            ]
            out = tmp / f"{name}.txt"
            uv(*sources, *chosen, *common, *shared, *leave_out, "--generate-hashes", "-o", str(out))
            purpose = PURPOSE.get(name, f"the server plus the `{name}` extra")
            (REQUIREMENTS / f"{name}.txt").write_text(header(name, purpose, date) + tidy(out.read_text(), build))

        # 3. torch's own dependencies, for the torch that scripts/install.sh installs.
        out = tmp / "torch.txt"
        uv(
            str(REQUIREMENTS / "torch.in"),
            *common,
            *shared,
            "--no-emit-package=torch",
            "--generate-hashes",
            "-o",
            str(out),
        )
        purpose = f"what torch {torch_release()} needs, installed with it only when no torch is there yet"
        (REQUIREMENTS / "torch.txt").write_text(header("torch", purpose, date) + tidy(out.read_text(), build))
    print(f"requirements/: runtime, {', '.join(extras)} and torch locked (newest releases as of {date})")


if __name__ == "__main__":
    main()
