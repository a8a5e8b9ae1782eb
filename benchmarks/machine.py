"""One line naming the machine a benchmark ran on, for comparing figures across sessions.

The project machine changes between sessions (the same solver kernels ran about twice as
fast on one as on another), so the benchmarks print it next to the load average: the CPU model,
the cores this process may use, and the target numba compiles for (LLVM's name of the
host CPU and its widest vector extension: the followed kernel's lanes are vectorised).
:func:`cpu_times` and :func:`steal` tell whether the cores were the benchmark's: on a virtual
machine the hypervisor may run other guests on them ("steal" time), which the load average
does not show.
"""
import os
import platform

import psutil


def cpu_model() -> str:
    """The first model name and clock in ``/proc/cpuinfo`` (Linux; the clock at that moment, not
    the rated one), else :func:`platform.processor`."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    model = fields.get("model name") or platform.processor() or "unknown CPU"
    return f"{model} at {float(fields['cpu MHz']):.0f} MHz" if "cpu MHz" in fields else model


def vector_extension(features: str) -> str:
    """The widest of AVX-512, AVX2, AVX, SSE4.2 switched on (``+``) in LLVM's feature string
    (``+avx2,-avx512f,...``; numba passes the host's in full)."""
    enabled = {f[1:] for f in features.split(",") if f.startswith("+")}
    for name, flag in (("AVX-512", "avx512f"), ("AVX2", "avx2"), ("AVX", "avx"), ("SSE4.2", "sse4.2")):
        if flag in enabled:
            return name
    return "no x86 vector extension"


def describe() -> str:
    """``CPU: <model>; <n> cores usable; numba target <cpu> (<vector extension>)``, with the CPU
    name and features numba compiles for (its configuration: ``NUMBA_CPU_NAME``,
    ``NUMBA_CPU_FEATURES``, ``NUMBA_ENABLE_AVX``, ``.numba_config.yaml``). Never raises: a
    benchmark prints it after its measurements."""
    try:
        from llvmlite import binding as llvm
        from numba.core import codegen, config

        target = config.CPU_NAME if config.CPU_NAME is not None else llvm.get_host_cpu_name()
        features = config.CPU_FEATURES if config.CPU_FEATURES is not None else codegen.get_host_cpu_features()
        # an empty feature string: LLVM uses the named CPU's own features
        vectors = vector_extension(features) if features else f"{target or 'unnamed CPU'}'s own features"
        numba_part = f"numba target {target or '(empty name)'} ({vectors})"
    except Exception as exc:  # (an llvmlite without these functions)
        numba_part = f"numba target unknown ({type(exc).__name__}: {exc})"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"CPU: {cpu_model()}; {cores} cores usable; {numba_part}"


def cpu_times():
    """Cumulative CPU times of the whole machine (:func:`psutil.cpu_times`), to pass to :func:`steal`."""
    return psutil.cpu_times()


def steal(before) -> str:
    """``steal <p>% of <s> CPU-s``: the share of the machine's CPU time since ``before`` (from
    :func:`cpu_times`) that the hypervisor gave to other virtual machines, or ``steal not
    reported`` where the system has no such counter (not Linux)."""
    after = cpu_times()
    if not hasattr(after, "steal"):
        return "steal not reported"
    # on Linux guest and guest_nice are already counted in user and nice
    fields = [f for f in after._fields if f not in ("guest", "guest_nice")]
    total = sum(getattr(after, f) - getattr(before, f) for f in fields)
    stolen = after.steal - before.steal
    return f"steal {100 * stolen / total:.1f}% of {total:.0f} CPU-s" if total > 0 else "steal: no CPU time elapsed"


if __name__ == "__main__":
    print(describe())
