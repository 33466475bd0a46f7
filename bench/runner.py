"""The measurement loop: warm up, then repetitions that alternate the engines, collecting every figure.

Within a repetition each workload runs on every engine back to back, and the order flips
from one repetition to the next, so slow drift on a shared machine (thermal, other jobs)
does not favour whichever engine always goes first. Workloads marked `isolated` run once
per engine in a fresh subprocess (bench.rss) instead. Ctrl+C ends the loop but keeps every run
that finished, so the report still shows them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from bench import stats
from bench.backends import Backend, load_backend, run_checked
from bench.bandwidth import Bandwidth, DecodeLimit, decode_limit
from bench.progress import Progress
from bench.rss import measure_in_subprocess
from bench.scenario import RequestSpec, Scenario
from bench.settings import RunSettings
from bench.workloads import FIRST_PLAIN_ID, Workload, poisson_rate


@dataclass(slots=True)
class WorkloadResult:
    """Every run's figures: samples[engine][metric] has one value per run (None = not measurable)."""

    workload: Workload
    samples: dict[str, dict[str, list[float | None]]] = field(default_factory=dict)

    def add(self, engine: str, figures: dict[str, float | None]) -> None:
        per_metric = self.samples.setdefault(engine, {})
        for metric in self.workload.metrics:
            per_metric.setdefault(metric.name, []).append(figures.get(metric.name))

    def median(self, engine: str, metric: str) -> float | None:
        return stats.median(self.samples.get(engine, {}).get(metric, []))


def count_runs(workloads: list[Workload], engines: list[str], repeats: int) -> int:
    per_engine = sum(1 if w.isolated else repeats for w in workloads)
    return per_engine * len(engines)


def warm_up(backend: Backend, quick: bool) -> float:
    """Run one short request (first calls pay for kernel selection); return its median step time."""
    prompt = tuple(range(FIRST_PLAIN_ID, FIRST_PLAIN_ID + 32))
    new_tokens = 8 if quick else 16
    (trace,) = run_checked(backend, Scenario((RequestSpec(prompt, new_tokens),), ((0,),)))
    return stats.percentile(trace.itls, 50)


@dataclass(slots=True)
class BenchRun:
    """The settings as finally used (with the calibrated Poisson rate), the results, whether every
    run finished (False: Ctrl+C stopped it; the finished runs are kept) and our decode limit."""

    settings: RunSettings
    results: list[WorkloadResult]
    complete: bool = True
    limit: DecodeLimit | None = None  # known once our engine is loaded in-process with a bandwidth


def run_benchmark(
    workloads: list[Workload],
    engines: list[str],
    settings: RunSettings,
    repeats: int,
    progress: Progress,
    bandwidth: Bandwidth | None = None,
) -> BenchRun:
    results = {w.name: WorkloadResult(w) for w in workloads}
    run = BenchRun(settings, [])
    try:
        _run_in_process(workloads, engines, run, repeats, progress, results, bandwidth)
        _run_isolated(workloads, engines, run.settings, progress, results)
    except KeyboardInterrupt:
        progress.note(f"interrupted: {progress.finished} of {progress.total} runs finished")
        run.results, run.complete = [r for r in results.values() if r.samples], False
        return run
    run.results = [results[w.name] for w in workloads]
    return run


def _run_in_process(
    workloads: list[Workload],
    engines: list[str],
    run: BenchRun,
    repeats: int,
    progress: Progress,
    results: dict[str, WorkloadResult],
    bandwidth: Bandwidth | None,
) -> None:
    in_process = [w for w in workloads if not w.isolated]
    if not in_process:
        return
    settings, backends = run.settings, []
    for name in engines:
        with progress.stage(f"loading {name} from {settings.checkpoint}"):
            backends.append(load_backend(name, settings))
        model = getattr(backends[-1], "model", None)
        if name == "ours" and bandwidth is not None and model is not None:
            run.limit = decode_limit(model, settings.scheme, bandwidth)
            progress.note(run.limit.describe())
    with progress.stage("warming up"):
        step_times = {backend.name: warm_up(backend, settings.quick) for backend in backends}
    if settings.poisson_rate is None and any(w.uses_arrival_rate for w in in_process):
        rate = poisson_rate(step_times[engines[0]], settings.quick)
        settings = run.settings = dataclasses.replace(settings, poisson_rate=rate)
        progress.note(f"Poisson rate {rate:.3g} requests/s, from {engines[0]}'s warm-up step time")
    for repetition in range(repeats):
        order = backends if repetition % 2 == 0 else backends[::-1]
        for workload in in_process:
            scenario = workload.build(settings.build_context(workload, repetition))
            for backend in order:
                with progress.run(f"rep {repetition + 1}/{repeats} {workload.name:<12} {backend.name}"):
                    figures = workload.measure(run_checked(backend, scenario))
                results[workload.name].add(backend.name, figures)


def _run_isolated(
    workloads: list[Workload],
    engines: list[str],
    settings: RunSettings,
    progress: Progress,
    results: dict[str, WorkloadResult],
) -> None:
    for workload in (w for w in workloads if w.isolated):
        for name in engines:
            with progress.run(f"fresh process {workload.name:<12} {name}"):
                figures = measure_in_subprocess(name, workload, settings)
            results[workload.name].add(name, figures)
