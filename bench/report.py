"""Results as a terminal table, as the README's markdown table, and as JSON for machines.

The table shows per workload and metric the median over runs for each engine and the ratio
ours/transformers. Arrows say which direction is better, since the ratio of a latency should
fall and the ratio of a throughput should rise.
"""

from __future__ import annotations

from typing import Any

from bench import stats
from bench.backends import OURS_METHOD
from bench.runner import WorkloadResult

RATIO_HEADER = "ours/transformers"
ONE_STREAM = ("single", "decode")  # the row the bandwidth limit applies to (one stream, decode)


def _number(value: float | None, unit: str = "") -> str:
    if value is None:
        return "n/a"
    if unit == "x":
        return f"{value:.2f}x"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"


def _medians(result: WorkloadResult, metric: str, engines: list[str]) -> dict[str, float | None]:
    return {engine: result.median(engine, metric) for engine in engines}


def table_rows(
    results: list[WorkloadResult], engines: list[str], limit_tok_s: float | None = None
) -> tuple[list[str], list[list[str]]]:
    """Headers and rows: workload, metric with unit and direction, one median per engine, the ratio;
    after one-stream decode, our share of the bandwidth limit (`limit_tok_s`), where known."""
    both = "ours" in engines and "transformers" in engines
    headers = ["workload", "metric", *engines] + ([RATIO_HEADER] if both else [])
    rows = []
    for result in results:
        for metric in result.workload.metrics:
            arrow = "↑" if metric.higher_is_better else "↓"
            medians = _medians(result, metric.name, engines)
            row = [result.workload.name, f"{metric.name} ({metric.unit}) {arrow}"]
            row += [_number(medians[engine], metric.unit) for engine in engines]
            if both:
                row.append(_number(stats.ratio(medians["ours"], medians["transformers"]), "x"))
            rows.append(row)
            if (result.workload.name, metric.name) == ONE_STREAM and limit_tok_s:
                rows.append(_limit_row(medians, engines, limit_tok_s, both))
    return headers, rows


def _limit_row(
    medians: dict[str, float | None], engines: list[str], limit_tok_s: float, both: bool
) -> list[str]:
    """Our one-stream decode as a share of what the measured bandwidth allows (ours only: the
    limit is computed from our engine's weights in this run's scheme)."""
    ours = medians.get("ours")
    share = None if ours is None else f"{100 * ours / limit_tok_s:.0f}%"
    cells = [(share or "n/a") if engine == "ours" else "n/a" for engine in engines]
    return [ONE_STREAM[0], f"decode, % of limit ({limit_tok_s:.1f} tok/s) ↑", *cells] + ([""] if both else [])


def render_table(headers: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = [headers, ["---"] * len(headers), *rows]
        return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)
    lines = [headers, *rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


def _workload_notes(results: list[WorkloadResult], engines: list[str]) -> list[str]:
    """What each workload is (full sizes) and how transformers runs it, since it cannot batch continuously."""
    lines = []
    for result in results:
        how = f" transformers: {result.workload.hf_method}." if "transformers" in engines else ""
        lines.append(f"- {result.workload.name}: {result.workload.title}.{how}")
    if "ours" in engines:
        lines.append(f"- ours, every workload: {OURS_METHOD}.")
    return lines


def machine_line(machine: dict[str, Any]) -> str:
    return (
        f"{machine['cpu']}, {machine['cores']} cores, {machine['threads']} threads, {machine['dtype']}, "
        f"torch {machine['torch']}, transformers {machine['transformers']}, "
        f"load average {machine['load_average_1m']} at start"
    )


def text_report(
    results: list[WorkloadResult], engines: list[str], context: dict[str, Any], markdown: bool
) -> str:
    """The human report: what ran where, the table, and how each engine ran each workload."""
    limit = context.get("decode limit")
    headers, rows = table_rows(results, engines, limit["tok/s"] if limit else None)
    settings = context["settings"]
    sizes = "quick (short) sizes" if settings["quick"] else "full sizes"
    about = [
        f"machine: {machine_line(context['machine'])}",
        f"model: {settings['model']}",
        f"sampling, both engines: {settings['sampling']}",
        "our engine: " + ", ".join(f"{k} {v}" for k, v in context["engine"].items()),
    ]
    if "bandwidth" in context:
        about.append(f"memory bandwidth: {context['bandwidth']['described']}")
    if limit:
        about.append(f"limit: {limit['described']}")
    if settings["poisson_rate"] is not None:
        about.append(f"Poisson arrival rate: {_number(settings['poisson_rate'])} requests/s")
    about.append(f"reproduce: `{context['command']}`" if markdown else f"reproduce: {context['command']}")
    return "\n".join(
        [
            f"lfm-chat bench: medians of {settings['repeats']} runs per engine, {sizes}",
            *(f"- {line}" if markdown else line for line in about),
            "",
            render_table(headers, rows, markdown),
            "",
            "workloads (sizes shrink with --quick):",
            *_workload_notes(results, engines),
        ]
    )


def json_report(results: list[WorkloadResult], engines: list[str], context: dict[str, Any]) -> dict[str, Any]:
    """Every run's value, the medians and the ratios, with the machine and settings."""
    workloads = []
    for result in results:
        metrics = []
        for metric in result.workload.metrics:
            medians = _medians(result, metric.name, engines)
            metrics.append(
                {
                    "name": metric.name,
                    "unit": metric.unit,
                    "higher_is_better": metric.higher_is_better,
                    "runs": {
                        engine: result.samples.get(engine, {}).get(metric.name, []) for engine in engines
                    },
                    "median": medians,
                    "ratio_ours_to_transformers": stats.ratio(
                        medians.get("ours"), medians.get("transformers")
                    ),
                }
            )
        workloads.append(
            {
                "name": result.workload.name,
                "title": result.workload.title,
                "methods": {"ours": OURS_METHOD, "transformers": result.workload.hf_method},
                "isolated_subprocess": result.workload.isolated,
                "metrics": metrics,
            }
        )
    return {**context, "engines": engines, "workloads": workloads}
