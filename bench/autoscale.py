"""What the HorizontalPodAutoscaler of deploy/k8s does on a traffic ramp: a discrete-event simulation of replicas fed
with one replica's measured capacity.

    python bench/load.py --src $D/test_2016_flickr.en.gz > load.txt            # one replica's capacity, measured
    python bench/autoscale.py --capacity load.txt --src $D/test_2016_flickr.en.gz --plot docs/autoscaling.png

A replica is a processor-sharing queue: with n requests in flight (waiting or decoding) it completes sentences at
X(n) per second, each of them progressing at X(n)/n, where X is what bench/load.py measured at concurrency n
(interpolated between its levels, flat past the largest: the running batch is full there and the rest wait). That is
what continuous batching does: every sequence in the batch advances one token a step, and a step of more rows takes
longer. A request's work is its sentence's length in words over the mean (drawn from --src), so long sentences take
longer, as they do. Requests arrive as a Poisson process whose rate ramps --ramp-factor x in --ramp-s seconds, and go
to a ready replica at random (kube-proxy's iptables mode); a replica with --max-queue in flight answers 429.

The autoscaler is Kubernetes' HPA (autoscaling/v2) with deploy/k8s's settings: every --sync-s it reads two per-pod
metrics as Prometheus last scraped them (every --scrape-s): the sequences in flight (nmt_queue_length +
nmt_running_batch_size; --target) and the sentences completed per second over --rate-window-s (deploy/k8s rates the
tokens; --rate-target). For each it asks for ceil(pods * average / target) replicas unless that is within its 10%
tolerance (pods without a value yet count as 0 when that scales up), and follows the higher; scaling up is limited to
doubling, or --up-pods more, per --up-period-s, scaling down to the highest recommendation of the last
--down-window-s and --down-pods per --down-period-s (the manifest's policies). A new pod
serves after --start-s (scheduling, an image already on the node, loading: nmt-serve is ready in about 2 s), at eager
speed (--eager-capacity, measured with bench/load.py --no-compile) for --compile-s more when its graphs are compiled
cold (0 where the packages come with the image or a shared cache: docs/scaling.md).

Prints per --window-s the arrivals, completions, 429s, p99 latency, replicas and the metric; with --plot draws them.
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import math
import random
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def read_capacity(path: str) -> list[tuple[int, float]]:
    """(concurrency, sentences/s) from bench/load.py's output: its last JSON line's levels."""
    lines = [line for line in Path(path).read_text().splitlines() if line.startswith("{")]
    if not lines:
        raise SystemExit(f"{path}: no JSON summary line (bench/load.py prints one last)")
    levels = json.loads(lines[-1]).get("levels") or []
    if not levels:
        raise SystemExit(f"{path}: the summary has no levels")
    return sorted((int(r["concurrency"]), float(r["sent_s"])) for r in levels)


class Capacity:
    """X(n): sentences/s a replica completes with n requests in flight, linear between the measured levels, through
    the origin below the first (one request alone: X(1)), flat past the last."""

    def __init__(self, levels: list[tuple[int, float]]):
        self.n = [0] + [c for c, _ in levels]
        self.x = [0.0] + [x for _, x in levels]

    def __call__(self, n: int) -> float:
        if n >= self.n[-1]:
            return self.x[-1]
        i = bisect.bisect_right(self.n, n)
        n0, n1, x0, x1 = self.n[i - 1], self.n[i], self.x[i - 1], self.x[i]
        return x0 + (x1 - x0) * (n - n0) / (n1 - n0)


@dataclass
class Replica:
    """One pod: a processor-sharing queue. Each request in flight holds its finish mark on the replica's virtual
    clock `v` (work done per request so far), which advances at X(n)/n per second."""

    ready_at: float
    compiled_at: float
    v: float = 0.0
    t: float = 0.0  # when v was last brought up to date
    flight: list = field(default_factory=list)  # heap of (finish mark, request id)
    done: int = 0  # requests completed (what nmt_generated_tokens counts, in sentences)
    scrapes: list = field(default_factory=list)  # (time, done) as Prometheus scraped them

    def rate(self, now: float, fast: Capacity, slow: Capacity) -> float:
        n = len(self.flight)
        return (fast if now >= self.compiled_at else slow)(n) / n if n else 0.0

    def advance(self, now: float, fast: Capacity, slow: Capacity) -> None:
        if self.flight:
            if self.t < self.compiled_at < now:  # the compiled graphs came in between: two rates
                self.v += (self.compiled_at - self.t) * self.rate(self.t, fast, slow)
                self.t = self.compiled_at
            self.v += (now - self.t) * self.rate(now, fast, slow)
        self.t = now

    def next_finish(self, now: float, fast: Capacity, slow: Capacity) -> float:
        if not self.flight:
            return math.inf
        when = now + max(0.0, self.flight[0][0] - self.v) / self.rate(now, fast, slow)
        return min(when, self.compiled_at) if now < self.compiled_at < when else when


@dataclass
class Options:
    base_rps: float = 150.0
    ramp_factor: float = 10.0
    ramp_start_s: float = 300.0
    ramp_s: float = 300.0
    hold_s: float = 600.0
    fall_s: float = 0.0  # then back down to base_rps in this long (0: not), and base_rps for tail_s
    tail_s: float = 600.0
    target: float = 12.0  # sequences in flight per pod (0: not a metric); deploy/k8s's
    rate_target: float = 190.0  # sentences/s per pod (0: not a metric), rate() over rate_window_s; deploy/k8s's 2,800
    # tokens/s at test2016's 14.8 tokens a sentence
    rate_window_s: float = 60.0
    min_replicas: int = 2
    max_replicas: int = 20
    sync_s: float = 15.0
    scrape_s: float = 15.0
    tolerance: float = 0.1
    up_period_s: float = 30.0  # scale-up policies: at most doubling, or up_pods more, per up_period_s
    up_pods: int = 2
    down_window_s: float = 300.0  # scale-down stabilization: the highest recommendation of this window
    down_period_s: float = 60.0  # scale-down policy: at most down_pods fewer per down_period_s
    down_pods: int = 1
    start_s: float = 15.0
    compile_s: float = 0.0
    max_queue: int = 256
    window_s: float = 10.0
    seed: int = 0

    def rate(self, t: float) -> float:
        """Requests per second at t: base, a linear ramp to base x factor, held; then (fall_s) back down to base."""
        ramp = min(max((t - self.ramp_start_s) / self.ramp_s, 0.0), 1.0)
        if self.fall_s:
            ramp -= min(max((t - self.ramp_start_s - self.ramp_s - self.hold_s) / self.fall_s, 0.0), 1.0)
        return self.base_rps * (1 + (self.ramp_factor - 1) * ramp)

    @property
    def end_s(self) -> float:
        return self.ramp_start_s + self.ramp_s + self.hold_s + (self.fall_s + self.tail_s if self.fall_s else 0.0)


def simulate(opt: Options, fast: Capacity, slow: Capacity, sizes: list[float]) -> list[dict]:
    """Run the ramp; one row per window: time, offered rate, arrivals, completions, 429s, p50/p99 latency of the
    completions, replicas asked for and ready, the mean in-flight per ready pod and the metric the HPA last saw."""
    rng = random.Random(opt.seed)
    pods = [Replica(0.0, 0.0) for _ in range(opt.min_replicas)]  # the minimum is up and compiled when traffic starts
    arrived_at: dict[int, float] = {}
    desired, history, changes = opt.min_replicas, [(0.0, opt.min_replicas)], [(0.0, opt.min_replicas)]
    seen, seen_rate, scraped = 0.0, 0.0, [0] * opt.min_replicas
    max_rate = opt.base_rps * max(opt.ramp_factor, 1.0)
    next_arrival = rng.expovariate(max_rate)  # thinning: candidates at the peak rate, kept with rate(t)/peak
    next_sync, next_scrape, next_window = opt.sync_s, opt.scrape_s, opt.window_s
    rows, window, rid, now = [], {"arrivals": 0, "done": 0, "rejected": 0, "latencies": []}, 0, 0.0

    def ready(t: float) -> list[Replica]:
        return [p for p in pods if p.ready_at <= t]

    while now < opt.end_s:
        finishes = [(p.next_finish(now, fast, slow), i) for i, p in enumerate(pods)]
        finish, who = min(finishes) if finishes else (math.inf, -1)
        now = min(next_arrival, finish, next_sync, next_scrape, next_window, opt.end_s)
        for p in pods:
            p.advance(now, fast, slow)
        if now == finish:
            p = pods[who]
            while p.flight and p.flight[0][0] <= p.v + 1e-9:  # a few ulps of v: the clock cannot resolve less
                _, done = heapq.heappop(p.flight)
                p.done += 1
                window["done"] += 1
                window["latencies"].append(now - arrived_at.pop(done))
        elif now == next_arrival:
            next_arrival = now + rng.expovariate(max_rate)
            if rng.random() < opt.rate(now) / max_rate:
                window["arrivals"] += 1
                up = ready(now)
                pod = up[rng.randrange(len(up))] if up else None
                if pod is None or len(pod.flight) >= opt.max_queue:
                    window["rejected"] += 1
                else:
                    rid += 1
                    arrived_at[rid] = now
                    heapq.heappush(pod.flight, (pod.v + rng.choice(sizes), rid))
        elif now == next_scrape:  # Prometheus reads every pod's gauges
            next_scrape += opt.scrape_s
            scraped = [len(p.flight) for p in ready(now)]
            for p in ready(now):
                p.scrapes = [x for x in p.scrapes if x[0] >= now - opt.rate_window_s] + [(now, p.done)]
        elif now == next_sync:  # the HPA's control loop
            next_sync += opt.sync_s
            active = [p for p in pods if p.ready_at < math.inf]  # the Deployment's pods, starting ones included
            up = ready(now)
            rates = [(p.scrapes[-1][1] - p.scrapes[0][1]) / (p.scrapes[-1][0] - p.scrapes[0][0])
                     for p in up if len(p.scrapes) > 1]  # fmt: skip
            seen = sum(scraped) / len(scraped) if scraped else 0.0
            seen_rate = sum(rates) / len(rates) if rates else 0.0
            # per metric, the replicas it asks for: the pods without a value yet (starting) count as 0 when that
            # scales up, as the HPA counts them; within the tolerance, the current count; the highest of the metrics
            wants = []
            for values, target in ((scraped, opt.target), (rates, opt.rate_target)):
                if target and values:
                    ratio = sum(values) / target
                    scale = ratio / len(active) if ratio > len(values) else ratio / len(values)
                    wants.append(len(active) if abs(scale - 1) <= opt.tolerance else math.ceil(len(active) * scale))
            want = min(max(max(wants, default=len(active)), opt.min_replicas), opt.max_replicas)
            history.append((now, want))
            if want > len(active):  # scale up: at most doubling, or up_pods more, since up_period_s ago
                then = max((n for t, n in changes if t <= now - opt.up_period_s), default=len(active))
                then = min(then, len(active))
                want = min(want, max(2 * then, then + opt.up_pods))
                if want > len(active):
                    pods += [Replica(now + opt.start_s, now + opt.start_s + opt.compile_s)
                             for _ in range(want - len(active))]  # fmt: skip
            else:  # scale down: to the highest recommendation of the window, at most down_pods per down_period_s
                keep = max(w for t, w in history if t > now - opt.down_window_s)
                then = max((n for t, n in changes if t > now - opt.down_period_s), default=len(active))
                keep = max(keep, then - opt.down_pods, opt.min_replicas)
                if keep < len(active):  # starting pods first, then those with the least in flight
                    for p in sorted(active, key=lambda p: (p.ready_at <= now, len(p.flight)))[: len(active) - keep]:
                        p.ready_at = math.inf  # out of the endpoints: takes nothing new, drains what it holds
            pods = [p for p in pods if p.ready_at < math.inf or p.flight]
            desired = sum(p.ready_at < math.inf for p in pods)
            changes.append((now, desired))
        elif now == next_window:
            next_window += opt.window_s
            lat = sorted(window["latencies"])
            up = ready(now)
            rows.append({
                "t": round(now, 1), "offered_rps": round(opt.rate(now), 1),
                "arrivals_rps": round(window["arrivals"] / opt.window_s, 1),
                "done_rps": round(window["done"] / opt.window_s, 1), "rejected": window["rejected"],
                "mean_ms": round(1000 * statistics.fmean(lat), 1) if lat else None,
                "p50_ms": round(1000 * lat[len(lat) // 2], 1) if lat else None,
                "p99_ms": round(1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1) if lat else None,
                "desired": desired, "ready": len(up), "in_flight_per_pod": round(
                    sum(len(p.flight) for p in up) / len(up), 1) if up else 0.0, "metric_seen": round(seen, 1),
                "rate_seen": round(seen_rate, 1),
            })  # fmt: skip
            window = {"arrivals": 0, "done": 0, "rejected": 0, "latencies": []}
    return rows


def plot(rows: list[dict], opt: Options, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    minutes = [r["t"] / 60 for r in rows]
    fig, ax = plt.subplots(4, 1, figsize=(8, 9), sharex=True, constrained_layout=True)
    ax[0].plot(minutes, [r["offered_rps"] for r in rows], label="offered")
    ax[0].plot(minutes, [r["done_rps"] for r in rows], label="answered")
    ax[0].set_ylabel("requests/s")
    ax[0].legend(loc="upper left")
    ax[1].step(minutes, [r["desired"] for r in rows], where="post", label="asked for")
    ax[1].step(minutes, [r["ready"] for r in rows], where="post", label="ready")
    ax[1].set_ylabel("replicas")
    ax[1].legend(loc="upper left")
    ax[2].plot(minutes, [r["in_flight_per_pod"] for r in rows], label="in flight per ready pod")
    ax[2].plot(minutes, [r["metric_seen"] for r in rows], label="what the HPA saw")
    ax[2].axhline(opt.target, color="gray", linestyle=":", label=f"target {opt.target:g}")
    ax[2].set_ylabel("sequences")
    ax[2].legend(loc="upper left")
    ax[3].plot(minutes, [r["p99_ms"] for r in rows], label="p99 latency (ms)")
    rejected = [r["rejected"] for r in rows]
    if any(rejected):
        ax[3].bar(minutes, rejected, width=opt.window_s / 60, color="tab:red", alpha=0.5, label="429s per window")
    ax[3].set_ylabel("ms / count")
    ax[3].set_xlabel("minutes")
    ax[3].legend(loc="upper left")
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--capacity", required=True, help="bench/load.py's output (its last JSON line) for one replica")
    p.add_argument("--eager-capacity", help="bench/load.py --no-compile's output: a cold pod's speed while compiling")
    p.add_argument("--src", required=True, help="sentences whose lengths in words are the requests' work")
    d = Options()
    for name, value in vars(d).items():
        p.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    p.add_argument("--plot", help="draw the run into this image (needs matplotlib: the bench extra)")
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args(argv)
    opt = Options(**{k: getattr(args, k) for k in vars(d)})
    fast = Capacity(read_capacity(args.capacity))
    slow = Capacity(read_capacity(args.eager_capacity)) if args.eager_capacity else fast
    if opt.compile_s and not args.eager_capacity:
        p.error("--compile-s needs --eager-capacity: the speed a pod serves at while it compiles")
    from model.tokenizer import read_lines

    words = [len(s.split()) for s in read_lines(args.src) if s.strip()]
    mean = statistics.fmean(words)
    rows = simulate(opt, fast, slow, [w / mean for w in words])
    print(f"capacity of one replica (sentences/s by concurrency): {list(zip(fast.n[1:], fast.x[1:], strict=True))}")
    print(f"{'t s':>6} {'offered':>8} {'answered':>9} {'429':>5} {'p50 ms':>8} {'p99 ms':>8} {'asked':>6} {'ready':>6} "
          f"{'in flight/pod':>14} {'HPA saw':>8}")  # fmt: skip
    for r in rows:
        print(f"{r['t']:>6.0f} {r['offered_rps']:>8.1f} {r['done_rps']:>9.1f} {r['rejected']:>5} {r['p50_ms'] or 0:>8.1f} "
              f"{r['p99_ms'] or 0:>8.1f} {r['desired']:>6} {r['ready']:>6} {r['in_flight_per_pod']:>14.1f} "
              f"{r['metric_seen']:>8.1f}")  # fmt: skip
    ramp = [r for r in rows if opt.ramp_start_s <= r["t"]]
    worst = max((r["p99_ms"] or 0 for r in ramp), default=0)
    top = opt.ramp_start_s + opt.ramp_s
    steady = [r for r in rows if top + opt.down_window_s / 2 <= r["t"] <= top + opt.hold_s]
    summary = {
        "rejected": sum(r["rejected"] for r in rows), "requests": sum(r["arrivals_rps"] * opt.window_s for r in rows),
        "worst_p99_ms_from_the_ramp_on": worst, "max_replicas": max(r["desired"] for r in rows),
        "p99_ms_at_the_top": round(statistics.median(r["p99_ms"] for r in steady if r["p99_ms"]), 1) if steady else None,
        "replica_changes": sum(a["desired"] != b["desired"] for a, b in zip(rows, rows[1:])),
        "replica_seconds": sum(r["desired"] * opt.window_s for r in rows),
    }  # fmt: skip
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"options": vars(opt), "rows": rows, "summary": summary}, indent=1))
    if args.plot:
        plot(rows, opt, args.plot, f"{opt.base_rps:g} -> {opt.base_rps * opt.ramp_factor:g} requests/s in "
             f"{opt.ramp_s / 60:g} min; HPA targets {opt.target:g} in flight and {opt.rate_target:g} sentences/s a pod; "
             f"start {opt.start_s:g} s, "
             f"compile {opt.compile_s:g} s")  # fmt: skip


if __name__ == "__main__":
    main()
