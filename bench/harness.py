"""Timing and reporting helpers shared by the benchmarks.

* `measure` times one callable best-of-N / median after warm-up runs; `alternate` interleaves
  several callables round by round (A B, B A, A B, ...) so slow drift of the machine (page-cache
  writeback, CPU frequency, a neighbour) falls on every case alike.
* A timed callable returns None (the whole call is timed), or times itself when setup and
  teardown must stay outside the measurement: a `Stopwatch.lap()` (wall and CPU seconds) or a
  float in the chosen clock. `clock` is wall time by default, or the thread's CPU time (user +
  system) for CPU-bound work on a shared machine. The CPU time of each run is kept when known
  (`Timing.cpu`), so a report can show both.
* `rewrite_section` replaces one generated section of a markdown file between
  `<!-- bench:NAME:begin -->` and `<!-- bench:NAME:end -->`, leaving the rest of the file as is.

Units: MB is 10^6 bytes, MiB is 2^20 bytes; rates are MB/s.
"""

from __future__ import annotations

import cProfile
import os
import platform
import pstats
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

MB = 1_000_000
MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True, slots=True)
class Timing:
    """The seconds of the measured runs (warm-up runs excluded), and, when known, the CPU seconds
    of the same runs (`cpu`)."""

    samples: tuple[float, ...]
    cpu_samples: tuple[float, ...] | None = None

    @property
    def best(self) -> float:
        return min(self.samples)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def worst(self) -> float:
        return max(self.samples)

    @property
    def cpu(self) -> "Timing":
        """The same runs in thread CPU time; ValueError when they were not recorded."""
        if self.cpu_samples is None:
            raise ValueError("these runs were timed without their CPU time")
        return Timing(self.cpu_samples)

    def rate(self, amount: float) -> float:
        """`amount` per second at the median time."""
        return amount / self.median

    def best_rate(self, amount: float) -> float:
        return amount / self.best

    def spread(self) -> float:
        """(worst - best) / median: how noisy the runs were."""
        return (self.worst - self.best) / self.median if self.median else 0.0


#: Wall-clock time: throughput, anything that waits for the disk.
WALL = time.perf_counter
#: CPU time of the calling thread, user + system: for CPU-bound work (lookups, copies out of the
#: page cache) on a shared machine, where wall time would also count the other processes' turns.
CPU = time.thread_time


@dataclass(frozen=True, slots=True)
class Lap:
    """Wall and thread CPU seconds of one timed stretch."""

    wall: float
    cpu: float


class Stopwatch:
    """Started on creation; `lap()` gives wall and CPU seconds since, calling it the wall seconds."""

    __slots__ = ("_wall", "_cpu")

    def __init__(self) -> None:
        self._wall = WALL()
        self._cpu = CPU()

    def __call__(self) -> float:
        return WALL() - self._wall

    def lap(self) -> Lap:
        return Lap(WALL() - self._wall, CPU() - self._cpu)


def stopwatch() -> Stopwatch:
    return Stopwatch()


TimedResult = float | Lap | None


def _run_timed(fn: Callable[[], TimedResult], clock: Callable[[], float]) -> tuple[float, float | None]:
    """(seconds by `clock`, CPU seconds or None). A callable returning a float timed itself in
    that clock; one returning a Lap gave both; None means the whole call is timed."""
    sw = Stopwatch()
    own = fn()
    if own is None:
        lap = sw.lap()
        return (lap.cpu if clock is CPU else lap.wall), lap.cpu
    if isinstance(own, Lap):
        return (own.cpu if clock is CPU else own.wall), own.cpu
    return float(own), None


def _timing(runs: list[tuple[float, float | None]]) -> Timing:
    cpu = tuple(c for _, c in runs if c is not None)
    return Timing(tuple(t for t, _ in runs), cpu if len(cpu) == len(runs) else None)


def measure(fn: Callable[[], TimedResult], *, repeat: int = 5, warmup: int = 1,
            clock: Callable[[], float] = WALL) -> Timing:
    """Run `fn` `warmup` times unmeasured, then `repeat` times; see `_run_timed` for returns."""
    if repeat < 1:
        raise ValueError("repeat must be at least 1")
    for _ in range(warmup):
        _run_timed(fn, clock)
    return _timing([_run_timed(fn, clock) for _ in range(repeat)])


def alternate(cases: Mapping[str, Callable[[], TimedResult]], *, rounds: int = 3,
              warmup: int = 1, clock: Callable[[], float] = WALL) -> dict[str, Timing]:
    """Interleave the cases: every round runs each once, the order reversed on odd rounds."""
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    names = list(cases)
    for _ in range(warmup):
        for name in names:
            _run_timed(cases[name], clock)
    runs: dict[str, list[tuple[float, float | None]]] = {name: [] for name in names}
    for r in range(rounds):
        for name in (names if r % 2 == 0 else reversed(names)):
            runs[name].append(_run_timed(cases[name], clock))
    return {name: _timing(rs) for name, rs in runs.items()}


def paired_ratio(numerator: Timing, denominator: Timing) -> float:
    """Median over rounds of numerator[i] / denominator[i], for timings taken by `alternate`.

    Pairing the runs of one round cancels drift that is slow next to a round (another process
    starting, writeback, frequency changes), which a ratio of two medians would not. For a
    throughput ratio "engine / baseline", pass (baseline timing, engine timing).
    """
    if len(numerator.samples) != len(denominator.samples):
        raise ValueError("paired timings need the same number of runs")
    return statistics.median(n / d for n, d in zip(numerator.samples, denominator.samples))


# ---------------------------------------------------------------------------------------------
# Profiling


@dataclass(frozen=True, slots=True)
class ProfileRow:
    function: str
    calls: int
    tottime: float  # seconds in the function itself
    cumtime: float  # seconds including callees


def profile_top(fn: Callable[[], object], *, limit: int | None = 10, sort: str = "tottime"
                ) -> tuple[float, list[ProfileRow]]:
    """Run `fn` under cProfile; return (profiled total seconds, the top `limit` functions, or all)."""
    prof = cProfile.Profile()
    prof.enable()
    try:
        fn()
    finally:
        prof.disable()
    stats = pstats.Stats(prof)
    rows = []
    for (filename, line, name), (_cc, ncalls, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(ProfileRow(_short_function(filename, line, name), ncalls, tt, ct))
    rows.sort(key=lambda r: getattr(r, sort), reverse=True)
    return stats.total_tt, rows if limit is None else rows[:limit]  # type: ignore[attr-defined]


def _short_function(filename: str, line: int, name: str) -> str:
    if filename == "~":
        return name  # a built-in, e.g. "<built-in method posix.pread>"
    path = Path(filename)
    parts = path.parts
    for anchor in ("logstore", "index", "compaction", "infra", "bench"):
        if anchor in parts:
            path = Path(*parts[parts.index(anchor):])
            break
    else:
        path = Path(path.name)
    return f"{path}:{line}({name})"


# ---------------------------------------------------------------------------------------------
# The machine


def machine_info(bench_dir: str | os.PathLike) -> dict[str, str]:
    """What the figures depend on: CPUs, memory, Python, kernel, the file system measured on."""
    info = {
        "nproc": str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()),
        "cpu": _cpu_model(),
        "memory": _mem_total(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "kernel": f"{platform.system()} {platform.release()}",
        "file system": _file_system(Path(bench_dir)),
        "load": load_average(),
    }
    return info


class OtherCpu:
    """How busy other processes kept the CPUs while a benchmark ran: the machine's busy CPU time
    (/proc/stat: user, nice, system, irq, softirq; not steal) minus this process's and its reaped
    children's (the benchmark's server processes, once stopped), over the wall time since
    creation. `cpus()` is the average number of CPUs the rest of the machine used, or None when
    /proc/stat cannot be read."""

    def __init__(self) -> None:
        self._start = self._sample()

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat") as f:
                ticks = [int(x) for x in f.readline().split()[1:8]]
        except (OSError, ValueError):
            return None
        busy = (ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]) / os.sysconf("SC_CLK_TCK")
        t = os.times()
        return time.monotonic(), busy, t.user + t.system + t.children_user + t.children_system

    def cpus(self) -> float | None:
        end = self._sample()
        if self._start is None or end is None or end[0] <= self._start[0]:
            return None
        (w0, b0, o0), (w1, b1, o1) = self._start, end
        return max(0.0, (b1 - b0) - (o1 - o0)) / (w1 - w0)


def conditions(nproc: str, others: float | None, note: str) -> str:
    """The report's sentence on what else ran: `others` from `OtherCpu.cpus()`, `note` from the
    command line (what those processes were, when known)."""
    text = (f"Other processes kept {others:.2f} of the {nproc} CPUs busy on average during the run "
            f"(/proc/stat, minus the benchmark's own processes)." if others is not None else "")
    if note:
        text += f" {note.strip().rstrip('.')}."
    return text.strip()


def load_average() -> str:
    """1-minute load average: above ~0 means other work shared the CPUs with the benchmark."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "unknown"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _mem_total() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    except (OSError, ValueError):
        pass
    return "unknown"


def _file_system(path: Path) -> str:
    """`<fstype> on <device>` for the mount holding `path` (longest mount point prefix)."""
    try:
        best = ("", "unknown", "unknown")
        resolved = str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype, *_ = line.split()
            if (resolved == mnt or resolved.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best[0]):
                best = (mnt, fstype, dev)
        return f"{best[1]} on {best[2]} (mounted at {best[0]})"
    except OSError:
        return "unknown"


def git_revision(repo: str | os.PathLike) -> str:
    """Short commit of `repo`, with `+dirty` when tracked files differ from it."""
    try:
        rev = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def command_line() -> str:
    return shlex.join(["python", *sys.argv])


# ---------------------------------------------------------------------------------------------
# Markdown


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain, column-aligned table for the terminal."""
    cells = [list(map(str, headers))] + [list(map(str, r)) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    out = []
    for n, row in enumerate(cells):
        out.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def missed_targets(causes: Sequence[str]) -> list[str]:
    """The report's list of missed targets, each with its measured cause; nothing when all were met."""
    if not causes:
        return []
    return ["Missed targets and their measured causes (details under \"Where the time goes\"):", "",
            *(f"- {c}" for c in causes), ""]


def section_markers(name: str) -> tuple[str, str]:
    return f"<!-- bench:{name}:begin -->", f"<!-- bench:{name}:end -->"


def rewrite_section(path: str | os.PathLike, name: str, body: str) -> None:
    """Put `body` between the markers of section `name` in `path`, creating the file or appending
    the section when absent. Everything outside the markers is kept byte for byte.

    Raises ValueError when the markers are unbalanced rather than guess where the section ends.
    The file is replaced atomically (temp file, rename).
    """
    path = Path(path)
    begin, end = section_markers(name)
    text = path.read_text("utf-8") if path.exists() else ""
    block = f"{begin}\n{body.strip()}\n{end}"
    nb, ne = text.count(begin), text.count(end)
    if nb == ne == 0:
        sep = "" if not text or text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        new = f"{text}{sep}{block}\n"
    elif nb == ne == 1 and text.index(begin) < text.index(end):
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        new = f"{head}{block}{tail}"
    else:
        raise ValueError(f"{path}: section {name!r} has {nb} begin and {ne} end markers")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(new, "utf-8")
    os.replace(tmp, path)
