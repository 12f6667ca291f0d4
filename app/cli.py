"""nmt-serve: run the translation service with uvicorn. Flags override NMT_* environment variables."""

from __future__ import annotations

import argparse
import sys
from typing import get_args

from pydantic import ValidationError

from app.server import STOP_GRACE_S, configure_logging, serve
from app.settings import Dtype, LogLevel, Settings
from app.workers import serve_workers

__all__ = ["STOP_GRACE_S", "main", "parse_args", "run_precompile"]


def parse_args(argv: list[str] | None) -> dict:
    p = argparse.ArgumentParser(prog="nmt-serve", description=__doc__)
    p.add_argument(
        "--model-dir", help="checkpoint directory, the one model served (NMT_MODELS ignored; default: the bundled "
        "checkpoints/multi30k-en-de)",
    )  # fmt: skip
    p.add_argument("--host", help="address to bind (default 127.0.0.1; 0.0.0.0 for all interfaces)")
    p.add_argument("--port", type=int, help="port (default 8000)")
    p.add_argument("--device", help="auto (default), cpu, cuda or cuda:N")
    p.add_argument("--dtype", choices=get_args(Dtype), help="float32 (default); half types need CUDA")
    p.add_argument("--log-level", choices=get_args(LogLevel), help="default info")
    p.add_argument("--workers", type=int, help="server processes sharing the port (default 1; Linux)")
    p.add_argument("--frontends", type=int, help="HTTP front-end processes apart from one engine process (Linux)")
    p.add_argument(
        "--precompile", action="store_true",
        help="compile the graphs these settings serve with into NMT_COMPILE_CACHE_DIR (or load them to check), then "
        "exit without serving: a later start loads them in seconds",
    )  # fmt: skip
    return {k: v for k, v in vars(p.parse_args(argv)).items() if v is not None}


def main(argv: list[str] | None = None) -> None:
    # here, not at the top: an NMT_FRONTENDS front-end, spawned, imports this module again as its __main__'s, and a
    # front-end never imports torch
    from app.engine.device import resolve_device

    args = parse_args(argv)
    precompile = args.pop("precompile", False)
    if "model_dir" in args:  # the flag overrides NMT_MODELS as well as NMT_MODEL_DIR: it names the one model
        args["models"] = None
    try:
        settings = Settings(**args)
        resolve_device(settings.device, settings.dtype)
    except ValidationError as e:
        sys.exit(f"nmt-serve: {invalid(e)}")
    except ValueError as e:
        sys.exit(f"nmt-serve: {e}")
    configure_logging(settings)
    if precompile:
        sys.exit(run_precompile(settings))
    if settings.frontends:
        from app.frontends import serve_frontends

        sys.exit(serve_frontends(settings))
    if settings.workers > 1:
        sys.exit(serve_workers(settings))
    sys.exit(serve(settings))


def invalid(e: ValidationError) -> str:
    """The settings a ValidationError refused, each by its NMT_* name, value and what is allowed, one a line
    (pydantic's own text names the field, dumps every setting for a rule between two, and adds a link)."""
    said = []
    for error in e.errors():
        why = error["msg"].removeprefix("Value error, ")
        if error["loc"]:
            name = f"NMT_{str(error['loc'][0]).upper()}"
            shown = repr(error["input"]) if len(repr(error["input"])) <= 60 else repr(error["input"])[:57] + "..."
            said.append(f"{name}={shown}: {why}")
        else:
            said.append(why)
    return "; ".join(said)


def run_precompile(settings: Settings) -> int:
    """nmt-serve --precompile: each engine the server would build, its graphs compiled into the package directory."""
    import torch

    from app.loading import load_engine
    from app.models import threads_each
    from model.checkpoint import CheckpointError

    threads = threads_each(settings, torch.get_num_threads())  # as the server shares the cores out
    for name, directory in settings.model_dirs().items():
        try:
            engine = load_engine(settings, model_dir=directory, name=name or None, threads=threads)
        except (CheckpointError, OSError, ValueError) as e:
            print(f"nmt-serve: could not load the model from {directory}: {e}", file=sys.stderr)
            return 1
        if engine.core.graphs_at_start:
            print("nmt-serve: nothing to precompile on CUDA: the decoder step's CUDA graphs are captured at start-up, "
                  "in seconds")  # fmt: skip
            return 0
        graphs = engine.core.precompile()
        print(
            f"nmt-serve: {engine.name}: {len(graphs.built)} graphs compiled and {len(graphs.loaded)} already there, "
            f"in {graphs.seconds:.0f} s{f' ({graphs.jobs} at once)' if graphs.jobs > 1 else ''}, in {graphs.directory}"
        )
    return 0


if __name__ == "__main__":
    main()
