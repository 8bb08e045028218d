"""The model gateway, measured: one budget for 16 SDK processes, retries they never see, a rerun
served from the cache, streams relayed as they arrive, and the gateway's own speed.

Every client is an official SDK (`anthropic` and `openai`, half of them streaming) with its own
retries turned off (`max_retries=0`), so anything the gateway lets through would surface.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import statistics
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import multiprocess as mp

from bench.common import WORK, table
from runner.config import Config, Faults, Latency, Limits, SimSettings
from runner.gateway import gateway_settings
from runner.gateway.process import GatewayServer
from runner.models.sim.process import SimServer

MODELS = {"anthropic": "claude-sonnet-5-5", "openai": "gpt-5.4"}


def _config(rate_limits: dict[str, Any], *, cache: bool, tag: str) -> Config:
    return Config.model_validate({
        "dataset": "unused.jsonl", "harness": {"kind": "python", "entrypoint": "unused:unused"},
        "runs": [{"name": "bench"}], "rate_limits": rate_limits, "cache": cache,
        "cache_dir": str(WORK / f"gateway-cache-{tag}"),
        "retry": {"max_attempts": 20, "base_seconds": 0.1, "max_backoff_seconds": 2, "total_cap_seconds": 120}})


TOKEN = "bench-gateway-token"


@contextlib.contextmanager
def _gateway(cfg: Config, sim: str) -> Iterator[GatewayServer]:
    WORK.mkdir(parents=True, exist_ok=True)  # its log lives there: the first bench step of a fresh machine
    with GatewayServer(gateway_settings(cfg, sim_url=sim), TOKEN, log_path=str(WORK / "gateway-bench.log")) as gw:
        yield gw


def _client(i: int, gw: str, calls: int, stop_at: Any, ready: Any, go: Any, out: Any) -> None:
    """One process: an SDK client of its own, `calls` requests or until `stop_at`, counting what it sees."""
    import anthropic
    import openai

    provider = "anthropic" if i % 2 == 0 else "openai"
    stream = i % 4 >= 2
    base = f"{gw}/run/bench/worker/{i}"
    a = anthropic.Anthropic(api_key=TOKEN, base_url=base, max_retries=0, timeout=120)
    o = openai.OpenAI(api_key=TOKEN, base_url=f"{base}/v1", max_retries=0, timeout=120)
    seen: dict[str, int] = {"calls": 0, "errors": 0, "429": 0}
    # A first call before the start: an SDK's first request costs ~1 s of CPU (lazy imports, types),
    # which in 16 processes on 2 cores would otherwise eat the warm-up.
    a.messages.create(model=MODELS["anthropic"], max_tokens=10, messages=[{"role": "user", "content": f"hi {i}"}])
    o.chat.completions.create(model=MODELS["openai"], messages=[{"role": "user", "content": f"hi {i}"}])
    ready.put(1)
    go.wait()
    n = 0
    while n < calls if calls else time.time() < stop_at.value:
        msgs: Any = [{"role": "user", "content": f"Find the account number {i}-{n}"}]
        n += 1
        seen["calls"] += 1
        try:
            if provider == "anthropic" and stream:
                with a.messages.stream(model=MODELS[provider], max_tokens=100, messages=msgs) as s:
                    s.get_final_message()
            elif provider == "anthropic":
                a.messages.create(model=MODELS[provider], max_tokens=100, messages=msgs)
            else:
                r = o.chat.completions.create(model=MODELS[provider], messages=msgs, stream=stream)
                if stream:
                    list(r)
        except (anthropic.APIStatusError, openai.APIStatusError) as e:
            seen["errors"] += 1
            seen["429"] += e.status_code == 429
        except (anthropic.APIError, openai.APIError):
            seen["errors"] += 1
    out.put(seen)


def _load(gw: str, procs: int, *, calls: int = 0, warmup: float = 0, window: float = 0,
          sim: SimServer | None = None) -> dict[str, Any]:
    """`procs` client processes; with a window, what the simulator served in it after `warmup`."""
    ctx = mp.get_context("spawn")
    ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
    stop_at = ctx.Value("d", 1e18)
    ps = [ctx.Process(target=_client, args=(i, gw, calls, stop_at, ready, go, out)) for i in range(procs)]
    for p in ps:
        p.start()
    for _ in ps:
        ready.get(timeout=180)  # every process imported its SDKs and built its clients
    served: dict[str, int] = {}
    t0 = time.time()
    stop_at.value = t0 + warmup + window
    go.set()
    if window and sim is not None:
        time.sleep(warmup)
        a = sim.stats()
        time.sleep(window)
        b = sim.stats()
        served = {k: int(b.get(k, 0)) - int(a.get(k, 0)) for k in ("ok", "429", "requests")}  # type: ignore[call-overload]
    seen = {"calls": 0, "errors": 0, "429": 0}
    for _ in ps:
        for k, v in out.get(timeout=600).items():
            seen[k] += v
    for p in ps:
        p.join(30)
    return {"clients": seen, "served": served, "seconds": time.time() - t0}


def budget(procs: int, rpm: float, warmup: float, window: float) -> dict[str, Any]:
    """16 processes, half Anthropic and half OpenAI, against one simulator limited to `rpm` in all;
    the gateway's budget: rpm/2 per provider."""
    half = {"rpm": rpm / 2}
    sim_settings = SimSettings(latency=Latency(p50_ms=50), limits={"sim-strong": Limits(rpm=rpm)})
    with SimServer(sim_settings) as sim, \
            _gateway(_config({"anthropic": half, "openai": half}, cache=False, tag="budget"), sim.url) as gw:
        r = _load(gw.url, procs, warmup=warmup, window=window, sim=sim)
        upstream = gw.stats().get("bench", {})
    served_rpm = r["served"]["ok"] / window * 60
    c = r["clients"]
    return {"procs": procs, "rpm": rpm, "warmup": warmup, "window": window, "served_rpm": served_rpm,
            "share_of_limit": served_rpm / rpm, "client_calls": c["calls"], "client_429s": c["429"],
            "client_errors": c["errors"], "upstream_429s": upstream.get("rate_limited", 0),
            "met": 0.95 <= served_rpm / rpm <= 1.05 and c["429"] <= 0.01 * c["calls"]}


def faults(procs: int, calls: int) -> dict[str, Any]:
    """30 % of upstream answers 500 or 529: what the clients see; then the same job again, from the cache."""
    sim_settings = SimSettings(latency=Latency(p50_ms=20), faults=Faults(http_500=0.15, overloaded=0.15))
    tag = f"faults-{time.time_ns()}"
    with SimServer(sim_settings) as sim, _gateway(_config({}, cache=True, tag=tag), sim.url) as gw:
        first = _load(gw.url, procs, calls=calls)
        before = sim.stats()
        second = _load(gw.url, procs, calls=calls)
        after = sim.stats()
        counts = gw.stats().get("bench", {})
    return {"procs": procs, "calls": procs * calls, "first_errors": first["clients"]["errors"],
            "retries": counts.get("retries", 0), "upstream_requests": int(before.get("requests", 0)),  # type: ignore[call-overload]
            "second_errors": second["clients"]["errors"],
            "second_upstream": int(after.get("requests", 0)) - int(before.get("requests", 0)),  # type: ignore[call-overload]
            "met": first["clients"]["errors"] == 0 and second["clients"]["errors"] == 0
            and int(after.get("requests", 0)) == int(before.get("requests", 0))}  # type: ignore[call-overload]


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _connection(url: str) -> tuple[http.client.HTTPConnection, str]:
    """A kept-alive stdlib connection and the path prefix (no third-party HTTP client to measure)."""
    u = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port, timeout=60), u.path.rstrip("/")


def _first_bytes(url: str, n: int, tag: str, model: str) -> list[tuple[float, float]]:
    """(first byte, last byte) seconds after sending, for `n` streamed Anthropic calls to `url`."""
    conn, prefix = _connection(url)
    # the run's token: the gateway serves its run only (the simulator takes any key)
    headers = {"x-api-key": TOKEN, "anthropic-version": "2023-06-01", "content-type": "application/json",
               "x-sim-plays": MODELS["anthropic"]}
    times = []
    try:
        for k in range(n):
            body = {"model": model, "max_tokens": 100, "stream": True,
                    "messages": [{"role": "user", "content": f"Say hello, {tag} {k}"}]}
            t0 = time.perf_counter()
            first = 0.0
            conn.request("POST", f"{prefix}/v1/messages", body=json.dumps(body), headers=headers)
            r = conn.getresponse()
            assert r.status == 200, (r.status, r.read()[:300])
            while r.read1(65536):  # returns as soon as some bytes arrived
                first = first or time.perf_counter() - t0
            times.append((first, time.perf_counter() - t0))
    finally:
        conn.close()
    return times


def first_byte(n: int, interval_ms: float) -> dict[str, Any]:
    """A slow stream (a pause between events): when its first byte reaches the client, directly and
    through the gateway."""
    settings = SimSettings(latency=Latency(p50_ms=30), stream_interval_ms=interval_ms)
    with SimServer(settings) as sim, _gateway(_config({}, cache=False, tag="fb"), sim.url) as gw:
        _first_bytes(sim.url, 3, "warm", "sim-strong")  # both servers past their first-request warm-up
        _first_bytes(f"{gw.url}/run/fb/worker/0", 2, "warm", MODELS["anthropic"])
        direct = _first_bytes(sim.url, n, "direct", "sim-strong")  # what the gateway asks the simulator for
        via = _first_bytes(f"{gw.url}/run/fb/worker/0", n, "via", MODELS["anthropic"])
    d_first, v_first = [d[0] for d in direct], [v[0] for v in via]
    added = statistics.median(v_first) - statistics.median(d_first)
    return {"n": n, "interval_ms": interval_ms, "direct_first_ms": statistics.median(d_first) * 1000,
            "via_first_ms": statistics.median(v_first) * 1000, "added_ms": added * 1000,
            "via_last_ms": statistics.median(v[1] for v in via) * 1000, "met": added * 1000 <= 5}


CANNED = (b'{"id":"msg_1","type":"message","role":"assistant","model":"sim-strong","content":[{"type":"text",'
          b'"text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":12,'
          b'"output_tokens":1}}')


def _echo(port: Any) -> None:
    """The zero-latency upstream: a canned answer to every POST, as fast as aiohttp serves."""
    from aiohttp import web

    async def answer(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=CANNED, content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/{p:.*}", answer)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        port.value = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


def _hammer(url: str, seconds: float, concurrency: int, out: Any) -> None:
    """Load generator: `concurrency` callers back to back for `seconds`; how many answers came back."""
    import aiohttp

    body = b'{"model":"claude-sonnet-5-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}'
    headers = {"x-api-key": TOKEN, "content-type": "application/json", "anthropic-version": "2023-06-01"}

    async def main() -> int:
        done = 0
        end = time.monotonic() + seconds
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as s:
            async def one() -> None:
                nonlocal done
                while time.monotonic() < end:
                    async with s.post(url, data=body, headers=headers) as r:
                        await r.read()
                        done += r.status == 200
            await asyncio.gather(*(one() for _ in range(concurrency)))
        return done

    out.put(asyncio.run(main()))


def _latencies(url: str, n: int) -> list[float]:
    conn, path = _connection(url)
    body = json.dumps({"model": "claude-sonnet-5-5", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
    headers = {"x-api-key": TOKEN, "anthropic-version": "2023-06-01", "content-type": "application/json"}
    out = []
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            conn.request("POST", path, body=body, headers=headers)
            r = conn.getresponse()
            r.read()
            assert r.status == 200, r.status
            out.append(time.perf_counter() - t0)
    finally:
        conn.close()
    return out


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of one process so far (/proc/PID/stat fields 14 and 15)."""
    import os

    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def throughput(seconds: float, concurrency: int, n_latency: int) -> dict[str, Any]:
    """Requests per second through the gateway (budget on, cache off) and the latency it adds, against
    an upstream that answers at once."""
    ctx = mp.get_context("spawn")
    port = ctx.Value("i", 0)
    echo = ctx.Process(target=_echo, args=(port,), daemon=True)
    echo.start()
    try:
        while not port.value:
            time.sleep(0.05)
        up = f"http://127.0.0.1:{port.value}"
        cfg = _config({"anthropic": {"rpm": 10_000_000, "itpm": 10**9, "otpm": 10**9}}, cache=False, tag="tp")
        with _gateway(cfg, up) as gw:
            via = f"{gw.url}/run/tp/worker/0/v1/messages"
            _latencies(via, 50)
            direct_lat = _latencies(f"{up}/v1/messages", n_latency)
            via_lat = _latencies(via, n_latency)
            out = ctx.Queue()
            load = ctx.Process(target=_hammer, args=(via, seconds, concurrency, out))
            cpu0 = _cpu_seconds(gw.pid)
            load.start()
            served = out.get(timeout=seconds + 120)
            cpu = _cpu_seconds(gw.pid) - cpu0
            load.join(30)
    finally:
        echo.kill()
    added = [v - d for v, d in zip(sorted(via_lat), sorted(direct_lat), strict=True)]
    rps = served / seconds
    return {"seconds": seconds, "concurrency": concurrency, "rps": rps, "added_p50_ms": _pct(added, 0.5) * 1000,
            "added_p99_ms": _pct(added, 0.99) * 1000, "direct_p50_ms": _pct(direct_lat, 0.5) * 1000,
            "via_p50_ms": _pct(via_lat, 0.5) * 1000, "cpu_ms_per_request": cpu / max(served, 1) * 1000,
            "met": rps >= 1000 and _pct(added, 0.5) * 1000 <= 2}


SIZES = {  # budget (processes, RPM, warm-up s, window s), faults (processes, calls each),
    # first byte (streams, ms between events: a stream has ~80 events), throughput
    "tiny": ((2, 60, 1, 2), (2, 2), (2, 10), (1, 8, 20)),  # 10 ms: that the code runs, not 9 streams of 8 s
    "quick": ((16, 120, 4, 8), (4, 4), (5, 100), (3, 64, 100)),
    "full": ((16, 600, 15, 30), (16, 20), (30, 100), (10, 64, 1000)),
}


def gateway(size: str) -> dict[str, Any]:
    # The warm-up must spend both buckets' first burst (a minute's worth) or the window measures it.
    b, f, fb, tp = SIZES[size]
    return {"budget": budget(*b), "faults": faults(*f), "first_byte": first_byte(*fb),
            "throughput": throughput(*tp)}


def render(r: dict[str, Any]) -> str:
    b, f, fb, tp = r["budget"], r["faults"], r["first_byte"], r["throughput"]

    def verdict(x: dict[str, Any]) -> str:
        return "met" if x["met"] else "**missed**"

    budget_t = table(["processes", "limit (RPM)", "served RPM", "share of the limit", "client calls",
                      "429s seen by clients", "429s retried in the gateway"],
                     [[b["procs"], b["rpm"], b["served_rpm"], f"{b['share_of_limit']:.1%}", b["client_calls"],
                       b["client_429s"], b["upstream_429s"]]])
    return (
        f"### Model gateway: one budget, hidden retries, cache, streams, speed\n\n"
        f"Official SDK clients in separate processes (`anthropic` and `openai`, half streaming, their own retries "
        f"off) through `runner gateway` to the simulator.\n\n"
        f"**One budget.** {b['procs']} processes (half Anthropic, half OpenAI; the gateway's budget "
        f"{b['rpm'] / 2:.0f} RPM per provider) against a simulator limited to {b['rpm']:.0f} RPM in all, counted "
        f"by the simulator over {b['window']:.0f} s after a {b['warmup']:.0f} s warm-up:\n\n{budget_t}\n\n"
        f"Target >= 95 % of the limit, <= 1 % of the clients' calls answered 429: {verdict(b)}.\n\n"
        f"**Faults and the cache.** {f['procs']} processes, {f['calls']} calls, 30 % of upstream answers 500 or "
        f"529: the clients saw {f['first_errors']} errors ({f['retries']} retries in the gateway, "
        f"{f['upstream_requests']} upstream requests). The same job again: {f['second_errors']} errors, "
        f"{f['second_upstream']} upstream calls. Target: none seen, none made: {verdict(f)}.\n\n"
        f"**Streams.** A slow stream ({fb['interval_ms']:.0f} ms between events), {fb['n']} calls each way, "
        f"medians: first byte {fb['direct_first_ms']:.1f} ms directly, {fb['via_first_ms']:.1f} ms through the "
        f"gateway (+{fb['added_ms']:.2f} ms), the last byte {fb['via_last_ms']:.0f} ms: relayed as it arrives. "
        f"Target <= 5 ms added: {verdict(fb)}.\n\n"
        f"**Speed.** Against an upstream that answers at once, budget on, cache off: {tp['rps']:.0f} requests/s "
        f"with {tp['concurrency']} concurrent callers over {tp['seconds']:.0f} s (the load generator, the gateway "
        f"and the upstream share the 2 cores); added latency p50 {tp['added_p50_ms']:.2f} ms, p99 "
        f"{tp['added_p99_ms']:.2f} ms (one caller, {tp['direct_p50_ms']:.2f} ms direct vs "
        f"{tp['via_p50_ms']:.2f} ms through); the gateway spent {tp['cpu_ms_per_request']:.2f} ms of CPU per "
        f"request. Targets >= 1,000 requests/s and <= 2 ms p50 added: {verdict(tp)}.\n")
