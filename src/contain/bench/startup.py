"""Start-up cost of a sandbox on this host, measured beside its baselines in one run.

Variants, interleaved round by round so that noise on this shared machine hits all of them alike:
  - ``bare``: the command run directly (fork + exec from Python);
  - ``bwrap``: raw ``bwrap --unshare-all`` with the same mounts contain's sandbox gets (/usr, loader
    links, its /etc tree, /proc, /dev, tmpfs for /tmp, /dev/shm and /work, read-only root), no
    seccomp, no supervisor, no cgroup, started as the same host user contain's sandbox runs as;
  - ``bwrap-minimal``: raw bwrap with only /usr, loader links, /proc, /dev, /tmp and /work;
  - ``contain-api``: ``Sandbox(Boundary())`` with full policy (seccomp, Landlock, cgroups, the
    supervisor), started, one run, closed: the whole life of a one-shot sandbox;
  - ``contain-cli``: ``contain run -- CMD`` as a shell would start it (a new interpreter each time),
    the usual case: the boundary was validated by an earlier run and is read from the cache;
  - ``contain-cli-uncached``: the same with the validation cache off (``CONTAIN_NO_BOUNDARY_CACHE``),
    what the first run of a new manifest costs (pydantic imported, the manifest validated).
  - ``contain-session``: one run in a sandbox opened before the first round and closed after the
    last (N runs in one sandbox), beside ``contain-api``'s fresh sandbox per run.
With ``microvm`` among the backends: only ``contain-session[microvm]`` here (one run in a running
VM); its cold and warm rows, the pool acquire and the VMM's memory are bench/pool.py's, its
targets bench/ladder.py's.
With ``backends`` naming container backends (``container:runc``, ``container:runsc``), per backend:
  - ``raw-runc`` / ``raw-runsc``: the runtime alone running the bundle contain writes for
    ``Boundary()``, with the command as the container's process (``bench/raw_oci.py``);
  - ``contain-api[container:runc]``: ``Sandbox(Boundary(), backend="container:runc")``, started, one
    run, closed; ``contain-session[container:runc]``: one run in an open container sandbox.
Every variant of every backend is interleaved in the same rounds. ``BACKEND_TARGETS`` states what
each backend's API is compared with, and the target (issue 13).
Throughput: N sandboxed commands at a given concurrency, against the same commands run bare.

Reports medians and p95 and the ratios the targets are stated in. Does not assert anything:
benchmarks report; tests judge.
"""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field

from contain.boundary import Boundary
from contain.host.facts import detect_host
from contain.runtime import Sandbox
from contain.runtime.plan import sandbox_host_ids
from contain.runtime.result import RunResult

__all__ = [
    "BACKEND_TARGETS",
    "BackendTarget",
    "StartupReport",
    "Summary",
    "backend_rows",
    "bench_backends",
    "measure_startup",
    "measure_throughput",
    "render_startup",
]

COMMANDS: dict[str, list[str]] = {"true": ["/bin/true"], "python": ["/usr/bin/python3", "-c", "pass"]}


@dataclass(frozen=True)
class BackendTarget:
    """What one backend's API start-up is compared with, and the ratio it should stay under."""

    backend: str  # a backend spec, e.g. "container:runc"
    baseline: str  # the variant it is compared with, e.g. "raw-runc"
    baseline_label: str  # how the table names the baseline
    max_ratio: float  # API median / baseline median, /bin/true (issue 13, "Done when")


BACKEND_TARGETS: tuple[BackendTarget, ...] = (
    BackendTarget("process", "bwrap", "raw bwrap, contain's mounts", 2.0),
    BackendTarget("container:runc", "raw-runc", "raw `runc run` of contain's bundle", 1.5),
    BackendTarget("container:runsc", "raw-runsc", "raw `runsc run` of contain's bundle", 1.3),
)
CLI_TARGET_MS = 120.0  # `contain run -- /bin/true`, issue 13
# Backends with no raw runtime to compare with: judged against absolute targets instead
# (bench/ladder.py). Here only their session row is measured; cold and warm come from bench/pool.py,
# because a fresh microVM per sample for every command would cost seconds each.
ABSOLUTE_TARGET_BACKENDS: tuple[str, ...] = ("microvm",)


def bench_backends(text: str) -> tuple[str, ...]:
    """The backend specs of ``--backend a,b``, each once, in the given order, as ``RunResult.backend``
    spells them (``parse_backend_spec``: a bare ``container`` is ``container:runc``).

    Raises:
        UnknownBackend: a name ``parse_backend_spec`` refuses (exit 125).
        UnsupportedHost: a valid backend the bench has neither a baseline nor targets for (exit 125).
    """
    from contain.errors import UnsupportedHost
    from contain.runtime.backend_names import parse_backend_spec

    measurable = [*(t.backend for t in BACKEND_TARGETS), *ABSOLUTE_TARGET_BACKENDS]
    specs: list[str] = []
    for name in text.split(","):
        spec = str(parse_backend_spec(name))
        if spec not in measurable:
            raise UnsupportedHost(
                f"contain bench has no start-up baseline for backend {spec!r}",
                f"measure one of: {', '.join(measurable)}",
            )
        if spec not in specs:
            specs.append(spec)
    return tuple(specs)


def api_variant(backend: str) -> str:
    """The variant name of ``backend``'s fresh-sandbox API row ("contain-api" for process)."""
    return "contain-api" if backend == "process" else f"contain-api[{backend}]"


def session_variant(backend: str) -> str:
    """The variant name of ``backend``'s one-run-in-an-open-sandbox row."""
    return "contain-session" if backend == "process" else f"contain-session[{backend}]"


@dataclass(frozen=True)
class Summary:
    """Percentiles of one variant, in seconds, and the samples they were taken from (for the chart)."""

    name: str
    samples: int
    median_s: float
    p95_s: float
    values_s: tuple[float, ...] = field(default=(), compare=False, repr=False)  # in measurement order

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "samples": self.samples,
            "median_ms": self.median_s * 1e3,
            "p95_ms": self.p95_s * 1e3,
            "samples_ms": [v * 1e3 for v in self.values_s],
        }


@dataclass(frozen=True)
class StartupReport:
    """All variants for all commands, plus throughput."""

    summaries: dict[str, Summary]
    throughput: dict[str, float]

    def ratio(self, numerator: str, denominator: str) -> float:
        return self.summaries[numerator].median_s / self.summaries[denominator].median_s

    def has(self, *names: str) -> bool:
        return all(n in self.summaries for n in names)

    def to_dict(self) -> dict[str, object]:
        ratios: dict[str, float] = {}
        for key, numerator, denominator in (
            ("api_true_over_bwrap_true", "contain-api/true", "bwrap/true"),
            ("api_python_over_bwrap_python", "contain-api/python", "bwrap/python"),
            ("api_true_over_bwrap_minimal_true", "contain-api/true", "bwrap-minimal/true"),
        ):
            if self.has(numerator, denominator):
                ratios[key] = self.ratio(numerator, denominator)
        return {
            "summaries": {k: v.to_dict() for k, v in self.summaries.items()},
            "ratios": ratios,
            "backends": [row.to_dict() for row in backend_rows(self)],
            "throughput": self.throughput,
        }


@dataclass(frozen=True)
class BackendRow:
    """One backend's line of the comparison table (medians of ``command``, in seconds)."""

    backend: str
    command: str
    baseline_label: str
    baseline_s: float | None
    api_s: float | None
    session_s: float | None
    max_ratio: float

    @property
    def ratio(self) -> float | None:
        return None if self.api_s is None or self.baseline_s is None else self.api_s / self.baseline_s

    @property
    def session_over_fresh(self) -> float | None:
        return None if self.session_s is None or self.api_s is None else self.session_s / self.api_s

    def to_dict(self) -> dict[str, object]:
        def ms(value: float | None) -> float | None:
            return None if value is None else value * 1e3

        return {
            "backend": self.backend,
            "command": self.command,
            "baseline": self.baseline_label,
            "baseline_median_ms": ms(self.baseline_s),
            "api_median_ms": ms(self.api_s),
            "api_over_baseline": self.ratio,
            "target_max_ratio": self.max_ratio,
            "session_run_median_ms": ms(self.session_s),
            "session_over_fresh": self.session_over_fresh,
        }


def backend_rows(report: StartupReport) -> list[BackendRow]:
    """Per measured backend and command: the raw baseline, the API, the session run. Pure."""
    rows = []
    for target in BACKEND_TARGETS:
        for command in COMMANDS:
            names = (f"{target.baseline}/{command}", f"{api_variant(target.backend)}/{command}")
            found = [report.summaries.get(n) for n in (*names, f"{session_variant(target.backend)}/{command}")]
            if all(f is None for f in found):
                continue  # the backend was not measured
            baseline, api, session = (None if f is None else f.median_s for f in found)
            rows.append(
                BackendRow(target.backend, command, target.baseline_label, baseline, api, session, target.max_ratio)
            )
    return rows


def _summarise(name: str, samples: Sequence[float]) -> Summary:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return Summary(name, len(ordered), statistics.median(ordered), p95, tuple(samples))


def _raw_bwrap_argv(command: list[str], *, etc_tree: str | None) -> list[str]:
    """Raw bwrap with the mounts contain's sandbox gets (or only the minimum when etc_tree is None):
    the difference to contain is then its own layers (seccomp, cgroup, supervisor, Landlock) and the
    Python that drives them."""
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for link in ("/bin", "/sbin", "/lib", "/lib64"):
        if os.path.islink(link):
            argv += ["--symlink", os.readlink(link), link]
    if etc_tree is not None:
        argv += ["--ro-bind", etc_tree, "/etc"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/work"]
    if etc_tree is not None:
        argv += ["--tmpfs", "/dev/shm", "--remount-ro", "/"]
    return [*argv, "--", *command]


def _sandbox_etc_tree() -> str:
    from pathlib import Path

    from contain.runtime.bwrap import ETC_PASSTHROUGH, generated_etc_files
    from contain.runtime.etc_tree import ensure_etc_tree
    from contain.runtime.supervisor_build import ensure_supervisor_binary

    generated = generated_etc_files(home="/work", resolv_conf="nameserver 127.0.0.1\n")
    return ensure_etc_tree(Path(ensure_supervisor_binary()).parent, generated, (e.path for e in ETC_PASSTHROUGH))


def _raw_bwrap_launcher() -> Callable[[list[str]], None]:
    """Run a raw bwrap argv as the host user contain's sandbox runs as, started the cheapest way,
    the way contain starts its own: through the supervisor's --exec-as (vfork + one small exec)
    rather than subprocess's user=."""
    facts = detect_host()
    uid, gid = sandbox_host_ids(facts)
    as_user: list[str] = []
    if facts.is_root:
        from contain.runtime.supervisor_build import ensure_supervisor_binary

        as_user = [str(ensure_supervisor_binary()), "--exec-as", str(uid), str(gid), "--", facts.bwrap_path or "bwrap"]

    def launch(argv: list[str]) -> None:
        subprocess.run([*as_user, *argv[1:]] if as_user else argv, check=True, stdin=subprocess.DEVNULL)

    return launch


def _timed(action: Callable[[], object]) -> float:
    began = time.perf_counter()
    action()
    return time.perf_counter() - began


def _process_variants(
    boundary: Boundary, contain_cli: str | None, *, include_cli: bool
) -> dict[str, Callable[[list[str]], None]]:
    launch = _raw_bwrap_launcher()

    def bare(cmd: list[str]) -> None:
        subprocess.run(cmd, check=True, stdin=subprocess.DEVNULL)

    etc_tree = _sandbox_etc_tree()

    def bwrap(cmd: list[str]) -> None:
        launch(_raw_bwrap_argv(cmd, etc_tree=etc_tree))

    def bwrap_minimal(cmd: list[str]) -> None:
        launch(_raw_bwrap_argv(cmd, etc_tree=None))

    def cli(cmd: list[str]) -> None:
        subprocess.run([contain_cli or "contain", "run", "--", *cmd], check=True, stdin=subprocess.DEVNULL)

    uncached_env = {**os.environ, "CONTAIN_NO_BOUNDARY_CACHE": "1"}

    def cli_uncached(cmd: list[str]) -> None:
        subprocess.run(
            [contain_cli or "contain", "run", "--", *cmd], check=True, stdin=subprocess.DEVNULL, env=uncached_env
        )

    variants: dict[str, Callable[[list[str]], None]] = {
        "bare": bare,
        "bwrap-minimal": bwrap_minimal,
        "bwrap": bwrap,
    }
    if include_cli:
        variants["contain-cli"] = cli
        variants["contain-cli-uncached"] = cli_uncached
    return variants


def _open_sandbox(boundary: Boundary, backend: str) -> Sandbox:
    return Sandbox(boundary) if backend == "process" else Sandbox(boundary, backend=backend)


def _check_run(cmd: list[str], backend: str, result: RunResult) -> None:
    if result.exit_code != 0:
        raise RuntimeError(f"sandboxed {cmd} on {backend} failed: {result.stderr.data!r}")


def _session_variant(boundary: Boundary, backend: str, stack: ExitStack) -> dict[str, Callable[[list[str]], None]]:
    """``backend``'s session run: one sandbox, opened now and closed by ``stack``, one run per sample."""
    session = stack.enter_context(_open_sandbox(boundary, backend))

    def in_session(cmd: list[str]) -> None:
        _check_run(cmd, backend, session.run(cmd))

    return {session_variant(backend): in_session}


def _api_variants(boundary: Boundary, backend: str, stack: ExitStack) -> dict[str, Callable[[list[str]], None]]:
    """``backend``'s fresh-sandbox run and its session run (one sandbox, opened now, closed by ``stack``)."""

    def api(cmd: list[str]) -> None:
        with _open_sandbox(boundary, backend) as sandbox:
            _check_run(cmd, backend, sandbox.run(cmd))

    return {api_variant(backend): api, **_session_variant(boundary, backend, stack)}


def _raw_runtime_variant(runtime: str, stack: ExitStack) -> Callable[[list[str]], None]:
    """``raw-<runtime>``: one bundle per command, written once; each sample a fresh container."""
    from contain.bench.raw_oci import raw_oci_bundle

    bundles = {name: stack.enter_context(raw_oci_bundle(runtime, argv)) for name, argv in COMMANDS.items()}
    by_argv = {tuple(COMMANDS[name]): bundle for name, bundle in bundles.items()}

    def raw(cmd: list[str]) -> None:
        by_argv[tuple(cmd)].run_once()

    return raw


def measure_startup(
    *,
    rounds: int,
    contain_cli: str | None,
    include_cli: bool = True,
    backends: Sequence[str] = ("process",),
) -> dict[str, Summary]:
    """Interleave every variant of every backend ``rounds`` times and summarise each.

    Args:
        rounds: samples per variant.
        contain_cli: path of the `contain` executable for the CLI variant.
        include_cli: measure the CLI variant (a new interpreter per sample; process backend only).
        backends: backend specs: "process", "container:runc", "container:runsc", "microvm" (its
            session row only: see ``ABSOLUTE_TARGET_BACKENDS``).
    """
    boundary = Boundary()
    with ExitStack() as stack:
        variants: dict[str, Callable[[list[str]], None]] = {}
        for backend in backends:
            if backend in ABSOLUTE_TARGET_BACKENDS:
                variants.update(_session_variant(boundary, backend, stack))
                continue
            if backend == "process":
                variants.update(_process_variants(boundary, contain_cli, include_cli=include_cli))
            else:
                variants[f"raw-{backend.partition(':')[2]}"] = _raw_runtime_variant(backend.partition(":")[2], stack)
            variants.update(_api_variants(boundary, backend, stack))
        samples: dict[str, list[float]] = {f"{v}/{c}": [] for v in variants for c in COMMANDS}
        for variant, command in [(v, c) for v in variants for c in COMMANDS]:  # warm caches once
            variants[variant](COMMANDS[command])
        for _ in range(rounds):
            for variant, run in variants.items():
                for command, argv in COMMANDS.items():
                    samples[f"{variant}/{command}"].append(_timed(functools.partial(run, argv)))
    return {name: _summarise(name, values) for name, values in samples.items()}


def measure_throughput(*, count: int, concurrency: int) -> dict[str, float]:
    """Commands per second for ``python3 -c pass`` at a fixed pool size, three ways, interleaved
    with the bare baseline (measured before and after, averaged):

    - ``contain``: a fresh one-shot sandbox per command (start, run, close);
    - ``contain-session``: one sandbox per worker, each command a fresh run inside it (fresh
      processes, every leftover killed after each run; scratch shared between the worker's runs);
    - ``bwrap``: raw bwrap with the same mounts per command, no contain layers: the ceiling a
      one-shot bwrap sandbox has on this host.
    """
    command = COMMANDS["python"]
    boundary = Boundary()
    launch = _raw_bwrap_launcher()
    raw_argv = _raw_bwrap_argv(command, etc_tree=_sandbox_etc_tree())

    def raw(_: int) -> None:
        launch(raw_argv)

    def one_shot(_: int) -> None:
        with Sandbox(boundary) as sandbox:
            sandbox.run(command)

    def bare(_: int) -> None:
        subprocess.run(command, check=True)

    def sessions() -> None:
        def worker(share: int) -> None:
            with Sandbox(boundary) as sandbox:
                for _ in range(share):
                    sandbox.run(command)

        shares = [count // concurrency + (1 if i < count % concurrency else 0) for i in range(concurrency)]
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(worker, shares))

    def pooled(job: Callable[[int], None]) -> Callable[[], None]:
        def run_all() -> None:
            with ThreadPoolExecutor(max_workers=concurrency) as pool:
                list(pool.map(job, range(count)))

        return run_all

    rates: dict[str, list[float]] = {"bare": [], "bwrap": [], "contain": [], "contain-session": []}
    plan = [
        ("bare", pooled(bare)),
        ("bwrap", pooled(raw)),
        ("contain", pooled(one_shot)),
        ("contain-session", sessions),
        ("bare", pooled(bare)),
    ]
    for name, run_all in plan:
        began = time.perf_counter()
        run_all()
        rates[name].append(count / (time.perf_counter() - began))
    baseline = statistics.fmean(rates["bare"])
    return {
        "bare_per_s": baseline,
        "bwrap_per_s": rates["bwrap"][0],
        "bwrap_ratio": rates["bwrap"][0] / baseline,
        "contain_per_s": rates["contain"][0],
        "ratio": rates["contain"][0] / baseline,
        "contain_session_per_s": rates["contain-session"][0],
        "session_ratio": rates["contain-session"][0] / baseline,
    }


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value * 1e3:.2f}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def render_backend_table(report: StartupReport) -> list[str]:
    """One line per backend and command: baseline, API, ratio against the target, session. Pure."""
    rows = backend_rows(report)
    if not rows:
        return []
    lines = [
        f"{'backend':<16} {'cmd':<7} {'baseline':<36} {'base ms':>8} {'api ms':>8} {'api/base':>9} "
        f"{'target':>7} {'session ms':>11} {'session/api':>12}"
    ]
    for row in rows:
        lines.append(
            f"{row.backend:<16} {row.command:<7} {row.baseline_label:<36} {_ms(row.baseline_s):>8} "
            f"{_ms(row.api_s):>8} {_x(row.ratio):>9} {'<=' + format(row.max_ratio, 'g') + 'x':>7} "
            f"{_ms(row.session_s):>11} {_x(row.session_over_fresh):>12}"
        )
    return lines


def render_startup(report: StartupReport) -> str:
    """A plain-text table of every variant, the per-backend comparison, and the target ratios."""
    lines = [f"{'variant':<40} {'n':>4} {'median ms':>10} {'p95 ms':>9}"]
    for summary in report.summaries.values():
        lines.append(
            f"{summary.name:<40} {summary.samples:>4} {summary.median_s * 1e3:>10.2f} {summary.p95_s * 1e3:>9.2f}"
        )
    lines.append("")
    table = render_backend_table(report)
    if table:
        lines += [*table, ""]
    for target in BACKEND_TARGETS:
        api, base = f"{api_variant(target.backend)}/true", f"{target.baseline}/true"
        if report.has(api, base):
            lines.append(f"{api} vs {base}: {report.ratio(api, base):.2f}x (target <= {target.max_ratio:g}x)")
    if report.has("contain-api/python", "bwrap/python"):
        lines.append(f"contain-api/python vs bwrap/python: {report.ratio('contain-api/python', 'bwrap/python'):.2f}x")
    if report.has("contain-api/true", "bwrap-minimal/true"):
        lines.append(
            f"contain-api/true vs bwrap-minimal/true: {report.ratio('contain-api/true', 'bwrap-minimal/true'):.2f}x"
        )
    if "contain-cli/true" in report.summaries:
        lines.append(
            f"contain-cli/true median: {report.summaries['contain-cli/true'].median_s * 1e3:.1f} ms "
            f"(target <= {CLI_TARGET_MS:g} ms)"
        )
    if "contain-cli-uncached/true" in report.summaries:
        lines.append(
            "contain-cli-uncached/true median (first run of a new manifest): "
            f"{report.summaries['contain-cli-uncached/true'].median_s * 1e3:.1f} ms"
        )
    if report.throughput:
        t = report.throughput
        lines.append(
            f"throughput python3 -c pass: one-shot sandboxes {t['contain_per_s']:.1f}/s "
            f"vs bare {t['bare_per_s']:.1f}/s = {t['ratio']:.2f}x; a session per worker "
            f"{t['contain_session_per_s']:.1f}/s = {t['session_ratio']:.2f}x (target >= 0.6x); "
            f"raw bwrap one-shot {t['bwrap_per_s']:.1f}/s = {t['bwrap_ratio']:.2f}x"
        )
    return "\n".join(lines)


def default_contain_cli() -> str:
    """The `contain` next to the running interpreter (the venv's), else whatever PATH finds."""
    candidate = os.path.join(os.path.dirname(sys.executable), "contain")
    return candidate if os.path.exists(candidate) else "contain"
