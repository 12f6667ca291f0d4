"""The per-request ceiling (#60): one-sentence requests to a tiny model, where decoding is nearly free, answered by one
process and by HTTP front-ends apart from one engine (NMT_FRONTENDS), side by side in one run.

    python bench/ceiling.py [--frontends 0,1,2,4] [--concurrency 32] [--requests 3000] [--rounds 3] [--client-procs 2]

Writes a tiny random model (the tests' shape: d_model 32, 2+2 layers, a tokenizer trained on tests/synthetic.py's
sentences) to a temporary checkpoint directory and starts an eager server on it for each --frontends count (0: one
process, the default; N: one engine process and N front-ends), every output capped at --max-new-tokens tokens (the
random weights never end a sentence sooner; each token is an eager decoder step, and at 8 tokens the engine spent
more CPU a request than the front-end did on its HTTP and text work). Each server is warmed with --warmup requests;
then every round drives each server in turn with --requests one-sentence /translate requests, --concurrency in
flight, from --client-procs client processes (bench/load.py's drive_in), so that drift falls on all alike.

Prints the CPU, then per server: requests/s (median of the rounds) and its ratio to the first count's (0, one process:
the median of the rounds' ratios), p50/p99 latency (medians of the rounds'), and the CPU microseconds a request cost
over all rounds, from /proc: the front-ends' processes together and the engine process (in one process: its event
loop thread, where a short request's HTTP and text work runs, and its other threads, the batcher's), the engine's
event loop apart, the supervising parent's (with multiprocessing's resource tracker) and the client's. Last, a JSON
line of it all.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench.common import cpu_description
from bench.load import cpu_seconds, drive_in
from bench.server import Server, eager_server
from tests.synthetic import synthetic_pairs

TINY = dict(d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=64, dropout=0.0, max_positions=512)


def write_tiny_model(directory: Path) -> str:
    """A servable checkpoint of seeded random weights in `directory`; what it is, in words."""
    import torch

    from model.checkpoint import save_checkpoint
    from model.tokenizer import Tokenizer
    from model.transformer import Transformer, TransformerConfig

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tok = Tokenizer.train([s for p in synthetic_pairs(400, seed=0) for s in p], vocab_size=600, min_frequency=1)
    config = TransformerConfig(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size, **TINY)
    save_checkpoint(directory, Transformer(config).eval(), tok, {"name": "tiny", "note": "random weights, bench"})
    layers = f"{config.n_encoder_layers}+{config.n_decoder_layers}"
    return f"d_model {config.d_model}, {layers} layers, vocab {tok.vocab_size}"


def processes(server: Server, frontends: int) -> dict[str, list[int]]:
    """The server's processes by role: `front` (each front-end answers /info with its pid; fresh connections until all
    have, as the kernel spreads them), `engine` (the parent's other child) and `parent` (the supervisor and
    multiprocessing's resource tracker). One process (frontends 0): `single`."""
    pid = server.proc.pid
    if frontends == 0:
        return {"single": [pid]}
    fronts: set[int] = set()
    for _ in range(200):
        if len(fronts) == frontends:
            break
        fronts.add(httpx.get(f"{server.base}/info", timeout=10).json()["worker"]["pid"])
    children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    helpers = [c for c in children if b"resource_tracker" in Path(f"/proc/{c}/cmdline").read_bytes()]
    engine = [c for c in children if c not in fronts and c not in helpers]
    if len(fronts) != frontends or len(engine) != 1:
        sys.exit(f"frontends {frontends}: found front-ends {sorted(fronts)} and engine {engine} among the children "
                 f"{children} of {pid}; expected {frontends} front-ends and one engine")  # fmt: skip
    return {"front": sorted(fronts), "engine": engine, "parent": [pid, *helpers]}


def cpu_now(roles: dict[str, list[int]]) -> dict[str, float]:
    """CPU seconds so far by role, the engine's event loop (its main thread) apart; in one process its event loop
    counts as the front-end and its other threads as the engine."""
    if "single" in roles:
        c = cpu_seconds(roles["single"][0])
        return {"front": c["loop_cpu_s"], "engine": c["cpu_s"] - c["loop_cpu_s"]}
    engine = cpu_seconds(roles["engine"][0])
    out = {role: sum(cpu_seconds(p)["cpu_s"] for p in roles[role]) for role in ("front", "parent")}
    return {**out, "engine": engine["cpu_s"], "engine_loop": engine["loop_cpu_s"]}


def client_cpu() -> float:
    """CPU seconds of this process and of its ended children (drive_in's client processes; the servers never end
    during a run)."""
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(r.ru_utime + r.ru_stime for r in used)


def one_turn(server: Server, roles: dict, sentences: list[str], args: argparse.Namespace) -> dict:
    """The server driven once with all the sentences; its row and the CPU seconds spent, by role."""
    before, client = cpu_now(roles), client_cpu()
    row = drive_in(server.base, sentences, args.concurrency, "raw", args.client_procs)
    after, client = cpu_now(roles), client_cpu() - client
    return {**row, "cpu": {**{k: after[k] - before[k] for k in after}, "client": client}}


def summary(frontends: int, turns: list[dict], first: list[dict]) -> dict:
    """One server's line over the rounds; `first`: the first count's turns, for the ratio."""
    requests = sum(t["sentences"] for t in turns)
    wall = sum(t["span"][1] - t["span"][0] for t in turns)
    cpu = {k: sum(t["cpu"][k] for t in turns) for k in turns[0]["cpu"]}
    server = sum(v for k, v in cpu.items() if k not in ("client", "engine_loop"))
    return {
        "frontends": frontends,
        "req_s": round(statistics.median(t["sent_s"] for t in turns), 1),
        "req_s_rounds": [t["sent_s"] for t in turns],
        "over_first": round(statistics.median(t["sent_s"] / f["sent_s"] for t, f in zip(turns, first, strict=True)), 2),
        "p50_ms": round(statistics.median(t["p50_ms"] for t in turns), 1),
        "p99_ms": round(statistics.median(t["p99_ms"] for t in turns), 1),
        "us_per_request": {k: round(1e6 * v / requests) for k, v in cpu.items()},
        "cores": {"server": round(server / wall, 2), "client": round(cpu["client"] / wall, 2)},
        "errors": sum(t["errors"] for t in turns),
    }


def line(r: dict) -> str:
    us, name = r["us_per_request"], "one process" if r["frontends"] == 0 else f"{r['frontends']} front-ends"
    parts = f"front-end {us['front']}, engine {us['engine']}"
    if "parent" in us:
        parts += f" (its loop {us['engine_loop']}), parent {us['parent']}"
    return (f"{name:>13}: {r['req_s']:>7} req/s {r['over_first']:>5}x | p50 {r['p50_ms']:>6} ms p99 {r['p99_ms']:>6} ms"
            f" | us/request: {parts}; client {us['client']} | cores: server {r['cores']['server']}, client "
            f"{r['cores']['client']} | errors {r['errors']}")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frontends", default="0,1,2,4", help="NMT_FRONTENDS of each server, 0 = one process; the "
                   "ratios are to the first")  # fmt: skip
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight")
    p.add_argument("--requests", type=int, default=3000, help="requests to each server a round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=300, help="requests to each server before the rounds")
    p.add_argument("--client-procs", type=int, default=2, help="client processes sharing the connections")
    p.add_argument("--max-new-tokens", type=int, default=2, help="output tokens a sentence (NMT_MAX_NEW_TOKENS), "
                   "each a decoder step of the engine's: fewer leave more of a request's cost to HTTP")  # fmt: skip
    p.add_argument("--threads", type=int, default=1, help="the engine's torch threads")
    args = p.parse_args()
    counts = [int(x) for x in args.frontends.split(",")]
    if min(counts) < 0 or len(set(counts)) < len(counts):
        p.error(f"--frontends {args.frontends}: counts of front-ends, each 0 (one process) or more, none twice")
    cpu = cpu_description()
    print(f"CPU: {cpu}", flush=True)
    sentences = [en for en, _ in synthetic_pairs(args.requests, seed=1)]
    with tempfile.TemporaryDirectory(prefix="nmt-ceiling-") as folder, ExitStack() as stack:
        model = write_tiny_model(Path(folder))
        print(f"tiny random model: {model}; at most {args.max_new_tokens} output tokens a sentence, eager, "
              f"{args.threads} thread(s)", flush=True)  # fmt: skip
        servers = []
        for n in counts:  # each front-end admits its share of the queue: room for all in flight at any one
            queue = max(256, max(n, 1) * args.concurrency)
            server = stack.enter_context(eager_server(
                folder, args.threads, NMT_FRONTENDS=str(n), NMT_MAX_NEW_TOKENS=str(args.max_new_tokens),
                NMT_MAX_QUEUE=str(queue),
            ))  # fmt: skip
            drive_in(server.base, sentences[: args.warmup], args.concurrency, "raw", args.client_procs)
            servers.append((n, server, processes(server, n)))
        turns: dict[int, list[dict]] = {n: [] for n in counts}
        for round_ in range(args.rounds):
            for n, server, roles in servers:
                turns[n].append(one_turn(server, roles, sentences, args))
            print(f"round {round_ + 1}: " + ", ".join(f"frontends {n} {t[-1]['sent_s']} req/s"
                                                      for n, t in turns.items()), flush=True)  # fmt: skip
    results = [summary(n, turns[n], turns[counts[0]]) for n in counts]
    for r in results:
        print(line(r), flush=True)
    print(json.dumps({
        "cpu": cpu, "model": model, "max_new_tokens": args.max_new_tokens, "threads": args.threads,
        "concurrency": args.concurrency, "requests": args.requests, "rounds": args.rounds,
        "client_procs": args.client_procs, "ratio_to_frontends": counts[0], "results": results,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
