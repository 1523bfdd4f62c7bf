"""Iterations per second of a job type on a GPU type, from the best source available.

Sources, best first:

1. measurements reported by workers (an exponentially weighted moving average per
   (job type, GPU type, number of GPUs), added with :meth:`ThroughputModel.observe`);
2. a profile table (Gavel's throughputs JSON is read as-is);
3. a prior: relative GPU speeds. A job type known on another GPU type is scaled by the
   speed ratio; an unknown job type runs at ``base_rate`` x the GPU's relative speed.

The model is immutable: :meth:`observe` returns a new model, so a policy can hold one for
a whole round while the daemon builds the next from fresh measurements. Lookups are
memoized per instance, which is safe for the same reason.
"""

from __future__ import annotations

import ast
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

#: Rough relative training speed per GPU type (K80 = 1). Used only where neither a
#: measurement nor a profile entry exists; an admin overrides them in the master's config.
DEFAULT_GPU_SPEEDS: Mapping[str, float] = MappingProxyType(
    {
        "k80": 1.0,
        "m60": 1.2,
        "p40": 2.0,
        "p100": 2.2,
        "t4": 1.8,
        "v100": 3.3,
        "rtx2080ti": 3.0,
        "rtx3090": 4.2,
        "a10": 3.8,
        "a40": 5.0,
        "a100-40gb": 6.5,
        "a100-80gb": 7.0,
        "l40s": 7.0,
        "h100": 11.0,
    }
)

UNCONSOLIDATED_SUFFIX = "_unconsolidated"

#: The iterations per second a measurement may claim. A job's own process reports its
#: rate, so any positive number can arrive; beyond these (a step per 11 days, a million
#: steps a second) it is no training step's rate, and the model ignores it rather than
#: hand every policy figures 300 orders of magnitude apart
#: (tests/unit/policies/test_extremes.py plans with rates at both ends).
MEASURED_RATE_MIN = 1e-6
MEASURED_RATE_MAX = 1e6


def plausible_rate(iterations_per_s: float) -> bool:
    """Whether a measured rate is within :data:`MEASURED_RATE_MIN` and
    :data:`MEASURED_RATE_MAX` (NaN is not)."""
    return MEASURED_RATE_MIN <= iterations_per_s <= MEASURED_RATE_MAX


Source = Literal["measured", "profile", "prior"]

_Key = tuple[str, str, int, bool]


@dataclass(frozen=True, slots=True)
class Estimate:
    """One throughput figure and where it came from."""

    iterations_per_s: float
    source: Source


def _parse_gavel_key(text: str) -> tuple[str, int]:
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError) as exc:
        raise ValueError(f"bad throughput key {text!r}: expected \"('<job type>', <n>)\"") from exc
    if (
        not isinstance(value, tuple)
        or len(value) != 2
        or not isinstance(value[0], str)
        or not isinstance(value[1], int)
    ):
        raise ValueError(f"bad throughput key {text!r}: expected \"('<job type>', <n>)\"")
    return value[0], value[1]


class ThroughputModel:
    """Immutable iterations-per-second model; see the module docstring for the sources."""

    __slots__ = (
        "_alpha",
        "_base_rate",
        "_cache",
        "_measured",
        "_pairs",
        "_profile",
        "_profile_jobs",
        "_rates",
        "_scaling_efficiency",
        "_speeds",
    )

    def __init__(
        self,
        profile: Mapping[tuple[str, str, int, bool], float] | None = None,
        pairs: Mapping[tuple[str, str, str, int], tuple[float, float]] | None = None,
        *,
        speeds: Mapping[str, float] | None = None,
        base_rate: float = 1.0,
        scaling_efficiency: float = 0.9,
        alpha: float = 0.3,
        measurements: Mapping[tuple[str, str, int], float] | None = None,
    ) -> None:
        """Build a model.

        ``profile`` maps (job type, GPU type, number of GPUs, consolidated) to iterations/s;
        ``pairs`` maps (job type a, job type b, GPU type, number of GPUs) to the two jobs'
        iterations/s when they share the same GPUs. ``speeds`` overrides or extends
        :data:`DEFAULT_GPU_SPEEDS`. ``scaling_efficiency`` is the per-doubling efficiency
        used when extrapolating to a GPU count the profile lacks. ``alpha`` is the EWMA
        weight of a new measurement.
        """
        if base_rate <= 0:
            raise ValueError(f"base_rate must be > 0, got {base_rate}")
        if not 0 < scaling_efficiency <= 1:
            raise ValueError(f"scaling_efficiency must be in (0, 1], got {scaling_efficiency}")
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        merged = dict(DEFAULT_GPU_SPEEDS)
        for gpu_type, speed in (speeds or {}).items():
            if speed <= 0:
                raise ValueError(f"speed of {gpu_type} must be > 0, got {speed}")
            merged[gpu_type] = speed
        self._speeds: Mapping[str, float] = MappingProxyType(merged)
        self._profile: Mapping[_Key, float] = MappingProxyType(dict(profile or {}))
        self._pairs: Mapping[tuple[str, str, str, int], tuple[float, float]] = MappingProxyType(
            dict(pairs or {})
        )
        self._measured: Mapping[tuple[str, str, int], float] = MappingProxyType(
            dict(measurements or {})
        )
        jobs: dict[str, dict[str, dict[int, float]]] = {}
        for (job, gpu, n, consolidated), value in self._profile.items():
            if consolidated and value > 0:
                jobs.setdefault(job, {}).setdefault(gpu, {})[n] = value
        self._profile_jobs = jobs
        self._base_rate = base_rate
        self._scaling_efficiency = scaling_efficiency
        self._alpha = alpha
        self._cache: dict[_Key, Estimate] = {}
        # The speeds alone, for the hot path of planning (one lookup, no Estimate).
        self._rates: dict[_Key, float] = {}

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_gavel_json(cls, path: str | Path, **kwargs: Any) -> ThroughputModel:
        """Read a Gavel throughputs file (``simulation_throughputs.json``) as-is."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"throughputs file not found: {path}") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        try:
            return cls.from_gavel_dict(data, **kwargs)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    @classmethod
    def from_gavel_dict(cls, data: Mapping[str, Any], **kwargs: Any) -> ThroughputModel:
        """Gavel layout: ``{gpu_type: {"('<job>', n)": {"null": x, "('<other>', n)": [a, b]}}}``."""
        if not isinstance(data, Mapping):
            raise ValueError("throughputs must be a JSON object keyed by GPU type")
        profile: dict[_Key, float] = {}
        pairs: dict[tuple[str, str, str, int], tuple[float, float]] = {}
        for raw_type, entries in data.items():
            consolidated = not raw_type.endswith(UNCONSOLIDATED_SUFFIX)
            gpu_type = raw_type if consolidated else raw_type[: -len(UNCONSOLIDATED_SUFFIX)]
            if not isinstance(entries, Mapping):
                raise ValueError(f"entries for GPU type {raw_type!r} must be an object")
            for raw_key, values in entries.items():
                job, n = _parse_gavel_key(raw_key)
                if not isinstance(values, Mapping):
                    raise ValueError(f"{raw_type} {raw_key}: expected an object of throughputs")
                for other_key, value in values.items():
                    if other_key == "null":
                        if not isinstance(value, int | float) or value < 0:
                            raise ValueError(f"{raw_type} {raw_key}: bad isolated value {value!r}")
                        profile[(job, gpu_type, n, consolidated)] = float(value)
                    elif consolidated:
                        other, other_n = _parse_gavel_key(other_key)
                        if (
                            not isinstance(value, list)
                            or len(value) != 2
                            or not all(isinstance(v, int | float) for v in value)
                        ):
                            raise ValueError(
                                f"{raw_type} {raw_key} with {other_key}: expected [self, other]"
                            )
                        if other_n == n:
                            pairs[(job, other, gpu_type, n)] = (float(value[0]), float(value[1]))
        return cls(profile, pairs, **kwargs)

    def observe(
        self, job_type: str, gpu_type: str, num_gpus: int, iterations_per_s: float
    ) -> ThroughputModel:
        """A new model with this measurement folded into the EWMA for its key."""
        if iterations_per_s < 0 or not math.isfinite(iterations_per_s):
            raise ValueError(f"measured throughput must be finite and >= 0: {iterations_per_s}")
        key = (job_type, gpu_type, num_gpus)
        old = self._measured.get(key)
        new = (
            iterations_per_s
            if old is None
            else self._alpha * iterations_per_s + (1 - self._alpha) * old
        )
        measurements = dict(self._measured)
        measurements[key] = new
        return ThroughputModel(
            self._profile,
            self._pairs,
            speeds=self._speeds,
            base_rate=self._base_rate,
            scaling_efficiency=self._scaling_efficiency,
            alpha=self._alpha,
            measurements=measurements,
        )

    def with_speeds(self, speeds: Mapping[str, float]) -> ThroughputModel:
        """A new model with these relative GPU speeds merged over the current ones."""
        merged = dict(self._speeds)
        merged.update(speeds)
        return ThroughputModel(
            self._profile,
            self._pairs,
            speeds=merged,
            base_rate=self._base_rate,
            scaling_efficiency=self._scaling_efficiency,
            alpha=self._alpha,
            measurements=self._measured,
        )

    # ----------------------------------------------------------------------- lookups
    @property
    def speeds(self) -> Mapping[str, float]:
        return self._speeds

    def speed(self, gpu_type: str) -> float:
        """Relative speed prior of a GPU type (1.0 for an unknown type)."""
        return self._speeds.get(gpu_type, 1.0)

    def job_types(self) -> tuple[str, ...]:
        """Job types the profile knows."""
        return tuple(sorted(self._profile_jobs))

    def knows(self, job_type: str) -> bool:
        return job_type in self._profile_jobs or any(k[0] == job_type for k in self._measured)

    def throughput(
        self, job_type: str, gpu_type: str, num_gpus: int = 1, *, consolidated: bool = True
    ) -> float:
        """Iterations/s of the whole job on ``num_gpus`` GPUs of ``gpu_type``."""
        key = (job_type, gpu_type, num_gpus, consolidated)
        rate = self._rates.get(key)
        if rate is None:
            found = self.estimate(job_type, gpu_type, num_gpus, consolidated=consolidated)
            rate = self._rates[key] = found.iterations_per_s
        return rate

    def estimate(
        self, job_type: str, gpu_type: str, num_gpus: int = 1, *, consolidated: bool = True
    ) -> Estimate:
        """Like :meth:`throughput`, also saying which source answered."""
        if num_gpus < 1:
            raise ValueError(f"num_gpus must be >= 1, got {num_gpus}")
        key = (job_type, gpu_type, num_gpus, consolidated)
        cached = self._cache.get(key)
        if cached is None:
            cached = self._lookup(job_type, gpu_type, num_gpus, consolidated)
            self._cache[key] = cached
        return cached

    def _lookup(self, job: str, gpu: str, n: int, consolidated: bool) -> Estimate:
        measured = self._measured.get((job, gpu, n))
        if measured is not None:
            return Estimate(measured, "measured")
        if not consolidated:
            spread = self._profile.get((job, gpu, n, False))
            if spread is not None and spread > 0:
                return Estimate(spread, "profile")
        exact = self._profile.get((job, gpu, n, True))
        if exact is not None and exact > 0:
            return Estimate(exact, "profile")
        if consolidated:
            # A spread figure at the right scale is closer than any extrapolation.
            spread = self._profile.get((job, gpu, n, False))
            if spread is not None and spread > 0:
                return Estimate(spread, "profile")
        by_type = self._profile_jobs.get(job)
        if by_type:
            on_type = by_type.get(gpu)
            if on_type:
                return Estimate(self._scale(on_type, n), "profile")
            # Known job, unprofiled GPU type: scale from the closest-speed profiled type.
            ref_type = min(by_type, key=lambda t: abs(math.log(self.speed(t) / self.speed(gpu))))
            ratio = self.speed(gpu) / self.speed(ref_type)
            return Estimate(self._scale(by_type[ref_type], n) * ratio, "prior")
        measured_types = {g: v for (j, g, k), v in self._measured.items() if j == job and k == n}
        if measured_types:
            ref_type = min(
                measured_types, key=lambda t: abs(math.log(self.speed(t) / self.speed(gpu)))
            )
            return Estimate(
                measured_types[ref_type] * self.speed(gpu) / self.speed(ref_type), "prior"
            )
        return Estimate(self._base_rate * self.speed(gpu) * self._scale({1: 1.0}, n), "prior")

    def _scale(self, by_n: Mapping[int, float], n: int) -> float:
        """Extrapolate from the closest profiled GPU count (lower preferred)."""
        if n in by_n:
            return by_n[n]
        lower = [k for k in by_n if k < n]
        k = max(lower) if lower else min(by_n)
        doublings = abs(math.log2(n / k))
        factor = float(self._scaling_efficiency ** (doublings if n > k else -doublings))
        return by_n[k] * (n / k) * factor

    def colocated(
        self, job_type_a: str, job_type_b: str, gpu_type: str, num_gpus: int = 1
    ) -> tuple[float, float] | None:
        """(iterations/s of a, of b) when both share the same ``num_gpus`` GPUs.

        None when the profile has no figure for the pair or marks it infeasible (zeros:
        the two do not fit together).
        """
        pair = self._pairs.get((job_type_a, job_type_b, gpu_type, num_gpus))
        if pair is None:
            back = self._pairs.get((job_type_b, job_type_a, gpu_type, num_gpus))
            if back is not None:
                pair = (back[1], back[0])
        if pair is None or pair[0] <= 0 or pair[1] <= 0:
            return None
        return pair

    def best_type(self, job_type: str, gpu_types: Iterable[str], num_gpus: int = 1) -> str | None:
        """The fastest of ``gpu_types`` for this job (ties by name); None for no types."""
        best: tuple[float, str] | None = None
        for gpu_type in sorted(set(gpu_types)):
            value = self.throughput(job_type, gpu_type, num_gpus)
            if best is None or value > best[0]:
                best = (value, gpu_type)
        return None if best is None else best[1]

    def normalized_speed(self, job_type: str, gpu_type: str, reference_type: str) -> float:
        """Speed of ``job_type`` on ``gpu_type`` relative to ``reference_type`` (1 GPU)."""
        ref = self.throughput(job_type, reference_type, 1)
        return self.throughput(job_type, gpu_type, 1) / ref if ref > 0 else self.speed(gpu_type)
