"""One line naming the machine a benchmark ran on, for comparing figures across sessions.

The project machine's CPU changes between sessions (the same code ran 2x faster on one
than on another), so the benchmarks print it next to the load average: the CPU model,
the cores this process may use, and the target numba compiles for (LLVM's name of the
host CPU and its widest vector extension: the followed kernel's lanes are vectorised).
"""
import os
import platform


def cpu_model() -> str:
    """The first model name and clock in ``/proc/cpuinfo`` (Linux), else :func:`platform.processor`."""
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
    """The widest of AVX-512, AVX2, AVX, SSE4.2 in LLVM's feature string (``+avx2,-avx512f,...``)."""
    enabled = {f[1:] for f in features.split(",") if f.startswith("+")}
    for name, flag in (("AVX-512", "avx512f"), ("AVX2", "avx2"), ("AVX", "avx"), ("SSE4.2", "sse4.2")):
        if flag in enabled:
            return name
    return "no x86 vector extension"


def describe() -> str:
    """``CPU: <model>; <n> cores usable; numba target <cpu> (<vector extension>)``."""
    from llvmlite import binding as llvm

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    target = os.environ.get("NUMBA_CPU_NAME") or llvm.get_host_cpu_name()
    # numba's rule (numba.core.config): the host's features unless NUMBA_CPU_FEATURES is set
    # (an empty string there means the named CPU's own features; so does NUMBA_CPU_NAME=generic)
    features = os.environ.get("NUMBA_CPU_FEATURES")
    if features is None and target != "generic":
        features = llvm.get_host_cpu_features().flatten()
    vectors = vector_extension(features) if features else f"{target}'s own features"
    return f"CPU: {cpu_model()}; {cores} cores usable; numba target {target} ({vectors})"


if __name__ == "__main__":
    print(describe())
