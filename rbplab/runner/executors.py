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

from rbplab.core.errors import RbplabError
from rbplab.runner.units import WorkUnit
from rbplab.runner.worker import UnitResult, run_unit
from rbplab.store.cache import CacheEntry, CacheError

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
    """Each unit in turn, in this process (the torch thread setting is the process's)."""
    outcomes = []
    for unit in units:
        try:
            outcomes.append(UnitOutcome(unit, run_unit(unit, cache_dir, on_tokens), None))
        except (ValueError, LookupError, OSError, ImportError, RuntimeError) as err:
            outcomes.append(UnitOutcome(unit, None, _one_line(err)))
    return outcomes


def _init_process(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)


def run_processes(
    units: Sequence[WorkUnit], cache_dir: Path, on_tokens: Callable[[int], object], workers: int
) -> list[UnitOutcome]:
    """Units in `workers` processes of this machine, the CPUs split between them: on CPUs, small
    models run faster as several single-threaded processes than as one multi-threaded one."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    threads = max(1, (os.cpu_count() or workers) // workers)
    context = multiprocessing.get_context("spawn")  # a clean interpreter: no forked torch state
    outcomes: dict[int, UnitOutcome] = {}
    with ProcessPoolExecutor(
        workers, mp_context=context, initializer=_init_process, initargs=(threads,)
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


def _ray_task(unit: WorkUnit, cache_dir: str, threads: int) -> UnitResult:
    import torch

    torch.set_num_threads(max(1, threads))
    return run_unit(unit, cache_dir)


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
    remote = ray.remote(_ray_task)
    threads = max(1, math.floor(options.cpus_per_task))
    pending = {}
    for i, unit in enumerate(units):
        need = gpus_needed(unit.weight_bytes, memory, gpus)
        if need > 1 and unit.settings.device_map is None:  # too large for one GPU: spread it
            unit = replace(unit, settings=unit.settings.with_changes(device_map="auto"))
        task = remote.options(
            num_cpus=options.cpus_per_task,
            num_gpus=need,
            max_retries=options.max_retries,
            retry_exceptions=False,  # a bad model fails the same way each time; a lost worker is retried
        )
        # Outcomes are filed by position: a unit spread over GPUs above is a new object.
        pending[task.remote(unit, str(cache_dir), threads)] = i
    outcomes: dict[int, UnitOutcome] = {}
    progress = _CacheProgress(units, cache_dir, on_tokens)
    while pending:
        done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0.5)
        progress.poll()
        for ref in done:
            i = pending.pop(ref)
            try:
                outcomes[i] = UnitOutcome(units[i], ray.get(ref), None)
            except Exception as err:  # noqa: BLE001 - a task error is reported per unit
                cause = getattr(err, "cause", None) or err
                outcomes[i] = UnitOutcome(units[i], None, _one_line(cause))
                if not isinstance(cause, Exception):
                    traceback.print_exception(cause)
    progress.poll()
    return [outcomes[i] for i in range(len(units))]
