"""Where work units run: in this process (`local`) or as Ray tasks (`ray`).

An executor takes units and a callback for scored tokens (the driver's progress bar) and
returns one `UnitResult` or error per unit. The cache directory is the only thing the workers
share with the driver: with Ray on several machines it must be a filesystem every node sees.
"""

from __future__ import annotations

import math
import os
import socket
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rbplab.core.errors import RbplabError
from rbplab.core.settings import ExtractionSettings
from rbplab.runner.units import UnitResult, WorkUnit, release_models, run_unit
from rbplab.store.cache.entry import CacheEntry
from rbplab.store.cache.reading import CacheError

RAY_HINT = "pip install 'rbplab[ray]'"


class ExecutorError(RbplabError, RuntimeError):
    """An executor that cannot start (Ray missing, cluster unreachable); nothing was run."""


@dataclass(frozen=True)
class UnitOutcome:
    unit: WorkUnit
    result: UnitResult | None
    error: str | None  # one line, when the unit failed for good


def _one_line(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())}"


def run_local(
    units: Sequence[WorkUnit], cache_dir: Path, on_tokens: Callable[[int], object]
) -> list[UnitOutcome]:
    """Each unit in turn, in this process (the torch thread setting is the process's). The model
    kept between units of one model is dropped at the end: the caller's session goes on."""
    outcomes = []
    try:
        for unit in units:
            try:
                outcomes.append(UnitOutcome(unit, run_unit(unit, cache_dir, on_tokens), None))
            except (ValueError, LookupError, OSError, ImportError, RuntimeError) as err:
                outcomes.append(UnitOutcome(unit, None, _one_line(err)))
    finally:
        release_models()
    return outcomes


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them (indices or UUIDs); empty
    on a machine without CUDA. Reads the device count without creating a CUDA context."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [name.strip() for name in listed.split(",") if name.strip()]
    try:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    except (ImportError, RuntimeError):
        return []


def worker_devices(workers: int, gpus: list[str], settings: ExtractionSettings) -> list[str | None]:
    """CUDA_VISIBLE_DEVICES of each of `workers` processes: worker i gets GPU i mod n, so n workers
    on n GPUs run one model each. None (inherit) when there is no GPU or the settings name devices
    themselves (a device map spreads one model over GPUs; "cuda:1" names one; "cpu" uses none)."""
    if not gpus or settings.device_map is not None or settings.device not in ("auto", "cuda"):
        return [None] * workers
    return [gpus[i % len(gpus)] for i in range(workers)]


def worker_threads(workers: int) -> int:
    """Torch threads of each of `workers` local worker processes (`run_processes`): this
    machine's CPUs split between them, at least one each."""
    return max(1, (os.cpu_count() or workers) // workers)


def _init_process(threads: int, devices: Any, parent: int) -> None:
    # Runs first in each worker, before anything touches CUDA (torch reads CUDA_VISIBLE_DEVICES
    # when it creates its CUDA context, at the first CUDA call, not at import).
    exit_with_parent(parent)
    device = devices.get(timeout=600)  # put before the pool started; the feeder may lag
    if device is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = device
    import torch

    torch.set_num_threads(threads)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def exit_with_parent(parent: int) -> None:
    """Make this process die when `parent` (the driver) does: a driver killed with SIGKILL cannot
    stop its workers, which would otherwise score on, holding GPUs, until their unit ends. Linux:
    the kernel sends SIGKILL on the parent's death (prctl PR_SET_PDEATHSIG); elsewhere a daemon
    thread polls the parent id. A parent already gone when this runs ends the process at once.
    (The kernel tracks the thread that started the process: a spawn pool starts its workers from
    the thread that submits, which `run_processes` keeps waiting until the pool is done.)"""
    import ctypes
    import signal
    import sys
    import threading
    import time

    armed = False
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if os.getppid() != parent:  # died before the signal was armed
        os._exit(1)
    if not armed:

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=watch, daemon=True, name="rbplab-parent-watch").start()


def run_processes(
    units: Sequence[WorkUnit], cache_dir: Path, on_tokens: Callable[[int], object], workers: int
) -> list[UnitOutcome]:
    """Units in `workers` processes of this machine, the CPUs split between them: on CPUs, small
    models run faster as several single-threaded processes than as one multi-threaded one. On a
    machine with GPUs, worker i sees only GPU i mod n (`worker_devices`). Workers die with this
    process, and keep their loaded model for the next unit of the same model (`run_unit`)."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    threads = worker_threads(workers)
    context = multiprocessing.get_context("spawn")  # a clean interpreter: no forked torch state
    devices = context.Queue()
    for device in worker_devices(workers, visible_gpus(), units[0].settings):
        devices.put(device)
    outcomes: dict[int, UnitOutcome] = {}
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_init_process, initargs=(threads, devices, os.getpid())
    ) as pool:
        futures = {pool.submit(run_unit, unit, str(cache_dir)): i for i, unit in enumerate(units)}
        pending, progress = set(futures), _CacheProgress(units, cache_dir, on_tokens)
        while pending:
            done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            progress.poll()
            for future in done:
                i = futures[future]
                try:
                    outcomes[i] = UnitOutcome(units[i], future.result(), None)
                except Exception as err:  # noqa: BLE001 - reported per unit; a re-run resumes
                    outcomes[i] = UnitOutcome(units[i], None, _one_line(err))
    progress.poll()
    return [outcomes[i] for i in range(len(units))]


@dataclass(frozen=True)
class RayOptions:
    address: str | None = None  # None/"auto": a running cluster, else a local one started for the run
    gpus_per_task: float | None = None  # None: 1 when the cluster has GPUs, else 0
    cpus_per_task: float = 1
    max_retries: int = 3  # retries of tasks whose worker died (Ray's task retries)
    num_cpus: int | None = None  # for a local cluster started here
    gpu_memory_gb: float | None = None  # per GPU; None: read from this machine's GPU 0 when it has one


# Weights take this share of a GPU at most; activations, the float32 head copy and the rank
# buffers need the rest.
WEIGHT_SHARE_OF_GPU = 0.6


def gpus_needed(weight_bytes: int, gpu_memory_bytes: float | None, minimum: float) -> float:
    """GPUs for one unit: `minimum`, or more when the model's weights do not fit one GPU (the unit
    then runs with device_map="auto" across them)."""
    if not gpu_memory_bytes or minimum <= 0 or weight_bytes <= 0:
        return minimum
    return float(max(minimum, math.ceil(weight_bytes / (WEIGHT_SHARE_OF_GPU * gpu_memory_bytes))))


def cluster_gpus(options: RayOptions) -> float:
    ray = connect_ray(options)
    return float(ray.cluster_resources().get("GPU", 0))


def _gpu_memory(options: RayOptions) -> float | None:
    if options.gpu_memory_gb:
        return options.gpu_memory_gb * 2**30
    try:
        import torch

        return float(torch.cuda.get_device_properties(0).total_memory) if torch.cuda.is_available() else None
    except (ImportError, RuntimeError):
        return None


def _check_reachable(address: str, timeout: float = 3.0) -> None:
    """A one-line error within seconds for a head node that does not answer (ray.init can hang)."""
    host_port = address.split("://", 1)[-1]
    host, _, port = host_port.rpartition(":")
    if not host or not port.isdigit():
        raise ExecutorError(f"--address {address!r} is not host:port (e.g. 10.0.0.5:6379) or 'auto'")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise ExecutorError(
            f"cannot reach a Ray cluster at {address} ({err.strerror or err}); start one with "
            "`ray start --head` or leave --address out to run on a local cluster"
        ) from None


def connect_ray(options: RayOptions):
    try:
        import ray
    except ImportError:
        raise ExecutorError(f"the ray executor needs Ray: {RAY_HINT}") from None
    if ray.is_initialized():
        return ray
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": "WARNING"}
    if options.address in (None, "auto"):
        try:
            ray.init(address="auto", log_to_driver=False, logging_level="WARNING")
        except ConnectionError:
            ray.init(num_cpus=options.num_cpus, **quiet)
    else:
        _check_reachable(options.address)
        ray.init(address=options.address, log_to_driver=False, logging_level="WARNING")
    return ray


def _ray_task(
    units: list[WorkUnit], cache_dir: str, threads: int
) -> list[tuple[UnitResult | None, str | None]]:
    """Units of one model, in one worker process (so its weights load once): a result or a
    one-line error per unit. A worker that dies fails the task, which Ray retries whole (shards
    already written are kept)."""
    import torch

    torch.set_num_threads(max(1, threads))
    out: list[tuple[UnitResult | None, str | None]] = []
    for unit in units:
        try:
            out.append((run_unit(unit, cache_dir), None))
        except (ValueError, LookupError, OSError, ImportError, RuntimeError) as err:
            out.append((None, _one_line(err)))
    return out


def ray_remote(ray: Any, function: Callable, *, cpus: float, gpus: float, max_retries: int) -> Any:
    """`function` as a Ray task with these resources. A GPU task gets a fresh worker process
    (max_calls=1): Ray sets CUDA_VISIBLE_DEVICES per task, but a reused worker keeps the CUDA
    context of its first GPU, so two tasks could share one GPU. Ray defaults max_calls to 1 only
    for num_gpus given to the decorator, not through .options(), so it is set here."""
    options: dict[str, Any] = {
        "num_cpus": cpus,
        "num_gpus": gpus,
        "max_retries": max_retries,
        "retry_exceptions": False,  # a bad model fails the same way each time; a lost worker is retried
    }
    if gpus > 0:
        options["max_calls"] = 1
    return ray.remote(**options)(function)


def task_groups(units: Sequence[WorkUnit], slots: int) -> list[list[int]]:
    """Positions of `units` cut into Ray tasks for GPU workers (a fresh process per task): units of
    one model (same ref and settings) share a task so the model loads once per task, in groups of
    at most ceil(len(units) / slots) so that `slots` GPUs all get work. Order within a model kept."""
    size = max(1, math.ceil(len(units) / max(1, slots)))
    by_model: dict[tuple, list[int]] = {}
    for i, unit in enumerate(units):
        by_model.setdefault((unit.ref, unit.settings), []).append(i)
    return [
        group[start : start + size] for group in by_model.values() for start in range(0, len(group), size)
    ]


def _import_model_code(seconds: float) -> int:
    import time

    import rbplab.extraction.pipeline  # noqa: F401 - torch and transformers: seconds per fresh worker

    time.sleep(seconds)  # hold the CPU so the next warm-up task lands on another worker
    return os.getpid()


def warm_up_workers(options: RayOptions, workers: int) -> int:
    """Start `workers` Ray workers and import the model code in each (what a cold task pays
    once); returns how many distinct worker processes answered."""
    ray = connect_ray(options)
    task = ray.remote(_import_model_code).options(num_cpus=options.cpus_per_task)
    return len(set(ray.get([task.remote(1.0) for _ in range(workers)])))


class _CacheProgress:
    """Reports scored tokens as the units' shards appear in the shared cache, read from the
    shards' checksum records (for the progress bar only; data is never read this way). Workers in
    other processes or on other machines need no channel back to the driver."""

    def __init__(self, units: Sequence[WorkUnit], cache_dir: Path, on_tokens: Callable[[int], object]):
        self.units, self.cache_dir, self.on_tokens = units, cache_dir, on_tokens
        self.entries: dict[str, CacheEntry] = {}
        self.seen = 0

    def poll(self) -> None:
        total = 0
        for unit in self.units:
            if unit.key not in self.entries:
                try:
                    self.entries[unit.key] = CacheEntry.open(unit.key, self.cache_dir)
                except CacheError:
                    continue
            total += sum(self.entries[unit.key].recorded_rows(index) for index in unit.shards)
        if total > self.seen:
            self.on_tokens(total - self.seen)
            self.seen = total


def run_ray(
    units: Sequence[WorkUnit], cache_dir: Path, on_tokens: Callable[[int], object], options: RayOptions
) -> list[UnitOutcome]:
    """Units as Ray tasks, retried when their worker dies; results gathered as they finish."""
    ray = connect_ray(options)
    gpus = options.gpus_per_task
    if gpus is None:
        gpus = 1 if cluster_gpus(options) > 0 else 0
    memory = _gpu_memory(options)
    threads = max(1, math.floor(options.cpus_per_task))
    placed = []
    for unit in units:
        need = gpus_needed(unit.weight_bytes, memory, gpus)
        if need > 1 and unit.settings.device_map is None:  # too large for one GPU: spread it
            unit = replace(unit, settings=unit.settings.with_changes(device_map="auto"))
        placed.append((unit, need))
    if gpus > 0:  # a fresh process per task: units of one model share one
        groups = task_groups([u for u, _ in placed], int(cluster_gpus(options) // gpus) or 1)
    else:  # CPU workers are reused, and keep their model between tasks (run_unit)
        groups = [[i] for i in range(len(units))]
    pending = {}
    for group in groups:
        task = ray_remote(
            ray,
            _ray_task,
            cpus=options.cpus_per_task,
            gpus=placed[group[0]][1],
            max_retries=options.max_retries,
        )
        # Outcomes are filed by position: a unit spread over GPUs above is a new object.
        pending[task.remote([placed[i][0] for i in group], str(cache_dir), threads)] = group
    outcomes: dict[int, UnitOutcome] = {}
    progress = _CacheProgress(units, cache_dir, on_tokens)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
        progress.poll()
        for ref in done:
            group = pending.pop(ref)
            try:
                for i, (result, error) in zip(group, ray.get(ref), strict=True):
                    outcomes[i] = UnitOutcome(units[i], result, error)
            except Exception as err:  # noqa: BLE001 - a task error is reported per unit
                cause = getattr(err, "cause", None) or err
                for i in group:
                    outcomes[i] = UnitOutcome(units[i], None, _one_line(cause))
                if not isinstance(cause, Exception):
                    traceback.print_exception(cause)
    progress.poll()
    return [outcomes[i] for i in range(len(units))]
